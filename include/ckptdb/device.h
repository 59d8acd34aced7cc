// Where a tensor's memory lives.
#ifndef CKPTDB_DEVICE_H_
#define CKPTDB_DEVICE_H_

#include <string>

namespace ckptdb {

// Where a tensor's memory lives. A tensor on CUDA device N is saved and
// loaded through pinned host staging buffers (staging.h) where ckptdb was
// built with the CUDA path (CMake CKPTDB_CUDA); elsewhere, or without a
// usable device, a save or load of a CUDA tensor fails before anything is
// written, with an error naming the entry. The memory of a CUDA tensor is
// plain device memory (cudaMalloc); ckptdb copies it on streams of its own
// and never changes the calling thread's current device. Save, SaveAsync and
// Load first wait for all work queued on each device they touch
// (cudaDeviceSynchronize), so they see tensors as the application's kernels
// left them, on any of its streams.
struct Device {
  enum class Kind : int { kCPU = 0, kCUDA = 1 };
  Kind kind = Kind::kCPU;
  int index = 0;  // CUDA device ordinal; 0 for the CPU

  static Device CPU() { return Device{}; }
  static Device CUDA(int index) { return Device{Kind::kCUDA, index}; }
  bool is_cpu() const { return kind == Kind::kCPU; }
  std::string ToString() const;  // "cpu", "cuda:1"
  friend bool operator==(const Device& a, const Device& b) { return a.kind == b.kind && a.index == b.index; }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

}  // namespace ckptdb

#endif  // CKPTDB_DEVICE_H_
