// Ranks as threads (the first tier of multi-rank tests; real processes over
// TCP are the second): a Communicator per thread over a shared in-memory hub.
#ifndef CKPTDB_TESTS_THREAD_COMMUNICATOR_H_
#define CKPTDB_TESTS_THREAD_COMMUNICATOR_H_

#include <condition_variable>
#include <deque>
#include <map>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ckptdb/communicator.h"

namespace ckptdb::testing {

class ThreadHub {
 public:
  explicit ThreadHub(int world) : world_(world), slots_(world) {}
  int world() const { return world_; }
  // Deposits `mine` and returns every rank's deposit of this round.
  std::vector<std::string> Exchange(int rank, const std::string& mine);
  // Point to point: queues a message from `from` to `to`; Take waits (up to
  // 60 s) for the oldest one.
  void Put(int from, int to, std::string message);
  bool Take(int from, int to, std::string* message);

 private:
  const int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> slots_;
  int arrived_ = 0;
  int departed_ = 0;
  uint64_t round_ = 0;
  std::map<std::pair<int, int>, std::deque<std::string>> mail_;
};

std::unique_ptr<Communicator> NewThreadCommunicator(std::shared_ptr<ThreadHub> hub, int rank);

// Runs fn(rank, communicator) on `world` threads and waits for all.
void RunRanksAsThreads(int world, const std::function<void(int, Communicator&)>& fn);

}  // namespace ckptdb::testing

#endif  // CKPTDB_TESTS_THREAD_COMMUNICATOR_H_
