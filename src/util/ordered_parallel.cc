#include "util/ordered_parallel.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace ckptdb {

int DefaultParallelism() {
  // Once per process: glibc answers hardware_concurrency by opening and
  // reading /sys/devices/system/cpu/online every time, which was half the
  // CPU of a read of many small pieces (ckptdb verify: one Read per piece).
  static const int threads = [] {
    const unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 2 : static_cast<int>(std::min(n, 64u));
  }();
  return threads;
}

Status RunOrdered(size_t n, int threads, size_t window, const std::function<Status(size_t, std::string*)>& produce,
                  const std::function<Status(size_t, std::string&)>& consume) {
  if (threads <= 1 || n <= 1) {
    std::string buf;
    for (size_t i = 0; i < n; ++i) {
      Status st = produce(i, &buf);
      if (st.ok()) st = consume(i, buf);
      if (!st.ok()) return st;
    }
    return Status::OK();
  }
  window = std::max<size_t>(window, 1);
  struct Slot {
    std::string buf;
    size_t job = SIZE_MAX;  // the job whose result the slot holds
    bool ready = false;
  };
  std::vector<Slot> slots(window);
  std::mutex mu;
  std::condition_variable cv;
  size_t next = 0;      // next job to hand out
  size_t consumed = 0;  // jobs consumed so far
  Status failed;

  auto worker = [&] {
    std::string buf;
    while (true) {
      size_t i;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return !failed.ok() || next >= n || next < consumed + window; });
        if (!failed.ok() || next >= n) return;
        i = next++;
      }
      Status st = produce(i, &buf);
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!st.ok()) {
          if (failed.ok()) failed = st;
        } else {
          Slot& s = slots[i % window];
          std::swap(s.buf, buf);
          s.job = i;
          s.ready = true;
        }
      }
      cv.notify_all();
    }
  };
  const int workers = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), n));
  std::vector<std::thread> pool;
  for (int t = 0; t < workers; ++t) pool.emplace_back(worker);

  for (size_t i = 0; i < n; ++i) {
    Slot* s = &slots[i % window];
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return !failed.ok() || (s->ready && s->job == i); });
      if (!failed.ok()) break;
    }
    // The slot is ours until it is released below: no worker writes to slot
    // i % window before job i + window, which waits for `consumed`.
    Status st = consume(i, s->buf);
    {
      std::lock_guard<std::mutex> lock(mu);
      s->ready = false;
      ++consumed;
      if (!st.ok() && failed.ok()) failed = st;
    }
    cv.notify_all();
    if (!st.ok()) break;
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    if (failed.ok() && consumed < n) failed = Status::Internal("ordered run stopped early");
  }
  cv.notify_all();
  for (std::thread& t : pool) t.join();
  return failed;
}

}  // namespace ckptdb
