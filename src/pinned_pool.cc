// The pinned staging pool (src/pinned_pool.h).
#include "pinned_pool.h"

#include <condition_variable>
#include <mutex>
#include <vector>

#include "device_backend.h"

namespace ckptdb {

namespace {

struct FreeBuffer {
  char* data;
  size_t size;
  DeviceBackend* backend;  // the one that allocated it, and must free it
};

// Sizes are rounded up to a power of two (at least 64 KiB) so that the last,
// shorter chunk of a tensor reuses a buffer instead of allocating one.
size_t SizeClass(size_t n, uint64_t limit) {
  size_t c = size_t{64} << 10;
  while (c < n) c <<= 1;
  return c <= limit ? c : n;
}

class Pool {
 public:
  Status Lease(size_t n, char** data, size_t* size, DeviceBackend** backend) {
    std::unique_lock<std::mutex> lock(mu_);
    if (n > limit_) {
      return Status::InvalidArgument("a staging buffer of " + std::to_string(n) +
                                       " bytes is over the device staging limit of " + std::to_string(limit_) +
                                       " bytes (SetDeviceStagingLimit; or a smaller chunk size)");
    }
    const size_t want = SizeClass(n, limit_);
    cv_.wait(lock, [&] { return in_use_ + want <= limit_; });
    DeviceBackend* active = &ActiveDeviceBackend();
    // The smallest free buffer that fits.
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].backend == active && free_[i].size >= n && (best == free_.size() || free_[i].size < free_[best].size)) {
        best = i;
      }
    }
    if (best < free_.size() && in_use_ + free_[best].size <= limit_) {
      FreeBuffer b = free_[best];
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
      Lent(b.size);
      *data = b.data;
      *size = b.size;
      *backend = b.backend;
      return Status::OK();
    }
    // A new buffer: first give back free ones until it fits under the limit.
    while (!free_.empty() && pinned_ + want > limit_) {
      FreeBuffer b = free_.back();
      free_.pop_back();
      b.backend->FreePinned(b.data);
      pinned_ -= b.size;
    }
    pinned_ += want;  // reserved while allocating unlocked
    Lent(want);
    lock.unlock();
    StatusOr<void*> p = active->AllocPinned(want);
    lock.lock();
    if (!p.ok()) {
      pinned_ -= want;
      in_use_ -= want;
      cv_.notify_all();
      return p.status();
    }
    ++allocations_;
    *data = static_cast<char*>(*p);
    *size = want;
    *backend = active;
    return Status::OK();
  }

  void Return(char* data, size_t size, DeviceBackend* backend) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_use_ -= size;
      if (pinned_ > limit_) {
        backend->FreePinned(data);
        pinned_ -= size;
      } else {
        free_.push_back(FreeBuffer{data, size, backend});
      }
    }
    cv_.notify_all();
  }

  void Trim() {
    std::lock_guard<std::mutex> lock(mu_);
    for (const FreeBuffer& b : free_) {
      b.backend->FreePinned(b.data);
      pinned_ -= b.size;
    }
    free_.clear();
  }

  Status SetLimit(uint64_t bytes) {
    if (bytes == 0) return Status::InvalidArgument("the device staging limit must be at least 1 byte");
    {
      std::lock_guard<std::mutex> lock(mu_);
      limit_ = bytes;
      while (!free_.empty() && pinned_ > limit_) {
        FreeBuffer b = free_.back();
        free_.pop_back();
        b.backend->FreePinned(b.data);
        pinned_ -= b.size;
      }
    }
    cv_.notify_all();
    return Status::OK();
  }

  void Count(uint64_t to_host, uint64_t to_device) {
    std::lock_guard<std::mutex> lock(mu_);
    to_host_ += to_host;
    to_device_ += to_device;
  }

  DeviceStagingStats Stats() {
    std::lock_guard<std::mutex> lock(mu_);
    DeviceStagingStats s;
    s.limit_bytes = limit_;
    s.pinned_bytes = pinned_;
    s.peak_in_use_bytes = peak_;
    s.allocations = allocations_;
    s.bytes_to_host = to_host_;
    s.bytes_to_device = to_device_;
    return s;
  }

 private:
  void Lent(size_t size) {
    in_use_ += size;
    if (in_use_ > peak_) peak_ = in_use_;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t limit_ = kDefaultDeviceStagingBytes;
  uint64_t pinned_ = 0;  // allocated: lent out + free
  uint64_t in_use_ = 0;  // lent out
  uint64_t peak_ = 0;
  uint64_t allocations_ = 0;
  uint64_t to_host_ = 0, to_device_ = 0;
  std::vector<FreeBuffer> free_;
};

Pool& ThePool() {
  static Pool* pool = new Pool();  // never destroyed: leases may outlive static destruction
  return *pool;
}

}  // namespace

class PinnedPoolAccess {
 public:
  static StatusOr<PinnedLease> Lease(size_t n) {
    PinnedLease lease;
    Status st = ThePool().Lease(n, &lease.data_, &lease.size_, &lease.backend_);
    if (!st.ok()) return st;
    return lease;
  }
  static void Return(PinnedLease& l) {
    if (l.data_ != nullptr) ThePool().Return(l.data_, l.size_, l.backend_);
    l.data_ = nullptr;
    l.size_ = 0;
    l.backend_ = nullptr;
  }
};

PinnedLease::PinnedLease(PinnedLease&& o) noexcept : data_(o.data_), size_(o.size_), backend_(o.backend_) {
  o.data_ = nullptr;
  o.size_ = 0;
  o.backend_ = nullptr;
}

PinnedLease& PinnedLease::operator=(PinnedLease&& o) noexcept {
  if (this != &o) {
    PinnedPoolAccess::Return(*this);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(backend_, o.backend_);
  }
  return *this;
}

PinnedLease::~PinnedLease() { PinnedPoolAccess::Return(*this); }

StatusOr<PinnedLease> LeasePinned(size_t n) { return PinnedPoolAccess::Lease(n); }

void TrimPinnedPool() { ThePool().Trim(); }

void CountStagedBytes(uint64_t to_host, uint64_t to_device) { ThePool().Count(to_host, to_device); }

Status SetDeviceStagingLimit(uint64_t bytes) { return ThePool().SetLimit(bytes); }

DeviceStagingStats GetDeviceStagingStats() { return ThePool().Stats(); }

}  // namespace ckptdb
