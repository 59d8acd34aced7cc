// Device staging with the CUDA runtime (src/device_staging.h): pinned host
// buffers, two per device, and the library's own stream per device, so that
// the asynchronous copy of one piece overlaps the host-side copy of the
// previous one.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "device_staging.h"

namespace ckptdb {

namespace {

constexpr size_t kPiece = 32u << 20;  // bytes per staging buffer

Status Cuda(cudaError_t e, const char* call, int device) {
  if (e == cudaSuccess) return Status::OK();
  return Status::Unavailable(std::string("CUDA error in ") + call + " (device " + std::to_string(device) +
                             "): " + cudaGetErrorString(e));
}

// The staging buffers and stream of one device.
struct DeviceStage {
  std::mutex mu;  // one copy at a time
  cudaStream_t stream = nullptr;
  void* pinned[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};
};

std::mutex g_mu;
std::map<int, std::unique_ptr<DeviceStage>> g_stages;  // never freed: lives as long as the process

StatusOr<DeviceStage*> Stage(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_stages.find(device);
  if (it != g_stages.end()) return it->second.get();
  auto s = std::make_unique<DeviceStage>();
  Status st = Cuda(cudaSetDevice(device), "cudaSetDevice", device);
  if (st.ok()) st = Cuda(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), "cudaStreamCreate", device);
  for (int i = 0; st.ok() && i < 2; ++i) {
    st = Cuda(cudaHostAlloc(&s->pinned[i], kPiece, cudaHostAllocDefault), "cudaHostAlloc", device);
    if (st.ok()) st = Cuda(cudaEventCreateWithFlags(&s->done[i], cudaEventDisableTiming), "cudaEventCreate", device);
  }
  if (!st.ok()) {
    for (int i = 0; i < 2; ++i) {
      if (s->pinned[i]) cudaFreeHost(s->pinned[i]);
      if (s->done[i]) cudaEventDestroy(s->done[i]);
    }
    if (s->stream) cudaStreamDestroy(s->stream);
    return st;
  }
  DeviceStage* raw = s.get();
  g_stages.emplace(device, std::move(s));
  return raw;
}

// Runs f(stage) with `device` current and its staging buffers held.
template <typename F>
Status WithStage(int device, F&& f) {
  auto stage = Stage(device);
  if (!stage.ok()) return stage.status();
  DeviceStage& s = **stage;
  std::lock_guard<std::mutex> lock(s.mu);
  Status st = Cuda(cudaSetDevice(device), "cudaSetDevice", device);
  return st.ok() ? f(s) : st;
}

}  // namespace

bool CudaBuilt() { return true; }

int CudaDeviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

Status CopyFromDevice(int device, const void* device_src, void* host_dst, size_t n) {
  if (n == 0) return Status::OK();
  return WithStage(device, [&](DeviceStage& s) {
    const char* src = static_cast<const char*>(device_src);
    char* dst = static_cast<char*>(host_dst);
    const size_t pieces = (n + kPiece - 1) / kPiece;
    auto issue = [&](size_t p) -> Status {
      const size_t off = p * kPiece, len = std::min(kPiece, n - off);
      Status r = Cuda(cudaMemcpyAsync(s.pinned[p % 2], src + off, len, cudaMemcpyDeviceToHost, s.stream),
                      "cudaMemcpyAsync", device);
      return r.ok() ? Cuda(cudaEventRecord(s.done[p % 2], s.stream), "cudaEventRecord", device) : r;
    };
    Status st = issue(0);
    for (size_t p = 0; st.ok() && p < pieces; ++p) {
      // Piece p+1 copies from the device while piece p is copied out of its
      // pinned buffer.
      if (p + 1 < pieces) st = issue(p + 1);
      if (st.ok()) st = Cuda(cudaEventSynchronize(s.done[p % 2]), "cudaEventSynchronize", device);
      if (st.ok()) std::memcpy(dst + p * kPiece, s.pinned[p % 2], std::min(kPiece, n - p * kPiece));
    }
    if (!st.ok()) cudaStreamSynchronize(s.stream);
    return st;
  });
}

Status CopyToDevice(int device, const void* host_src, void* device_dst, size_t n) {
  if (n == 0) return Status::OK();
  return WithStage(device, [&](DeviceStage& s) {
    const char* src = static_cast<const char*>(host_src);
    char* dst = static_cast<char*>(device_dst);
    const size_t pieces = (n + kPiece - 1) / kPiece;
    Status st;
    for (size_t p = 0; st.ok() && p < pieces; ++p) {
      const size_t off = p * kPiece, len = std::min(kPiece, n - off);
      // The buffer is free once its previous copy (piece p-2) has finished.
      if (p >= 2) st = Cuda(cudaEventSynchronize(s.done[p % 2]), "cudaEventSynchronize", device);
      if (!st.ok()) break;
      std::memcpy(s.pinned[p % 2], src + off, len);
      st = Cuda(cudaMemcpyAsync(dst + off, s.pinned[p % 2], len, cudaMemcpyHostToDevice, s.stream),
                "cudaMemcpyAsync", device);
      if (st.ok()) st = Cuda(cudaEventRecord(s.done[p % 2], s.stream), "cudaEventRecord", device);
    }
    Status sync = Cuda(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize", device);
    return st.ok() ? sync : st;
  });
}

}  // namespace ckptdb
