// Moving tensor bytes between device (CUDA) memory and host memory for the
// save, load and async-save paths, on top of the active DeviceBackend
// (device_backend.h) and the pinned pool (pinned_pool.h). Errors are Status
// values naming the call and the device; callers add the entry.
//
// Thread safety: every function may be called from several threads at once.
#ifndef CKPTDB_SRC_DEVICE_STAGING_H_
#define CKPTDB_SRC_DEVICE_STAGING_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ckptdb/state_dict.h"
#include "ckptdb/status.h"

namespace ckptdb {

// CUDA devices this process can use (0 without the CUDA path, a driver or a
// device).
int CudaDeviceCount();

// The CUDA device of the first tensor or shard of `sd` on one, or -1.
int FirstDeviceOf(const StateDict& sd);

// Checks that every tensor's device can be used (else the backend's error
// with "entry '<fqn>' on cuda:N" in front) and then waits, once
// per device `sd` uses, for the work queued on it: what a save copies, or a
// load overwrites, is the memory as the application's kernels left it.
// `only`, when not empty, limits both to those entries.
Status CheckAndSynchronizeDevices(const StateDict& sd, const std::vector<std::string>& only = {});

// Copies n bytes of device memory into a buffer leased from the pinned pool
// and calls use() with it; the buffer goes back to the pool afterwards.
Status WithBytesFromDevice(int device, const void* device_src, size_t n, const std::function<void(const char*)>& use);

// Copies n host bytes to device memory, and n device bytes to any host
// memory, through buffers leased from the pinned pool, at most 16 MiB (and
// the limit) at a time.
Status StageToDevice(int device, const char* host_src, size_t n, void* device_dst);
Status StageFromDevice(int device, const void* device_src, void* host_dst, size_t n);

// Copies n bytes of device memory straight into pinned host memory the
// caller owns (AllocPinnedHost), in one copy.
Status CopyFromDevice(int device, const void* device_src, void* host_dst, size_t n);

// Pinned host memory outside the pool (AsyncSaver's slots), allocated with
// `device` current; freed by the backend that allocated it when the pointer
// is destroyed.
using PinnedBuffer = std::unique_ptr<char, std::function<void(char*)>>;
StatusOr<PinnedBuffer> AllocPinnedHost(size_t n, int device);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_DEVICE_STAGING_H_
