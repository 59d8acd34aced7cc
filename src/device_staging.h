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

#include "ckptdb/state_dict.h"
#include "ckptdb/status.h"

namespace ckptdb {

// CUDA devices this process can use (0 without the CUDA path, a driver or a
// device).
int CudaDeviceCount();

// OK for a CPU tensor, or one whose device can be used; else the backend's
// error with "entry '<fqn>' on cuda:N" in front.
Status CheckTensorDevice(const std::string& fqn, const Tensor& t);

// True when any tensor or shard of `sd` lives on a CUDA device.
bool HasDeviceTensors(const StateDict& sd);

// Checks every tensor's device (as CheckTensorDevice) and then waits, once
// per device `sd` uses, for the work queued on it: what a save copies, or a
// load overwrites, is the memory as the application's kernels left it.
Status CheckAndSynchronizeDevices(const StateDict& sd);

// Copies n bytes of device memory into a buffer leased from the pinned pool
// and calls use() with it; the buffer goes back to the pool afterwards.
Status WithBytesFromDevice(int device, const void* device_src, size_t n, const std::function<void(const char*)>& use);

// Copies n host bytes to device memory through buffers leased from the
// pinned pool, 16 MiB at a time.
Status StageToDevice(int device, const char* host_src, size_t n, void* device_dst);

// Copies n bytes of device memory straight into host memory the caller
// owns (best pinned: see AllocPinnedHost).
Status CopyFromDevice(int device, const void* device_src, void* host_dst, size_t n);

// Pinned host memory outside the pool (AsyncSaver's slots); freed by the
// backend that allocated it when the pointer is destroyed.
using PinnedBuffer = std::unique_ptr<char, std::function<void(char*)>>;
StatusOr<PinnedBuffer> AllocPinnedHost(size_t n);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_DEVICE_STAGING_H_
