// Jobs on threads of their own, as many as can be had. A coordinator of
// thousands of ranks starts a thread per rank (to connect to it, to receive
// its files, to serve its chunks), and a process whose tasks are capped (a
// container's or a cgroup's pids.max, RLIMIT_NPROC) cannot start them all:
// a std::thread that cannot start throws, and one thrown while others run
// ended the process (std::terminate). ThreadFanout starts up to `most`
// threads and, when no more can be started, lets the threads it has, and
// the caller in Join, take the jobs that are left, one after another.
#ifndef CKPTDB_SRC_UTIL_THREAD_FANOUT_H_
#define CKPTDB_SRC_UTIL_THREAD_FANOUT_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

namespace ckptdb {

class ThreadFanout {
 public:
  // Starts fn(i) for every i in [0, n), on up to `most` threads; each
  // thread takes the next job not taken when it is done with one.
  ThreadFanout(size_t n, size_t most, std::function<void(size_t)> fn);
  ~ThreadFanout() { Join(); }
  ThreadFanout(const ThreadFanout&) = delete;
  ThreadFanout& operator=(const ThreadFanout&) = delete;

  // Runs the jobs no thread took yet on the calling thread, then waits for
  // every thread.
  void Join();

  // Threads started (fewer than asked where no more could be).
  size_t threads() const { return threads_.size(); }

 private:
  void Work();

  const size_t n_;
  const std::function<void(size_t)> fn_;
  std::atomic<size_t> next_{0};
  std::vector<std::thread> threads_;
};

}  // namespace ckptdb

#endif  // CKPTDB_SRC_UTIL_THREAD_FANOUT_H_
