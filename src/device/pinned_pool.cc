// The pinned staging pool (src/device/pinned_pool.h).
#include "device/pinned_pool.h"

#include <condition_variable>
#include <mutex>
#include <vector>

#include "device/device_backend.h"

namespace ckptdb {

namespace {

struct Buffer {
  char* data;
  size_t size;
  DeviceBackend* backend;  // the one that allocated it, and must free it
  int device;              // current while it was allocated
};

// Sizes are rounded up to a power of two (at least 64 KiB) so that the last,
// shorter chunk of a tensor reuses a buffer instead of allocating one. A
// free buffer is reused only for its own size class: a big one lent for a
// small request would take a big share of the limit and serialise copies.
size_t SizeClass(size_t n, uint64_t limit) {
  size_t c = size_t{64} << 10;
  while (c < n) c <<= 1;
  return c <= limit ? c : n;
}

class Pool {
 public:
  Status Lease(size_t n, int device, Buffer* out) {
    std::unique_lock<std::mutex> lock(mu_);
    size_t want = 0;
    // First come, first served: a request waits for those before it, so a
    // big one is not starved by a stream of small ones. The limit may change
    // while waiting: checked again on every wake-up.
    const uint64_t ticket = next_ticket_++;
    while (true) {
      if (ticket == serving_) {
        if (n > limit_) {
          ++serving_;
          cv_.notify_all();
          return TooBig(n);
        }
        want = SizeClass(n, limit_);
        if (in_use_ + want <= limit_) break;
      }
      cv_.wait(lock);
    }
    ++serving_;
    cv_.notify_all();
    DeviceBackend* active = &ActiveDeviceBackend();
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].backend == active && free_[i].size == want) {
        *out = free_[i];
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
        Lent(want);
        return Status::OK();
      }
    }
    // A new buffer: first give back free ones until it fits under the limit.
    EvictLocked(want);
    pinned_ += want;  // reserved while allocating unlocked
    Lent(want);
    lock.unlock();
    StatusOr<void*> p = active->AllocPinned(want, device);
    lock.lock();
    if (!p.ok()) {
      pinned_ -= want;
      in_use_ -= want;
      cv_.notify_all();
      return p.status();
    }
    ++allocations_;
    *out = Buffer{static_cast<char*>(*p), want, active, device};
    return Status::OK();
  }

  // Buffers are freed under the lock, so that the pinned bytes never pass
  // the limit even for a moment; that is rare (a new size class, a lower
  // limit), and a buffer that is reused is never freed.
  void Return(const Buffer& b) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_use_ -= b.size;
      free_.push_back(b);
      EvictLocked(0);
    }
    cv_.notify_all();
  }

  void Trim() {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Buffer& b : free_) {
      pinned_ -= b.size;
      b.backend->FreePinned(b.data, b.device);
    }
    free_.clear();
  }

  Status SetLimit(uint64_t bytes) {
    if (bytes == 0) return Status::InvalidArgument("the device staging limit must be at least 1 byte");
    {
      std::lock_guard<std::mutex> lock(mu_);
      limit_ = bytes;
      EvictLocked(0);
    }
    cv_.notify_all();
    return Status::OK();
  }

  uint64_t Limit() {
    std::lock_guard<std::mutex> lock(mu_);
    return limit_;
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
  Status TooBig(size_t n) const {
    return Status::InvalidArgument("a staging buffer of " + std::to_string(n) +
                                   " bytes is over the device staging limit of " + std::to_string(limit_) +
                                   " bytes (SetDeviceStagingLimit; or a smaller chunk size)");
  }

  // Free buffers go (oldest first) until `more` bytes fit under the limit
  // beside what is allocated.
  void EvictLocked(size_t more) {
    while (!free_.empty() && pinned_ + more > limit_) {
      const Buffer& b = free_.front();
      b.backend->FreePinned(b.data, b.device);
      pinned_ -= b.size;
      free_.erase(free_.begin());
    }
  }

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
  uint64_t next_ticket_ = 0, serving_ = 0;  // the order requests are served in
  std::vector<Buffer> free_;
};

Pool& ThePool() {
  static Pool* pool = new Pool();  // never destroyed: leases may outlive static destruction
  return *pool;
}

}  // namespace

class PinnedPoolAccess {
 public:
  static StatusOr<PinnedLease> Lease(size_t n, int device) {
    Buffer b{};
    Status st = ThePool().Lease(n, device, &b);
    if (!st.ok()) return st;
    PinnedLease lease;
    lease.data_ = b.data;
    lease.size_ = b.size;
    lease.backend_ = b.backend;
    lease.device_ = b.device;
    return lease;
  }
  static void Return(PinnedLease& l) {
    if (l.data_ != nullptr) ThePool().Return(Buffer{l.data_, l.size_, l.backend_, l.device_});
    l.data_ = nullptr;
    l.size_ = 0;
    l.backend_ = nullptr;
  }
};

PinnedLease::PinnedLease(PinnedLease&& o) noexcept
    : data_(o.data_), size_(o.size_), backend_(o.backend_), device_(o.device_) {
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
    std::swap(device_, o.device_);
  }
  return *this;
}

PinnedLease::~PinnedLease() { PinnedPoolAccess::Return(*this); }

StatusOr<PinnedLease> LeasePinned(size_t n, int device) { return PinnedPoolAccess::Lease(n, device); }

uint64_t PinnedPoolLimit() { return ThePool().Limit(); }

void TrimPinnedPool() { ThePool().Trim(); }

void CountStagedBytes(uint64_t to_host, uint64_t to_device) { ThePool().Count(to_host, to_device); }

Status SetDeviceStagingLimit(uint64_t bytes) { return ThePool().SetLimit(bytes); }

DeviceStagingStats GetDeviceStagingStats() { return ThePool().Stats(); }

}  // namespace ckptdb
