#include "store/fork_safe_env.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ckptdb {
namespace {

constexpr int kPriorities = rocksdb::Env::Priority::TOTAL;

// One priority's pool: jobs run in the order scheduled on `wanted` detached
// threads, started on first use. Never destroyed (see ProcessPools).
class Pool {
 public:
  struct Job {
    void (*function)(void*);
    void* arg;
    void* tag;
    void (*unschedule)(void*);
  };

  explicit Pool(int wanted) : wanted_(wanted) {}

  void Schedule(const Job& job) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(job);
    StartThreadsLocked();
    ready_.notify_one();
  }

  // Removes the queued (not yet running) jobs of `tag` and calls their
  // unschedule functions, as RocksDB's own pools do: DB::Close relies on it.
  int UnSchedule(void* tag) {
    std::vector<Job> removed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (it->tag == tag) {
          removed.push_back(*it);
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (const Job& j : removed) {
      if (j.unschedule != nullptr) j.unschedule(j.arg);
    }
    return static_cast<int>(removed.size());
  }

  unsigned QueueLen() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<unsigned>(queue_.size());
  }

  int Wanted() {
    std::lock_guard<std::mutex> lock(mu_);
    return wanted_;
  }

  // Sets the pool's size (grow_only: never below what it is). Threads
  // beyond a smaller size are not stopped: they keep serving the queue.
  void SetWanted(int n, bool grow_only) {
    std::lock_guard<std::mutex> lock(mu_);
    wanted_ = grow_only ? std::max(wanted_, n) : std::max(n, 0);
    if (!queue_.empty()) StartThreadsLocked();
  }

 private:
  void StartThreadsLocked() {
    // At least one thread, whatever the size asked: a job scheduled on a
    // pool of size 0 still runs (RocksDB routes flushes to the LOW pool when
    // HIGH has no threads, so this only matters for a caller that schedules
    // on an empty pool anyway).
    while (started_ < std::max(wanted_, 1)) {
      std::thread([this] { Run(); }).detach();
      ++started_;
    }
  }

  void Run() {
    while (true) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [this] { return !queue_.empty(); });
        job = queue_.front();
        queue_.pop_front();
      }
      job.function(job.arg);
    }
  }

  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<Job> queue_;
  int wanted_;
  int started_ = 0;
};

// The pools of one process. Made by the first call in a process (a forked
// child makes its own: its pid differs from the one recorded), published
// with a compare-and-swap rather than under a lock, since a lock taken in
// the parent may be held forever in the child. Never freed: a child's copy
// of its parent's pools may be locked, and detached threads use their own.
struct ProcessPools {
  pid_t pid;
  Pool* pools[kPriorities];
};

std::atomic<ProcessPools*> g_pools{nullptr};

// RocksDB's own defaults for a new process: one thread for compactions
// (LOW), one for flushes (HIGH); DB::Open raises them as its options ask.
constexpr int kDefaultThreads[kPriorities] = {/*BOTTOM*/ 0, /*LOW*/ 1, /*HIGH*/ 1, /*USER*/ 0};

ProcessPools* PoolsOfThisProcess() {
  const pid_t pid = getpid();
  ProcessPools* current = g_pools.load(std::memory_order_acquire);
  while (current == nullptr || current->pid != pid) {
    auto* fresh = new ProcessPools{pid, {}};
    for (int p = 0; p < kPriorities; ++p) fresh->pools[p] = new Pool(kDefaultThreads[p]);
    if (g_pools.compare_exchange_strong(current, fresh, std::memory_order_acq_rel)) return fresh;
    // Another thread of this process won the race; its pools have no
    // threads yet if ours lost, so ours are freed.
    for (Pool* pool : fresh->pools) delete pool;
    delete fresh;
  }
  return current;
}

Pool& PoolFor(rocksdb::Env::Priority pri) {
  const int p = (pri >= 0 && pri < kPriorities) ? pri : rocksdb::Env::Priority::LOW;
  return *PoolsOfThisProcess()->pools[p];
}

class ForkSafeEnv final : public rocksdb::EnvWrapper {
 public:
  explicit ForkSafeEnv(rocksdb::Env* base) : rocksdb::EnvWrapper(base) {}

  const char* Name() const override { return "CkptdbForkSafeEnv"; }

  void Schedule(void (*function)(void*), void* arg, Priority pri, void* tag, void (*unschedule)(void*)) override {
    PoolFor(pri).Schedule(Pool::Job{function, arg, tag, unschedule});
  }
  int UnSchedule(void* tag, Priority pri) override { return PoolFor(pri).UnSchedule(tag); }
  unsigned int GetThreadPoolQueueLen(Priority pri) const override { return PoolFor(pri).QueueLen(); }
  void SetBackgroundThreads(int number, Priority pri) override { PoolFor(pri).SetWanted(number, false); }
  int GetBackgroundThreads(Priority pri) override { return PoolFor(pri).Wanted(); }
  void IncBackgroundThreadsIfNeeded(int number, Priority pri) override { PoolFor(pri).SetWanted(number, true); }
  // Thread priorities are left as they are; reserving threads is not
  // supported (RocksDB's default answer, 0 reserved).
  void LowerThreadPoolIOPriority(Priority) override {}
  void LowerThreadPoolCPUPriority(Priority) override {}
  rocksdb::Status LowerThreadPoolCPUPriority(Priority, rocksdb::CpuPriority) override { return rocksdb::Status::OK(); }
  int ReserveThreads(int, Priority) override { return 0; }
  int ReleaseThreads(int, Priority) override { return 0; }
  void WaitForJoin() override {}
};

}  // namespace

std::unique_ptr<rocksdb::Env> NewForkSafeEnv(rocksdb::Env* base) {
  return std::make_unique<ForkSafeEnv>(base != nullptr ? base : rocksdb::Env::Default());
}

}  // namespace ckptdb
