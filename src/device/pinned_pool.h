// The process's pool of pinned host buffers for device staging
// (include/ckptdb/staging.h has the user-facing contract): buffers are
// allocated from the active DeviceBackend on first need, kept when they come
// back, and reused; the bytes lent out at once never exceed the limit.
//
// Thread safety: all of it may be used from any thread.
#ifndef CKPTDB_SRC_PINNED_POOL_H_
#define CKPTDB_SRC_PINNED_POOL_H_

#include <cstddef>

#include "ckptdb/staging.h"
#include "ckptdb/status.h"

namespace ckptdb {

class DeviceBackend;

// A buffer lent by the pool; gives it back when destroyed. Buffers are
// pinned for every device (portable); `device` only says which device is
// current while one is allocated or freed.
class PinnedLease {
 public:
  PinnedLease() = default;
  PinnedLease(PinnedLease&& o) noexcept;
  PinnedLease& operator=(PinnedLease&& o) noexcept;
  ~PinnedLease();
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  friend class PinnedPoolAccess;
  char* data_ = nullptr;
  size_t size_ = 0;
  DeviceBackend* backend_ = nullptr;
  int device_ = 0;
};

// A buffer of at least n bytes (n > 0), for copies with `device`, waiting
// while lending it would pass the limit; requests are served in the order
// they arrive. InvalidArgument when n alone is
// over the limit (also when the limit is lowered below n while waiting); the
// backend's error when pinned memory cannot be allocated.
StatusOr<PinnedLease> LeasePinned(size_t n, int device);

// The pool's limit now (SetDeviceStagingLimit).
uint64_t PinnedPoolLimit();

// Frees every buffer that is not lent out (tests swap backends around it).
void TrimPinnedPool();

// Counts copies into the pool's statistics.
void CountStagedBytes(uint64_t to_host, uint64_t to_device);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_PINNED_POOL_H_
