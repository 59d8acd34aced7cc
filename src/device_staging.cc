// Device staging on top of the active backend and the pinned pool
// (src/device_staging.h).
#include "device_staging.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "device_backend.h"
#include "pinned_pool.h"
#include "status_macros.h"

namespace ckptdb {

int CudaDeviceCount() { return ActiveDeviceBackend().DeviceCount(); }

Status CheckTensorDevice(const std::string& fqn, const Tensor& t) {
  if (t.device().is_cpu()) return Status::OK();
  Status st = ActiveDeviceBackend().CheckDevice(t.device().index);
  return st.ok() ? st : st.WithContext("entry '" + fqn + "' on " + t.device().ToString());
}

namespace {

// Calls f(fqn, tensor) for every tensor and local shard of `sd`.
template <typename F>
Status ForEachTensor(const StateDict& sd, F&& f) {
  for (const auto& [fqn, e] : sd.entries()) {
    if (const Tensor* t = std::get_if<Tensor>(&e)) {
      RETURN_IF_ERROR(f(fqn, *t));
    } else if (const ShardedTensor* st = std::get_if<ShardedTensor>(&e)) {
      for (const Shard& s : st->local_shards()) RETURN_IF_ERROR(f(fqn, s.tensor));
    }
  }
  return Status::OK();
}

}  // namespace

bool HasDeviceTensors(const StateDict& sd) {
  bool any = false;
  (void)ForEachTensor(sd, [&](const std::string&, const Tensor& t) {
    any = any || !t.device().is_cpu();
    return Status::OK();
  });
  return any;
}

Status CheckAndSynchronizeDevices(const StateDict& sd) {
  std::set<int> devices;
  RETURN_IF_ERROR(ForEachTensor(sd, [&](const std::string& fqn, const Tensor& t) {
    if (!t.device().is_cpu()) devices.insert(t.device().index);
    return CheckTensorDevice(fqn, t);
  }));
  for (int d : devices) {
    Status st = ActiveDeviceBackend().Synchronize(d);
    if (!st.ok()) return st.WithContext("waiting for the work queued on " + Device::CUDA(d).ToString());
  }
  return Status::OK();
}

Status WithBytesFromDevice(int device, const void* device_src, size_t n, const std::function<void(const char*)>& use) {
  if (n == 0) {
    use(nullptr);
    return Status::OK();
  }
  StatusOr<PinnedLease> buf = LeasePinned(n);
  if (!buf.ok()) return buf.status();
  Status st = ActiveDeviceBackend().CopyToHost(device, device_src, buf->data(), n);
  if (!st.ok()) return st;
  CountStagedBytes(n, 0);
  use(buf->data());
  return Status::OK();
}

Status StageToDevice(int device, const char* host_src, size_t n, void* device_dst) {
  // In pieces, so that a whole tensor (a load's fallback) needs no more
  // staging memory than a chunk does.
  constexpr size_t kPiece = size_t{16} << 20;
  for (size_t off = 0; off < n; off += kPiece) {
    const size_t len = std::min(kPiece, n - off);
    StatusOr<PinnedLease> buf = LeasePinned(len);
    if (!buf.ok()) return buf.status();
    std::memcpy(buf->data(), host_src + off, len);
    RETURN_IF_ERROR(ActiveDeviceBackend().CopyToDevice(device, buf->data(), static_cast<char*>(device_dst) + off, len));
    CountStagedBytes(0, len);
  }
  return Status::OK();
}

Status CopyFromDevice(int device, const void* device_src, void* host_dst, size_t n) {
  if (n == 0) return Status::OK();
  Status st = ActiveDeviceBackend().CopyToHost(device, device_src, host_dst, n);
  if (st.ok()) CountStagedBytes(n, 0);
  return st;
}

StatusOr<PinnedBuffer> AllocPinnedHost(size_t n) {
  DeviceBackend* backend = &ActiveDeviceBackend();
  StatusOr<void*> p = backend->AllocPinned(n);
  if (!p.ok()) return p.status();
  return PinnedBuffer(static_cast<char*>(*p), [backend](char* q) { backend->FreePinned(q); });
}

}  // namespace ckptdb
