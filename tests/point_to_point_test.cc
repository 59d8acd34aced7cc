// Point-to-point messages (Communicator::Send, Recv, SendParts, RecvParts)
// between ranks as threads: over gloo on 127.0.0.1 (a file rendezvous), and
// over the in-memory communicator whose SendParts and RecvParts are the
// defaults. Parts are messages of their own: whatever sends them, one by
// one or all at once, whatever receives them does the same.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ckptdb/ckptdb.h"
#include "test_util.h"
#include "thread_communicator.h"

namespace ckptdb {
namespace {

// Runs fn(rank, communicator) on 2 ranks as threads, over gloo or in memory.
void RunTwoRanks(bool gloo, const std::function<void(int, Communicator&)>& fn) {
  if (!gloo) {
    testing::RunRanksAsThreads(2, fn);
    return;
  }
  testing::TempDir dir;
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      DistributedConfig c;
      c.rank = r;
      c.world_size = 2;
      c.rendezvous = "file://" + dir.Sub("rdv");
      c.job_id = "p2p";
      c.launch_id = "launch-1";
      c.timeout = std::chrono::milliseconds(20000);
      StatusOr<std::unique_ptr<Communicator>> comm = ConnectGloo(c);
      ASSERT_TRUE(comm.ok()) << comm.status();
      fn(r, **comm);
    });
  }
  for (std::thread& t : ranks) t.join();
}

std::string Bytes(size_t n, char seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + i * 131 + (i >> 12));
  return s;
}

class PointToPointTest : public ::testing::TestWithParam<bool> {};

TEST_P(PointToPointTest, PartsAreMessagesOfTheirOwnInOrderAmongSingleOnes) {
  // Sizes around gloo's socket buffers, and an empty part that is skipped.
  const std::vector<std::string> parts = {Bytes(1 << 20, 1), "", Bytes(3, 2), Bytes(9 << 20, 3), Bytes(70000, 4)};
  RunTwoRanks(GetParam(), [&](int rank, Communicator& comm) {
    if (rank == 0) {
      ASSERT_TRUE(comm.Send(1, "a", 1).ok());
      std::vector<Communicator::Part> out;
      for (const std::string& p : parts) out.push_back({p.data(), p.size()});
      ASSERT_TRUE(comm.SendParts(1, out).ok());
      // Sent one by one, received all at once.
      for (const std::string& p : parts) ASSERT_TRUE(comm.Send(1, p.data(), p.size()).ok());
      ASSERT_TRUE(comm.Send(1, "z", 1).ok());
      return;
    }
    char c = 0;
    ASSERT_TRUE(comm.Recv(0, &c, 1).ok());
    EXPECT_EQ(c, 'a');
    for (int round = 0; round < 2; ++round) {
      std::vector<std::string> got;
      std::vector<Communicator::MutablePart> in;
      for (const std::string& p : parts) got.emplace_back(p.size(), '\0');
      for (std::string& g : got) in.push_back({g.data(), g.size()});
      ASSERT_TRUE(comm.RecvParts(0, in).ok());
      EXPECT_EQ(got, parts) << "round " << round;
    }
    ASSERT_TRUE(comm.Recv(0, &c, 1).ok());
    EXPECT_EQ(c, 'z');
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, PointToPointTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Gloo" : "InMemory"; });

}  // namespace
}  // namespace ckptdb
