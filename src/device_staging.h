// Moving tensor bytes between device (CUDA) memory and host memory, for the
// save and load paths. Built from src/cuda_staging.cc where the CUDA toolkit
// was found (CMake option CKPTDB_CUDA), from src/cuda_staging_none.cc
// otherwise; callers do not need to know which.
//
// Copies go through pinned host staging buffers, two per device, with
// asynchronous copies on the library's own stream overlapped with the host
// side of the previous piece. Any CUDA error becomes a Status naming the call
// and the device.
//
// Thread safety: calls may come from several threads; each device's staging
// buffers are used by one copy at a time.
#ifndef CKPTDB_SRC_DEVICE_STAGING_H_
#define CKPTDB_SRC_DEVICE_STAGING_H_

#include <cstddef>

#include "ckptdb/state_dict.h"
#include "ckptdb/status.h"

namespace ckptdb {

// True when this build has the CUDA path.
bool CudaBuilt();
// CUDA devices this process can use (0 without the CUDA path, a driver or a
// device).
int CudaDeviceCount();

// Copies n bytes from device memory on CUDA device `device` to host memory.
Status CopyFromDevice(int device, const void* device_src, void* host_dst, size_t n);
// Copies n bytes from host memory to device memory on CUDA device `device`.
Status CopyToDevice(int device, const void* host_src, void* device_dst, size_t n);

// True when any tensor or shard of `sd` lives on a CUDA device.
bool HasDeviceTensors(const StateDict& sd);

// A copy of `sd` whose CUDA tensors and shards are replaced by CPU tensors
// holding their bytes (CPU entries are shared, not copied). Errors name the
// entry.
StatusOr<StateDict> CopyDeviceTensorsToHost(const StateDict& sd);

// For a load into CUDA targets: a state dict like `target` whose CUDA
// tensors and shards are replaced by zero-filled CPU tensors of the same
// dtype and shape; after loading into it, CopyHostToDeviceTargets writes
// them to the device.
StatusOr<StateDict> HostProxyFor(const StateDict& target);
Status CopyHostToDeviceTargets(const StateDict& host, StateDict& target);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_DEVICE_STAGING_H_
