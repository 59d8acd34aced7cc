// The CUDA runtime as ckptdb's device backend (src/device_backend.h). Each
// copy runs on a non-blocking stream of the library's own, taken from a
// per-device pool for the duration of the copy, so copies issued by several
// worker threads overlap each other and the host work of other threads, and
// never wait on (or for) the application's streams.
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <vector>

#include "device_backend.h"

namespace ckptdb {

namespace {

Status Cuda(cudaError_t e, const char* call, int device) {
  if (e == cudaSuccess) return Status::OK();
  std::string msg = std::string("CUDA error in ") + call;
  if (device >= 0) msg += " (device " + std::to_string(device) + ")";
  return Status::Unavailable(msg + ": " + cudaGetErrorString(e));
}

class CudaBackend final : public DeviceBackend {
 public:
  int DeviceCount() override {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
  }

  // Without touching the calling thread's current device.
  Status CheckDevice(int device) override {
    int n = 0;
    Status st = Cuda(cudaGetDeviceCount(&n), "cudaGetDeviceCount", -1);
    if (!st.ok()) return st;
    if (device < 0 || device >= n) {
      return Status::InvalidArgument("no CUDA device " + std::to_string(device) + ": this process sees " +
                                     std::to_string(n));
    }
    return Status::OK();
  }

  Status Synchronize(int device) override {
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
    Status st = Cuda(cudaSetDevice(device), "cudaSetDevice", device);
    if (st.ok()) st = Cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize", device);
    if (previous >= 0 && previous != device) cudaSetDevice(previous);
    return st;
  }

  StatusOr<void*> AllocPinned(size_t n) override {
    void* p = nullptr;
    // Portable: usable for copies with every device of the process.
    Status st = Cuda(cudaHostAlloc(&p, n == 0 ? 1 : n, cudaHostAllocPortable), "cudaHostAlloc", -1);
    if (!st.ok()) return st.WithContext("allocating " + std::to_string(n) + " bytes of pinned host memory");
    return p;
  }

  void FreePinned(void* p) override { cudaFreeHost(p); }

  Status CopyToHost(int device, const void* device_src, void* host_dst, size_t n) override {
    return Copy(device, host_dst, device_src, n, cudaMemcpyDeviceToHost);
  }

  Status CopyToDevice(int device, const void* host_src, void* device_dst, size_t n) override {
    return Copy(device, device_dst, host_src, n, cudaMemcpyHostToDevice);
  }

 private:
  // The calling thread's current device is set back afterwards: the caller
  // may be the application's own thread (AsyncSaver::SaveAsync).
  Status Copy(int device, void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    if (n == 0) return Status::OK();
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
    Status st = Cuda(cudaSetDevice(device), "cudaSetDevice", device);
    cudaStream_t stream = nullptr;
    if (st.ok()) st = TakeStream(device, &stream);
    if (st.ok()) {
      st = Cuda(cudaMemcpyAsync(dst, src, n, kind, stream), "cudaMemcpyAsync", device);
      Status sync = Cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize", device);
      if (st.ok()) st = sync;
      GiveStream(device, stream);
    }
    if (previous >= 0 && previous != device) cudaSetDevice(previous);
    return st;
  }

  // A free stream of `device` (current on this thread), created on demand:
  // as many exist as copies ever ran at once on that device.
  Status TakeStream(int device, cudaStream_t* out) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<cudaStream_t>& free = free_streams_[device];
      if (!free.empty()) {
        *out = free.back();
        free.pop_back();
        return Status::OK();
      }
    }
    return Cuda(cudaStreamCreateWithFlags(out, cudaStreamNonBlocking), "cudaStreamCreate", device);
  }

  void GiveStream(int device, cudaStream_t s) {
    std::lock_guard<std::mutex> lock(mu_);
    free_streams_[device].push_back(s);
  }

  std::mutex mu_;
  std::map<int, std::vector<cudaStream_t>> free_streams_;  // kept for the process's life
};

}  // namespace

bool CudaBuilt() { return true; }

DeviceBackend& BuiltinDeviceBackend() {
  static CudaBackend* backend = new CudaBackend();  // never destroyed: streams outlive static destruction
  return *backend;
}

}  // namespace ckptdb
