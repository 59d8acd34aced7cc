// Where a tensor's memory lives.
#ifndef CKPTDB_DEVICE_H_
#define CKPTDB_DEVICE_H_

#include <string>

namespace ckptdb {

// Where a tensor's memory lives. CUDA tensors are representable now so that
// the API does not change when the CUDA path lands; this build saves and
// loads CPU tensors and refuses CUDA ones with a clear error.
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
