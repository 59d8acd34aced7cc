#include "fake_device_backend.h"

#include <chrono>
#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "util/status_macros.h"
#include "test_util.h"

namespace ckptdb::testing {

FakeDeviceBackend::~FakeDeviceBackend() {
  for (auto& [p, n] : pinned_) delete[] p;
}

Tensor FakeDeviceBackend::DeviceZeros(DType dtype, const Shape& shape, int device) {
  const size_t n = static_cast<size_t>(NumElements(shape).value()) * DTypeSize(dtype);
  std::lock_guard<std::mutex> lock(mu_);
  device_blocks_.push_back(DeviceBlock{device, std::make_unique<char[]>(n + 1), n});
  std::memset(device_blocks_.back().bytes.get(), 0, n + 1);
  return Tensor::View(dtype, shape, device_blocks_.back().bytes.get(), n, Device::CUDA(device)).value();
}

Tensor FakeDeviceBackend::ToDevice(const Tensor& host, int device) {
  Tensor t = DeviceZeros(host.dtype(), host.shape(), device);
  std::memcpy(t.data(), host.data(), host.nbytes());
  return t;
}

Tensor FakeDeviceBackend::ReadBack(const Tensor& t) {
  return Tensor::Copy(t.dtype(), t.shape(), t.data(), t.nbytes()).value();
}

void FakeDeviceBackend::FailCopiesTouching(const void* begin, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  failing_.push_back({static_cast<const char*>(begin), n});
}

Status FakeDeviceBackend::CheckDevice(int device) {
  if (device < 0 || device >= devices_) {
    return Status::Unavailable("fake device backend: no device " + std::to_string(device) + " (it has " +
                               std::to_string(devices_) + ")");
  }
  return Status::OK();
}

void FakeDeviceBackend::QueueKernels(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  kernels_queued_.at(static_cast<size_t>(device)) = true;
}

Status FakeDeviceBackend::Synchronize(int device) {
  RETURN_IF_ERROR(CheckDevice(device));
  std::lock_guard<std::mutex> lock(mu_);
  kernels_queued_[static_cast<size_t>(device)] = false;
  ++synchronizes_;
  return Status::OK();
}

StatusOr<void*> FakeDeviceBackend::AllocPinned(size_t n, int device) {
  RETURN_IF_ERROR(CheckDevice(device));
  if (n > max_pinned_allocation_) {
    ++failed_pinned_allocations_;
    return Status::Unavailable("fake device backend: cannot pin " + std::to_string(n) + " bytes");
  }
  char* p = new char[n == 0 ? 1 : n];
  std::lock_guard<std::mutex> lock(mu_);
  pinned_[p] = n;
  live_pinned_ += n;
  peak_pinned_ = std::max(peak_pinned_, live_pinned_);
  ++pinned_allocations_;
  return static_cast<void*>(p);
}

void FakeDeviceBackend::FreePinned(void* p, int device) {
  EXPECT_OK(CheckDevice(device));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pinned_.find(static_cast<const char*>(p));
  if (it == pinned_.end()) {
    ADD_FAILURE() << "FreePinned of memory the fake did not allocate";
    return;
  }
  live_pinned_ -= it->second;
  pinned_.erase(it);
  delete[] static_cast<char*>(p);
}

uint64_t FakeDeviceBackend::live_pinned_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_pinned_;
}

bool FakeDeviceBackend::IsPinned(const void* p, size_t n) const {
  const char* c = static_cast<const char*>(p);
  auto it = pinned_.upper_bound(c);
  if (it == pinned_.begin()) return false;
  --it;
  return c >= it->first && c + n <= it->first + it->second;
}

bool FakeDeviceBackend::IsDeviceMemory(int device, const void* p, size_t n) const {
  const char* c = static_cast<const char*>(p);
  for (const DeviceBlock& b : device_blocks_) {
    if (b.device == device && c >= b.bytes.get() && c + n <= b.bytes.get() + b.n) return true;
  }
  return false;
}

Status FakeDeviceBackend::Copy(int device, const void* dev, size_t n, const void* host, bool to_host, void* dst,
                               const void* src) {
  RETURN_IF_ERROR(CheckDevice(device));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!IsDeviceMemory(device, dev, n)) {
      return Status::InvalidArgument("fake device backend: " + std::to_string(n) +
                                     " bytes at that address are not memory on device " + std::to_string(device));
    }
    const char* d = static_cast<const char*>(dev);
    for (const auto& [b, len] : failing_) {
      if (d < b + len && b < d + n) return Status::Unavailable("fake device backend: injected copy failure");
    }
    if (!IsPinned(host, n)) ++pageable_copies_;
    if (kernels_queued_[static_cast<size_t>(device)]) ++racing_copies_;
  }
  const int now = ++concurrent_;
  int seen = max_concurrent_.load();
  while (now > seen && !max_concurrent_.compare_exchange_weak(seen, now)) {
  }
  if (copy_delay_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(copy_delay_us_.load()));
  std::memcpy(dst, src, n);
  --concurrent_;
  if (to_host) ++copies_to_host_;
  return Status::OK();
}

Status FakeDeviceBackend::CopyToHost(int device, const void* device_src, void* host_dst, size_t n) {
  return Copy(device, device_src, n, host_dst, true, host_dst, device_src);
}

Status FakeDeviceBackend::CopyToDevice(int device, const void* host_src, void* device_dst, size_t n) {
  return Copy(device, device_dst, n, host_src, false, device_dst, host_src);
}

}  // namespace ckptdb::testing
