// Host staging memory for CUDA tensors.
//
// A save copies a CUDA tensor off the device chunk by chunk on the store's
// worker threads, each chunk into a pinned host buffer that is checksummed
// and compressed while other workers copy the next chunks and one thread
// appends earlier ones to the SST file; a load copies each verified chunk
// onto the device as it is read. (AsyncSaver is different: it must take the
// whole state off the device before SaveAsync returns, into pinned slots of
// its own; see async_save.h.)
//
// Those buffers come from one pool per process: allocated on first use,
// reused by every later save and load, and never more than the limit lent
// out at once; a copy that would pass the limit waits for a buffer to come
// back. A single chunk larger than the limit is an error naming both.
#ifndef CKPTDB_STAGING_H_
#define CKPTDB_STAGING_H_

#include <cstdint>

#include "ckptdb/status.h"

namespace ckptdb {

constexpr uint64_t kDefaultDeviceStagingBytes = uint64_t{256} << 20;

struct DeviceStagingStats {
  uint64_t limit_bytes = 0;        // the bound (SetDeviceStagingLimit)
  uint64_t pinned_bytes = 0;       // allocated now, lent out or free
  uint64_t peak_in_use_bytes = 0;  // most bytes lent out at once, since the process started
  uint64_t allocations = 0;        // pinned allocations made (reuse keeps this small)
  uint64_t bytes_to_host = 0;      // device-to-host bytes copied by saves
  uint64_t bytes_to_device = 0;    // host-to-device bytes copied by loads
};

// Bounds the pool (default kDefaultDeviceStagingBytes). InvalidArgument for
// 0. Applies to later requests; free buffers above a lowered limit are given
// back to the system at once, lent ones when they come back.
Status SetDeviceStagingLimit(uint64_t bytes);

DeviceStagingStats GetDeviceStagingStats();

}  // namespace ckptdb

#endif  // CKPTDB_STAGING_H_
