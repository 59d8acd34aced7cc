#include "util/thread_fanout.h"

#include <algorithm>
#include <system_error>

namespace ckptdb {

ThreadFanout::ThreadFanout(size_t n, size_t most, std::function<void(size_t)> fn) : n_(n), fn_(std::move(fn)) {
  const size_t want = std::min(n, most);
  threads_.reserve(want);
  for (size_t t = 0; t < want; ++t) {
    try {
      threads_.emplace_back([this] { Work(); });
    } catch (const std::system_error&) {
      break;  // no more threads to be had: those started, and Join, take the rest
    }
  }
}

void ThreadFanout::Work() {
  for (size_t i = next_++; i < n_; i = next_++) fn_(i);
}

void ThreadFanout::Join() {
  Work();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

}  // namespace ckptdb
