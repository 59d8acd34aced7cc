// Device staging on top of the active backend and the pinned pool
// (src/device/device_staging.h).
#include "device/device_staging.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "device/device_backend.h"
#include "device/pinned_pool.h"
#include "util/status_macros.h"

namespace ckptdb {

int CudaDeviceCount() { return ActiveDeviceBackend().DeviceCount(); }

namespace {

Status CheckTensorDevice(const std::string& fqn, const Tensor& t) {
  if (t.device().is_cpu()) return Status::OK();
  Status st = ActiveDeviceBackend().CheckDevice(t.device().index);
  return st.ok() ? st : st.WithContext("entry '" + fqn + "' on " + t.device().ToString());
}

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

int FirstDeviceOf(const StateDict& sd) {
  int first = -1;
  (void)ForEachTensor(sd, [&](const std::string&, const Tensor& t) {
    if (first < 0 && !t.device().is_cpu()) first = t.device().index;
    return Status::OK();
  });
  return first;
}

Status CheckAndSynchronizeDevices(const StateDict& sd, const std::vector<std::string>& only) {
  const std::set<std::string> wanted(only.begin(), only.end());
  std::set<int> devices;
  RETURN_IF_ERROR(ForEachTensor(sd, [&](const std::string& fqn, const Tensor& t) {
    if (!wanted.empty() && wanted.count(fqn) == 0) return Status::OK();
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
  StatusOr<PinnedLease> buf = LeasePinned(n, device);
  if (!buf.ok()) return buf.status();
  Status st = ActiveDeviceBackend().CopyToHost(device, device_src, buf->data(), n);
  if (!st.ok()) return st;
  CountStagedBytes(n, 0);
  use(buf->data());
  return Status::OK();
}

// Whole tensors go through the pool in pieces, so that they need no more
// staging memory than a chunk does (and never more than the limit).
size_t PieceBytes() { return static_cast<size_t>(std::min<uint64_t>(uint64_t{16} << 20, PinnedPoolLimit())); }

Status StageToDevice(int device, const char* host_src, size_t n, void* device_dst) {
  const size_t piece = PieceBytes();
  for (size_t off = 0; off < n; off += piece) {
    const size_t len = std::min(piece, n - off);
    StatusOr<PinnedLease> buf = LeasePinned(len, device);
    if (!buf.ok()) return buf.status();
    std::memcpy(buf->data(), host_src + off, len);
    RETURN_IF_ERROR(ActiveDeviceBackend().CopyToDevice(device, buf->data(), static_cast<char*>(device_dst) + off, len));
    CountStagedBytes(0, len);
  }
  return Status::OK();
}

Status StageFromDevice(int device, const void* device_src, void* host_dst, size_t n) {
  const size_t piece = PieceBytes();
  for (size_t off = 0; off < n; off += piece) {
    const size_t len = std::min(piece, n - off);
    RETURN_IF_ERROR(WithBytesFromDevice(device, static_cast<const char*>(device_src) + off, len, [&](const char* p) {
      std::memcpy(static_cast<char*>(host_dst) + off, p, len);
    }));
  }
  return Status::OK();
}

Status CopyFromDevice(int device, const void* device_src, void* host_dst, size_t n) {
  if (n == 0) return Status::OK();
  Status st = ActiveDeviceBackend().CopyToHost(device, device_src, host_dst, n);
  if (st.ok()) CountStagedBytes(n, 0);
  return st;
}

StatusOr<PinnedBuffer> AllocPinnedHost(size_t n, int device) {
  DeviceBackend* backend = &ActiveDeviceBackend();
  StatusOr<void*> p = backend->AllocPinned(n, device);
  if (!p.ok()) return p.status();
  return PinnedBuffer(static_cast<char*>(*p), [backend, device](char* q) { backend->FreePinned(q, device); });
}

}  // namespace ckptdb
