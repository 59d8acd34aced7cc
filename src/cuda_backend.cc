// The CUDA runtime as ckptdb's device backend (src/device_backend.h). Each
// copy runs on a non-blocking stream of the library's own, taken from a
// per-device pool for the duration of the copy, so copies issued by several
// worker threads overlap each other and the host work of other threads, and
// never wait on (or for) the application's streams.
//
// Current device: every call makes its device current for its duration and
// then puts the thread's previous device back, so the application's thread
// keeps its device. The previous device is put back only where its primary
// context exists: on a thread that never chose a device (a worker thread)
// the runtime reports device 0, and setting device 0 would create a context
// on a GPU this process may not use (with CUDA 12 and later, cudaSetDevice
// creates it), costing that GPU memory in every rank of a multi-GPU host.
// For the same reason pinned memory is allocated and freed with the device
// it is for current, never on whatever device happens to be current.
#include <cuda.h>
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

// Whether the primary context of `device` exists in this process; true when
// the driver cannot tell (then the previous device is put back, as the
// application would expect).
bool PrimaryContextActive(int device) {
  using GetState = CUresult(CUDAAPI*)(CUdevice, unsigned int*, int*);
  using GetDevice = CUresult(CUDAAPI*)(CUdevice*, int);
  static GetState get_state = nullptr;
  static GetDevice get_device = nullptr;
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
    get_state = reinterpret_cast<GetState>(entry("cuDevicePrimaryCtxGetState", 7000));
    get_device = reinterpret_cast<GetDevice>(entry("cuDeviceGet", 2000));
  });
  if (get_state == nullptr || get_device == nullptr) return true;
  CUdevice dev;
  unsigned int flags = 0;
  int active = 0;
  if (get_device(&dev, device) != CUDA_SUCCESS || get_state(dev, &flags, &active) != CUDA_SUCCESS) return true;
  return active != 0;
}

// Makes `device` current on this thread for the guard's lifetime (see the
// file comment for what is put back).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : device_(device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device_) status_ = Cuda(cudaSetDevice(device_), "cudaSetDevice", device_);
  }
  ~DeviceGuard() {
    if (previous_ >= 0 && previous_ != device_ && PrimaryContextActive(previous_)) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  const Status& status() const { return status_; }

 private:
  const int device_;
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
