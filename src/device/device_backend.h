// The few operations ckptdb needs from a GPU runtime, behind one interface:
// pinned host memory and synchronous copies between host and device memory.
// Everything above it (chunk-by-chunk staging, the pinned pool and its bound,
// async save slots, load targets on a device) is device-independent code in
// device_staging.cc, pinned_pool.cc, save/load and async_save.cc.
//
// The built-in backend is CUDA (src/device/cuda_backend.cc) where the CUDA path was
// built (CMake CKPTDB_CUDA), else one whose every call is an error saying so
// (src/device/cuda_backend_none.cc). Tests install a backend of their own with
// ScopedDeviceBackendForTesting to drive the device paths on machines
// without a GPU.
//
// Thread safety: every method may be called from several threads at once;
// copies from different threads run concurrently (CUDA: each on a stream of
// its own), which is what overlaps one chunk's copy with another's encoding.
#ifndef CKPTDB_SRC_DEVICE_BACKEND_H_
#define CKPTDB_SRC_DEVICE_BACKEND_H_

#include <cstddef>
#include <memory>
#include <string>

#include "ckptdb/status.h"

namespace ckptdb {

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // Devices this process can use (0 when none, or no driver).
  virtual int DeviceCount() = 0;
  // OK when `device` can be used; otherwise an error naming the call that
  // failed (FailedPrecondition in a build without the CUDA path).
  virtual Status CheckDevice(int device) = 0;
  // Waits until all work queued on `device` (by any stream of the process)
  // has finished: a save must not copy a tensor that a kernel is still
  // writing, nor a load write one that a kernel is still reading.
  virtual Status Synchronize(int device) = 0;
  // Page-locked host memory, for copies at the bus's full speed with any
  // device; allocated (and freed) with `device` current, so that no other
  // device's context is created for it.
  virtual StatusOr<void*> AllocPinned(size_t n, int device) = 0;
  virtual void FreePinned(void* p, int device) = 0;
  // Copies n bytes from device memory on `device` to host memory (pinned or
  // not) and returns when they have arrived.
  virtual Status CopyToHost(int device, const void* device_src, void* host_dst, size_t n) = 0;
  // Copies n bytes from host memory to device memory on `device` and returns
  // when they have arrived.
  virtual Status CopyToDevice(int device, const void* host_src, void* device_dst, size_t n) = 0;
};

// The backend device copies go through: the test's, if one is installed,
// else the built-in one.
DeviceBackend& ActiveDeviceBackend();

// True when this build has the CUDA path (whether or not a GPU is present).
bool CudaBuilt();

// Installs `backend` for the lifetime of this object (tests only; not
// nested, and not while a save or load runs).
class ScopedDeviceBackendForTesting {
 public:
  explicit ScopedDeviceBackendForTesting(DeviceBackend* backend);
  ~ScopedDeviceBackendForTesting();
  ScopedDeviceBackendForTesting(const ScopedDeviceBackendForTesting&) = delete;
  ScopedDeviceBackendForTesting& operator=(const ScopedDeviceBackendForTesting&) = delete;
};

// The built-in backend (one per process, never destroyed).
DeviceBackend& BuiltinDeviceBackend();

}  // namespace ckptdb

#endif  // CKPTDB_SRC_DEVICE_BACKEND_H_
