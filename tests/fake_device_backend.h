// A DeviceBackend for machines without a GPU: "device memory" is host memory
// the test allocates through the fake, copies are real memcpys, and the fake
// records what a GPU cannot tell a test: how much pinned memory was live at
// once, how many copies ran at the same time, whether a copy's host side was
// pinned, and it fails the copies a test asks it to. The device paths above
// the backend (chunk-by-chunk staging, the pinned pool, device load targets,
// AsyncSaver's pinned slots) run for real against it; only the CUDA calls of
// src/device/cuda_backend.cc are left to tools/gpu-check.sh on a GPU machine.
#ifndef CKPTDB_TESTS_FAKE_DEVICE_BACKEND_H_
#define CKPTDB_TESTS_FAKE_DEVICE_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "ckptdb/tensor.h"
#include "device/device_backend.h"

namespace ckptdb::testing {

class FakeDeviceBackend final : public DeviceBackend {
 public:
  explicit FakeDeviceBackend(int devices) : devices_(devices) {}
  ~FakeDeviceBackend() override;

  // "Device memory" on `device` holding a copy of `host`'s bytes, as a tensor
  // on cuda:device; it lives as long as the fake.
  Tensor ToDevice(const Tensor& host, int device);
  // Zero-filled device memory for a tensor of dtype and shape.
  Tensor DeviceZeros(DType dtype, const Shape& shape, int device);
  // A CPU tensor holding a copy of device tensor `t`'s bytes (read directly,
  // not through the backend: what the test sees, not what ckptdb did).
  static Tensor ReadBack(const Tensor& t);

  // Copies touching [begin, begin + n) of device memory fail from now on.
  void FailCopiesTouching(const void* begin, size_t n);

  // Pretends the application queued kernels on `device`: until the next
  // Synchronize(device), every copy touching it counts as a race.
  void QueueKernels(int device);
  uint64_t copies_racing_kernels() const { return racing_copies_; }
  uint64_t synchronizes() const { return synchronizes_; }

  // Every copy sleeps this long first, so that overlap can be observed.
  void set_copy_delay_us(int us) { copy_delay_us_ = us; }

  int DeviceCount() override { return devices_; }
  Status CheckDevice(int device) override;
  Status Synchronize(int device) override;
  StatusOr<void*> AllocPinned(size_t n, int device) override;
  void FreePinned(void* p, int device) override;
  // Pinned allocations of more than this many bytes fail from now on.
  void FailPinnedAllocationsOver(size_t n) { max_pinned_allocation_ = n; }
  Status CopyToHost(int device, const void* device_src, void* host_dst, size_t n) override;
  Status CopyToDevice(int device, const void* host_src, void* device_dst, size_t n) override;

  uint64_t peak_live_pinned_bytes() const { return peak_pinned_; }
  uint64_t live_pinned_bytes() const;
  uint64_t pinned_allocations() const { return pinned_allocations_; }
  uint64_t failed_pinned_allocations() const { return failed_pinned_allocations_; }
  int max_concurrent_copies() const { return max_concurrent_; }
  void reset_max_concurrent_copies() { max_concurrent_ = 0; }
  uint64_t copies_to_host() const { return copies_to_host_; }
  uint64_t copies_with_pageable_host_memory() const { return pageable_copies_; }

 private:
  Status Copy(int device, const void* dev, size_t n, const void* host, bool to_host, void* dst, const void* src);
  bool IsPinned(const void* p, size_t n) const;
  bool IsDeviceMemory(int device, const void* p, size_t n) const;

  const int devices_;
  mutable std::mutex mu_;
  std::map<const char*, size_t> pinned_;  // live pinned allocations
  uint64_t live_pinned_ = 0, peak_pinned_ = 0, pinned_allocations_ = 0;
  struct DeviceBlock {
    int device;
    std::unique_ptr<char[]> bytes;
    size_t n;
  };
  std::vector<DeviceBlock> device_blocks_;
  std::vector<std::pair<const char*, size_t>> failing_;
  std::atomic<int> copy_delay_us_{0};
  std::atomic<size_t> max_pinned_allocation_{SIZE_MAX};
  std::atomic<uint64_t> failed_pinned_allocations_{0};
  std::atomic<int> concurrent_{0}, max_concurrent_{0};
  std::atomic<uint64_t> copies_to_host_{0}, pageable_copies_{0};
  std::vector<bool> kernels_queued_ = std::vector<bool>(static_cast<size_t>(devices_), false);
  std::atomic<uint64_t> racing_copies_{0}, synchronizes_{0};
};

}  // namespace ckptdb::testing

#endif  // CKPTDB_TESTS_FAKE_DEVICE_BACKEND_H_
