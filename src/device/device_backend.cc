// Which device backend is active (src/device/device_backend.h).
#include "device/device_backend.h"

#include <atomic>

#include "device/pinned_pool.h"

namespace ckptdb {

namespace {
std::atomic<DeviceBackend*> g_test_backend{nullptr};
}  // namespace

DeviceBackend& ActiveDeviceBackend() {
  DeviceBackend* b = g_test_backend.load(std::memory_order_acquire);
  return b != nullptr ? *b : BuiltinDeviceBackend();
}

// The pool's free buffers belong to the backend that allocated them: they
// are given back before the swap in either direction.
ScopedDeviceBackendForTesting::ScopedDeviceBackendForTesting(DeviceBackend* backend) {
  TrimPinnedPool();
  g_test_backend.store(backend, std::memory_order_release);
}

ScopedDeviceBackendForTesting::~ScopedDeviceBackendForTesting() {
  TrimPinnedPool();
  g_test_backend.store(nullptr, std::memory_order_release);
}

}  // namespace ckptdb
