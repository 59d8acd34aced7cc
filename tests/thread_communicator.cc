#include "thread_communicator.h"

#include <chrono>
#include <cstring>
#include <thread>

namespace ckptdb::testing {

std::vector<std::string> ThreadHub::Exchange(int rank, const std::string& mine) {
  std::unique_lock<std::mutex> lock(mu_);
  // Wait until the previous round has been read by everyone.
  cv_.wait(lock, [&] { return departed_ == 0 || arrived_ < world_; });
  const uint64_t round = round_;
  slots_[rank] = mine;
  if (++arrived_ == world_) cv_.notify_all();
  cv_.wait(lock, [&] { return arrived_ == world_ || round_ != round; });
  std::vector<std::string> all = slots_;
  if (++departed_ == world_) {
    arrived_ = 0;
    departed_ = 0;
    ++round_;
    cv_.notify_all();
  }
  return all;
}

void ThreadHub::Put(int from, int to, std::string message) {
  std::lock_guard<std::mutex> lock(mu_);
  mail_[{from, to}].push_back(std::move(message));
  cv_.notify_all();
}

bool ThreadHub::Take(int from, int to, std::string* message) {
  std::unique_lock<std::mutex> lock(mu_);
  auto& box = mail_[{from, to}];
  if (!cv_.wait_for(lock, std::chrono::seconds(60), [&] { return !box.empty(); })) return false;
  *message = std::move(box.front());
  box.pop_front();
  return true;
}

namespace {

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadHub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return hub_->world(); }
  Status Broadcast(std::string* data, int root) override {
    *data = hub_->Exchange(rank_, rank_ == root ? *data : std::string())[root];
    return Status::OK();
  }
  Status Gather(const std::string& mine, int root, std::vector<std::string>* out) override {
    auto all = hub_->Exchange(rank_, mine);
    if (rank_ == root) *out = std::move(all);
    else out->clear();
    return Status::OK();
  }
  Status AllGather(const std::string& mine, std::vector<std::string>* out) override {
    *out = hub_->Exchange(rank_, mine);
    return Status::OK();
  }
  Status Barrier() override {
    hub_->Exchange(rank_, "");
    return Status::OK();
  }
  Status Send(int peer, const void* data, size_t n) override {
    if (n > 0) hub_->Put(rank_, peer, std::string(static_cast<const char*>(data), n));
    return Status::OK();
  }
  Status Recv(int peer, void* data, size_t n) override {
    if (n == 0) return Status::OK();
    std::string m;
    if (!hub_->Take(peer, rank_, &m)) {
      return Status::DeadlineExceeded("receive from rank " + std::to_string(peer) + " timed out");
    }
    if (m.size() != n) {
      return Status::Internal("rank " + std::to_string(peer) + " sent " + std::to_string(m.size()) +
                              " bytes where " + std::to_string(n) + " were expected");
    }
    std::memcpy(data, m.data(), n);
    return Status::OK();
  }

 private:
  std::shared_ptr<ThreadHub> hub_;
  int rank_;
};

}  // namespace

std::unique_ptr<Communicator> NewThreadCommunicator(std::shared_ptr<ThreadHub> hub, int rank) {
  return std::make_unique<ThreadCommunicator>(std::move(hub), rank);
}

void RunRanksAsThreads(int world, const std::function<void(int, Communicator&)>& fn) {
  auto hub = std::make_shared<ThreadHub>(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto comm = NewThreadCommunicator(hub, r);
      fn(r, *comm);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace ckptdb::testing
