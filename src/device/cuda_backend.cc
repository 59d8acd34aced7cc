// The CUDA runtime as ckptdb's device backend (src/device/device_backend.h). Each
// copy runs on a non-blocking stream of the library's own, taken from a
// per-device pool for the duration of the copy, so copies issued by several
// worker threads overlap each other and the host work of other threads, and
// never wait on (or for) the application's streams.
//
// Current device: every call makes its device current for its duration and
// then puts the thread's previous context back (DeviceGuard), so the
// application's thread keeps its device, and a worker thread, which had
// none, is not left with one: restoring "device 0" there would create a
// context on a GPU this process may not use (cudaSetDevice creates it since
// CUDA 12), costing that GPU memory in every rank of a multi-GPU host. For
// the same reason pinned memory is allocated and freed with the device it is
// for current, never on whatever device happens to be current.
#include <cuda.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <vector>

#include "device/device_backend.h"

namespace ckptdb {

namespace {

Status Cuda(cudaError_t e, const char* call, int device) {
  if (e == cudaSuccess) return Status::OK();
  std::string msg = std::string("CUDA error in ") + call;
  if (device >= 0) msg += " (device " + std::to_string(device) + ")";
  return Status::Unavailable(msg + ": " + cudaGetErrorString(e));
}

// The driver calls the guard below needs, looked up once through the
// runtime (no link against libcuda, which machines without a GPU lack).
struct DriverCalls {
  CUresult(CUDAAPI* ctx_get_current)(CUcontext*) = nullptr;
  CUresult(CUDAAPI* ctx_set_current)(CUcontext) = nullptr;
  bool ok() const { return ctx_get_current != nullptr && ctx_set_current != nullptr; }
};

const DriverCalls& Driver() {
  static DriverCalls calls;
  static std::once_flag once;
  std::call_once(once, [] {
    auto entry = [](const char* symbol, unsigned int version) -> void* {
      void* fn = nullptr;
#if CUDART_VERSION >= 12050
      cudaDriverEntryPointQueryResult found;
      if (cudaGetDriverEntryPointByVersion(symbol, &fn, version, cudaEnableDefault, &found) != cudaSuccess ||
          found != cudaDriverEntryPointSuccess) {
        return nullptr;
      }
#else
      (void)version;
      if (cudaGetDriverEntryPoint(symbol, &fn, cudaEnableDefault) != cudaSuccess) return nullptr;
#endif
      return fn;
    };
    calls.ctx_get_current = reinterpret_cast<decltype(calls.ctx_get_current)>(entry("cuCtxGetCurrent", 4000));
    calls.ctx_set_current = reinterpret_cast<decltype(calls.ctx_set_current)>(entry("cuCtxSetCurrent", 4000));
  });
  return calls;
}

// Makes `device` current on this thread for the guard's lifetime, then puts
// back exactly the context that was current before: the application's own
// (primary or not) on its threads, none on a worker thread, so no context
// is ever created on a device the process does not use. Where the driver
// calls cannot be found, the previous runtime device is put back instead.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : device_(device) {
    const DriverCalls& d = Driver();
    if (d.ok() && d.ctx_get_current(&saved_) == CUDA_SUCCESS) {
      use_context_ = true;
    } else if (cudaGetDevice(&previous_) != cudaSuccess) {
      previous_ = -1;
    }
    status_ = Cuda(cudaSetDevice(device_), "cudaSetDevice", device_);
  }
  ~DeviceGuard() {
    if (use_context_) {
      Driver().ctx_set_current(saved_);
    } else if (previous_ >= 0 && previous_ != device_) {
      cudaSetDevice(previous_);
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  const Status& status() const { return status_; }

 private:
  const int device_;
  bool use_context_ = false;
  CUcontext saved_ = nullptr;
  int previous_ = -1;
  Status status_;
};

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
    DeviceGuard guard(device);
    if (!guard.status().ok()) return guard.status();
    return Cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize", device);
  }

  StatusOr<void*> AllocPinned(size_t n, int device) override {
    DeviceGuard guard(device);
    if (!guard.status().ok()) return guard.status();
    void* p = nullptr;
    // Portable: usable for copies with every device of the process.
    Status st = Cuda(cudaHostAlloc(&p, n == 0 ? 1 : n, cudaHostAllocPortable), "cudaHostAlloc", device);
    if (!st.ok()) return st.WithContext("allocating " + std::to_string(n) + " bytes of pinned host memory");
    return p;
  }

  void FreePinned(void* p, int device) override {
    DeviceGuard guard(device);
    cudaFreeHost(p);
  }

  Status CopyToHost(int device, const void* device_src, void* host_dst, size_t n) override {
    return Copy(device, host_dst, device_src, n, cudaMemcpyDeviceToHost);
  }

  Status CopyToDevice(int device, const void* host_src, void* device_dst, size_t n) override {
    return Copy(device, device_dst, host_src, n, cudaMemcpyHostToDevice);
  }

 private:
  Status Copy(int device, void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    if (n == 0) return Status::OK();
    DeviceGuard guard(device);
    if (!guard.status().ok()) return guard.status();
    cudaStream_t stream = nullptr;
    Status st = TakeStream(device, &stream);
    if (!st.ok()) return st;
    st = Cuda(cudaMemcpyAsync(dst, src, n, kind, stream), "cudaMemcpyAsync", device);
    Status sync = Cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize", device);
    GiveStream(device, stream);
    return st.ok() ? sync : st;
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
