// ConnectGloo through a rendezvous store the application brings (the way
// the Python package meets in PyTorch's c10d store): ranks as threads of
// this process meet in an in-memory store and then talk over gloo; the
// store's contract (create once, first writer wins) is what keeps two
// launches apart, and a config without a name for the store is refused.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ckptdb/ckptdb.h"

namespace ckptdb {
namespace {

class MemoryStore final : public RendezvousStore {
 public:
  StatusOr<bool> CreateKey(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> l(mu_);
    return keys_.emplace(key, value).second;
  }
  StatusOr<std::optional<std::string>> Get(const std::string& key) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = keys_.find(key);
    if (it == keys_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> keys_;
};

DistributedConfig Config(int rank, int world, const std::string& job) {
  DistributedConfig c;
  c.rank = rank;
  c.world_size = world;
  c.rendezvous = "the test's memory store";
  c.job_id = job;
  c.launch_id = "launch-1";
  c.timeout = std::chrono::milliseconds(10000);
  c.bind_address = "127.0.0.1";
  return c;
}

TEST(AppRendezvousTest, RanksMeetInTheApplicationsStoreAndTalkOverGloo) {
  MemoryStore store;
  const int world = 3;
  std::vector<std::string> got(world);
  std::vector<Status> errors(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      // One store for every rank, as a c10d store is shared by a job's ranks.
      StatusOr<std::unique_ptr<Communicator>> comm = ConnectGloo(Config(r, world, "job"), store);
      if (!comm.ok()) {
        errors[r] = comm.status();
        return;
      }
      std::string data = r == 0 ? "from rank 0" : "";
      errors[r] = (*comm)->Broadcast(&data, 0);
      got[r] = data;
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(errors[r].ok()) << "rank " << r << ": " << errors[r];
    EXPECT_EQ(got[r], "from rank 0");
  }
  // A second connection of the same job and launch finds the keys of the
  // first: refused on rank 0, naming the job and the store.
  StatusOr<std::unique_ptr<Communicator>> again = ConnectGloo(Config(0, world, "job"), store);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists) << again.status();
  EXPECT_NE(again.status().message().find("the test's memory store"), std::string::npos) << again.status();
}

TEST(AppRendezvousTest, AConfigMustNameTheStoreAndBeValid) {
  MemoryStore store;
  DistributedConfig c = Config(0, 1, "job");
  c.rendezvous = "";
  StatusOr<std::unique_ptr<Communicator>> comm = ConnectGloo(c, store);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kInvalidArgument);
  c = Config(3, 2, "job");
  comm = ConnectGloo(c, store);
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("rank 3 is not in [0, 2)"), std::string::npos) << comm.status();
}

// One rank's view of the shared store, recording the keys it reads.
class CountingView final : public RendezvousStore {
 public:
  explicit CountingView(RendezvousStore& store) : store_(store) {}
  StatusOr<bool> CreateKey(const std::string& key, const std::string& value) override {
    return store_.CreateKey(key, value);
  }
  StatusOr<std::optional<std::string>> Get(const std::string& key) override {
    StatusOr<std::optional<std::string>> v = store_.Get(key);
    if (v.ok() && v->has_value()) read_.insert(key);
    return v;
  }
  const std::set<std::string>& keys_read() const { return read_; }

 private:
  RendezvousStore& store_;
  std::set<std::string> read_;
};

// The ranks a key names: its path segments that are numbers.
std::set<int> RanksNamed(const std::string& key) {
  std::set<int> ranks;
  size_t start = 0;
  while (start <= key.size()) {
    size_t end = key.find('/', start);
    if (end == std::string::npos) end = key.size();
    const std::string part = key.substr(start, end - start);
    if (!part.empty() && part.find_first_not_of("0123456789") == std::string::npos) ranks.insert(std::stoi(part));
    start = end + 1;
  }
  return ranks;
}

// The rendezvous goes through rank 0: a rank other than 0 reads the same
// few keys at any world size, none naming a rank but 0 and itself (it read
// every rank's claim and addresses before), and connects to rank 0 alone.
// Whether rank 0's claim is there yet when the rank looks for it depends on
// timing, so the counts are compared without it.
TEST(AppRendezvousTest, WhatARankOtherThanZeroReadsDoesNotGrowWithTheWorld) {
  auto run = [](int world) {
    MemoryStore store;
    std::vector<std::unique_ptr<CountingView>> views;
    for (int r = 0; r < world; ++r) views.push_back(std::make_unique<CountingView>(store));
    std::vector<Status> errors(world);
    std::vector<uint64_t> peers(world);
    std::vector<std::thread> ranks;
    for (int r = 0; r < world; ++r) {
      ranks.emplace_back([&, r] {
        StatusOr<std::unique_ptr<Communicator>> comm = ConnectGloo(Config(r, world, "job"), *views[r]);
        errors[r] = comm.status();
        if (comm.ok()) {
          std::string data = r == 0 ? "hello" : "";
          errors[r] = (*comm)->Broadcast(&data, 0);
          peers[r] = (*comm)->stats().peers;
        }
      });
    }
    for (std::thread& t : ranks) t.join();
    for (int r = 0; r < world; ++r) EXPECT_TRUE(errors[r].ok()) << "world " << world << ", rank " << r << ": " << errors[r];
    EXPECT_EQ(peers[0], static_cast<uint64_t>(world - 1));
    EXPECT_EQ(peers[world - 1], 1u);
    const int last = world - 1;
    size_t last_read = 0;
    for (const std::string& key : views[last]->keys_read()) {
      for (int r : RanksNamed(key)) {
        EXPECT_TRUE(r == 0 || r == last) << "at " << world << " ranks, rank " << last << " read " << key;
      }
      if (key.size() < 7 || key.compare(key.size() - 7, 7, "/rank/0") != 0) ++last_read;
    }
    return std::make_pair(views[0]->keys_read().size(), last_read);
  };
  const auto small = run(4), large = run(16);
  EXPECT_GT(small.second, 0u);
  EXPECT_EQ(large.second, small.second) << "keys the last rank read (rank 0's claim aside): " << small.second
                                        << " at 4 ranks, " << large.second << " at 16";
  EXPECT_GT(large.first, small.first);  // rank 0 reads every rank's
}

}  // namespace
}  // namespace ckptdb
