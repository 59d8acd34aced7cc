// Ranks as threads (src/comm/thread_communicator.h): the collectives'
// results and their per-rank counters; the gloo communicator's failure
// contract (a rank that leaves fails the others at once, naming it; one that
// never arrives fails them after the timeout, naming it); and the real save
// and load protocols at 64 thread-ranks, with a failing rank failing every
// rank alike and committing nothing.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ckptdb/ckptdb.h"
#include "checkpoint/plan_cache.h"
#include "comm/thread_communicator.h"
#include "test_util.h"

namespace ckptdb {
namespace {

using ::ckptdb::testing::FaultyReader;
using ::ckptdb::testing::FaultyWriter;
using ::ckptdb::testing::TempDir;

TEST(ThreadJobTest, CollectivesDeliverAndCountWhatADirectImplementationMoves) {
  constexpr int kWorld = 64;
  ThreadJob job(kWorld, std::chrono::seconds(30));
  std::mutex mu;
  std::vector<std::string> failures;
  RunRanksAsThreads(job, [&](int rank, Communicator& comm) {
    auto fail = [&](const std::string& what) {
      std::lock_guard<std::mutex> lock(mu);
      failures.push_back("rank " + std::to_string(rank) + ": " + what);
    };
    std::string data = rank == 3 ? std::string(100, 'b') : std::string();
    if (!comm.Broadcast(&data, 3).ok() || data != std::string(100, 'b')) fail("broadcast");
    std::vector<std::string> out;
    std::map<int, Status> missing;
    if (!comm.Gather(std::string(rank, 'g'), 0, &out, &missing).ok() || !missing.empty()) fail("gather");
    if (rank == 0 && (out.size() != kWorld || out[63] != std::string(63, 'g'))) fail("gather result");
    if (rank != 0 && !out.empty()) fail("gather left something on a non-root rank");
    if (!comm.AllGather(std::to_string(rank), &out).ok() || out.size() != kWorld || out[17] != "17") {
      fail("all-gather");
    }
    if (!comm.Barrier().ok()) fail("barrier");
    if (rank == 1 && !comm.Send(2, "hello", 5).ok()) fail("send");
    if (rank == 2) {
      char buf[5];
      if (!comm.Recv(1, buf, 5).ok() || std::string(buf, 5) != "hello") fail("recv");
    }
  });
  ASSERT_TRUE(failures.empty()) << failures.front();
  // The broadcast's root sent 100 bytes to each of 63; a rank received them
  // once. The gather's root received 1 + ... + 63 bytes.
  EXPECT_EQ(job.stats(3).bytes_sent, 100u * 63 + 3 + 63 /*all-gather: "3" to each*/);
  const uint64_t all_gather_in_5 = [] {
    uint64_t n = 0;
    for (int r = 0; r < kWorld; ++r) n += r == 5 ? 0 : std::to_string(r).size();
    return n;
  }();
  EXPECT_EQ(job.stats(5).bytes_received, 100u + all_gather_in_5);
  // (Every rank's number is one digit or two: what reaches rank 0 in the
  // all-gather is what reaches rank 5.)
  EXPECT_EQ(job.stats(0).bytes_received, 100u + 63u * 64 / 2 + all_gather_in_5);
  EXPECT_EQ(job.stats(2).bytes_received, 100u + all_gather_in_5 + 5);
  EXPECT_EQ(job.stats(5).peers, 63u);  // the all-gather reached everyone
  EXPECT_EQ(job.stats(5).calls, 4u);
}

TEST(ThreadJobTest, ARankThatLeavesFailsTheOthersAtOnceNamingIt) {
  ThreadJob job(8, std::chrono::seconds(60));
  std::mutex mu;
  std::vector<Status> statuses(8);
  const auto start = std::chrono::steady_clock::now();
  RunRanksAsThreads(job, [&](int rank, Communicator& comm) {
    if (rank == 6) return;  // returns early: its communicator goes
    if (rank == 7) throw std::runtime_error("rank 7 crashed");
    Status st = comm.Barrier();
    std::lock_guard<std::mutex> lock(mu);
    statuses[rank] = st;
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  for (int rank = 0; rank < 6; ++rank) {
    EXPECT_EQ(statuses[rank].code(), StatusCode::kUnavailable) << statuses[rank];
    // (Rank 6, 7 or both: whichever had gone when the others woke.)
    const std::string& m = statuses[rank].message();
    EXPECT_TRUE(m.find(": rank 6 left the job") != std::string::npos ||
                m.find(": rank 7 left the job") != std::string::npos ||
                m.find(": rank 6, 7 left the job") != std::string::npos)
        << statuses[rank];
  }
}

// Rooted calls tolerate lost ranks: the root of a gather learns which ranks
// left (at once) or hung (after the timeout), and can still tell the others,
// which wait for it past the timeout it spent.
TEST(ThreadJobTest, AGathersRootNamesLostRanksAndStillReachesTheOthers) {
  constexpr auto kTimeout = std::chrono::milliseconds(400);
  ThreadJob job(6, kTimeout);
  std::mutex mu;
  std::map<int, Status> missing;
  std::vector<std::string> told(6);
  std::vector<Status> statuses(6);
  RunRanksAsThreads(job, [&](int rank, Communicator& comm) {
    if (rank == 4) throw std::runtime_error("rank 4 crashed");
    if (rank == 5) std::this_thread::sleep_for(3 * kTimeout);  // hangs past the root's wait, then goes on
    std::vector<std::string> out;
    std::map<int, Status> lost;
    Status st = comm.Gather("r" + std::to_string(rank), 2, &out, &lost);
    std::string verdict;
    if (rank == 2) {
      for (const auto& [r, why] : lost) verdict += std::to_string(r) + ":" + StatusCodeName(why.code()) + " ";
    }
    if (st.ok()) st = comm.Broadcast(&verdict, 2);
    std::lock_guard<std::mutex> lock(mu);
    statuses[rank] = st;
    told[rank] = verdict;
    if (rank == 2) missing = lost;
  });
  ASSERT_EQ(missing.size(), 2u);
  EXPECT_EQ(missing[4].code(), StatusCode::kUnavailable) << missing[4];
  EXPECT_NE(missing[4].message().find("rank 4 left the job"), std::string::npos) << missing[4];
  EXPECT_EQ(missing[5].code(), StatusCode::kDeadlineExceeded) << missing[5];
  for (int rank : {0, 1, 2, 3}) {
    EXPECT_TRUE(statuses[rank].ok()) << "rank " << rank << ": " << statuses[rank];
    EXPECT_EQ(told[rank], "4:Unavailable 5:DeadlineExceeded ") << "rank " << rank;
  }
  // The hung rank, lost to the root, hears nothing and fails on its own.
  EXPECT_FALSE(statuses[5].ok());
}

TEST(ThreadJobTest, ARankThatNeverArrivesIsADeadlineNamingIt) {
  ThreadJob job(4, std::chrono::milliseconds(300));
  std::mutex mu;
  std::vector<Status> statuses(4);
  RunRanksAsThreads(job, [&](int rank, Communicator& comm) {
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::seconds(1));  // hangs past the timeout
    }
    Status st = comm.Barrier();
    Status again = comm.Barrier();  // a failed communicator stays failed
    std::lock_guard<std::mutex> lock(mu);
    statuses[rank] = st.ok() ? again : st;
  });
  for (int rank : {0, 1, 3}) {
    EXPECT_EQ(statuses[rank].code(), StatusCode::kDeadlineExceeded) << statuses[rank];
    EXPECT_NE(statuses[rank].message().find("rank 2 did not arrive within 300 ms"), std::string::npos)
        << statuses[rank];
  }
  EXPECT_FALSE(statuses[2].ok());
}

// The real protocols at 64 thread-ranks into a directory store: a save and
// a load in another sharding; then a save one of whose ranks fails to write
// fails on every rank alike, naming it, and commits nothing.
TEST(ThreadJobTest, SaveAndLoadAt64RanksAndAFailingRankFailsEveryRankAlike) {
  constexpr int kWorld = 64;
  TempDir dir;
  const std::string store = dir.Sub("store");
  const Tensor full = ::ckptdb::testing::PatternTensor(DType::kF32, {kWorld, 8}, 3);
  auto row = [&](int r) {
    Tensor t = Tensor::Zeros(DType::kF32, {1, 8}).value();
    std::memcpy(t.data(), static_cast<const char*>(full.data()) + r * 8 * sizeof(float), 8 * sizeof(float));
    return t;
  };
  auto save = [&](int64_t step, int failing_rank) {
    std::vector<Status> statuses(kWorld);
    std::mutex mu;
    ThreadJob job(kWorld, std::chrono::seconds(60));
    RunRanksAsThreads(job, [&](int rank, Communicator& comm) {
      auto w = OpenStoreWriter(store);
      StateDict sd;
      (void)sd.Add("t", ShardedTensor::Create(DType::kF32, {kWorld, 8}, {Shard{{rank, 0}, row(rank)}}).value());
      Status st = w.status();
      if (w.ok()) {
        FaultyWriter fw(w->get());
        if (rank == failing_rank) fw.on_write = [](const std::vector<WriteItem>&) { return Status::IOError("disk gone"); };
        SaveOptions o;
        o.step = step;
        o.communicator = &comm;
        st = Save(sd, fw, o);
      }
      std::lock_guard<std::mutex> lock(mu);
      statuses[rank] = st;
    });
    return statuses;
  };
  for (const Status& st : save(1, -1)) ASSERT_TRUE(st.ok()) << st;

  // Loaded with every rank taking the row of the next rank.
  std::vector<Status> statuses(kWorld);
  std::vector<StateDict> targets(kWorld);
  std::mutex mu;
  auto reader = OpenStoreReader(store);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ThreadJob load_job(kWorld, std::chrono::seconds(60));
  RunRanksAsThreads(load_job, [&](int rank, Communicator& comm) {
    const int r = (rank + 1) % kWorld;
    (void)targets[rank].Add(
        "t", ShardedTensor::Create(DType::kF32, {kWorld, 8}, {Shard{{r, 0}, Tensor::Zeros(DType::kF32, {1, 8}).value()}})
                 .value());
    LoadOptions o;
    o.step = 1;
    o.communicator = &comm;
    Status st = Load(targets[rank], **reader, o);
    std::lock_guard<std::mutex> lock(mu);
    statuses[rank] = st;
  });
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_TRUE(statuses[rank].ok()) << statuses[rank];
    const ShardedTensor& got = std::get<ShardedTensor>(*targets[rank].Find("t"));
    EXPECT_TRUE(got.local_shards()[0].tensor.BitwiseEquals(row((rank + 1) % kWorld))) << "rank " << rank;
  }

  const std::vector<Status> failed = save(2, 41);
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_EQ(failed[rank].ToString(), failed[0].ToString()) << "rank " << rank;
  }
  EXPECT_EQ(failed[0].code(), StatusCode::kIOError) << failed[0];
  ASSERT_EQ(failed[0].rank_failures().size(), 1u) << failed[0];
  EXPECT_EQ(failed[0].rank_failures().begin()->first, 41);
  ASSERT_TRUE((*reader)->Refresh().ok());
  auto steps = (*reader)->ListSteps();
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_EQ(steps->at(0).step, 1);
}

// The failure matrix at 64 thread-ranks: whichever rank fails in whichever
// phase of a save (planning, preparing on the coordinator, preparing
// storage, writing, finishing on the coordinator, leaving the job, with the
// coordinator on rank 0 or another) or of a load (reading metadata,
// reading), every rank returns the same error naming that rank, and nothing
// is committed.
TEST(ThreadJobTest, EveryFailureFailsEveryRankAlikeAt64Ranks) {
  constexpr int kWorld = 64;
  TempDir dir;
  const std::string store = dir.Sub("store");
  auto shard = [](int rank, int rows) {
    return ShardedTensor::Create(DType::kF32, {kWorld * rows, 4},
                                 {Shard{{rank * rows, 0}, ::ckptdb::testing::PatternTensor(DType::kF32, {rows, 4}, rank)}})
        .value();
  };
  struct SaveCase {
    const char* what;
    int coordinator, rank;
    std::function<void(FaultyWriter&)> fault;  // on `rank`'s writer
    bool leaves = false;                       // `rank` returns without saving
    bool bad_plan = false;                     // `rank`'s shard has another global shape
    StatusCode code;
    const char* message;
  };
  const Status io = Status::IOError("disk gone");
  const std::vector<SaveCase> cases = {
      {"plan on rank 9", 0, 9, nullptr, false, true, StatusCode::kInvalidArgument, "invalid state dict"},
      {"prepare on the coordinator", 0, 0, [&](FaultyWriter& w) { w.on_prepare = [&] { return io; }; }, false, false,
       StatusCode::kIOError, "failed to prepare storage"},
      {"prepare storage on rank 17", 0, 17,
       [&](FaultyWriter& w) { w.on_prepare_storage = [&] { return io; }; }, false, false, StatusCode::kIOError,
       "Failed to write data"},
      {"write on rank 63, coordinator 5", 5, 63,
       [&](FaultyWriter& w) { w.on_write = [&](const std::vector<WriteItem>&) { return io; }; }, false, false,
       StatusCode::kIOError, "Failed to write data"},
      {"finish on coordinator 5", 5, 5, [&](FaultyWriter& w) { w.on_finish = [&] { return io; }; }, false, false,
       StatusCode::kIOError, "Failed to finish checkpoint"},
      {"rank 30 leaves the job", 0, 30, nullptr, true, false, StatusCode::kUnavailable, "Failed to exchange plans"},
      // A writer whose report leaves a piece out, or names one the rank did
      // not plan: that rank's failure, not the coordinator's.
      {"rank 40's report lacks its piece", 0, 40,
       [](FaultyWriter& w) { w.edit_result = [](WriteResult* r) { r->items.clear(); }; }, false, false,
       StatusCode::kInternal, "lacks item 40/0 (a piece of 't')"},
      {"coordinator 7's report has an item it did not plan", 7, 7,
       [](FaultyWriter& w) {
         w.edit_result = [](WriteResult* r) {
           r->items.push_back(r->items.back());
           r->items.back().key.item = 9;
         };
       },
       false, false, StatusCode::kInternal, "its write report has item 7/9, which it did not plan to write"},
      {"rank 8 reports its piece twice", 0, 8,
       [](FaultyWriter& w) { w.edit_result = [](WriteResult* r) { r->items.push_back(r->items.back()); }; }, false,
       false, StatusCode::kInternal, "its write report has item 8/0 twice"},
      {"rank 12 reports its piece under rank 13's key", 0, 12,
       [](FaultyWriter& w) { w.edit_result = [](WriteResult* r) { r->items.back().key.rank = 13; }; }, false, false,
       StatusCode::kInternal, "its write report has item 13/0, of another rank"},
  };
  int64_t step = 1;
  auto save = [&](const SaveCase* c) {
    std::vector<Status> statuses(kWorld);
    ThreadJob job(kWorld, std::chrono::seconds(60));
    RunRanksAsThreads(job, [&](int rank, Communicator& comm) {
      if (c != nullptr && c->leaves && rank == c->rank) return;
      auto w = OpenStoreWriter(store);
      Status st = w.status();
      if (w.ok()) {
        StateDict sd;
        (void)sd.Add("t", c != nullptr && c->bad_plan && rank == c->rank ? shard(rank, 2) : shard(rank, 1));
        FaultyWriter fw(w->get());
        if (c != nullptr && c->fault && rank == c->rank) c->fault(fw);
        SaveOptions o;
        o.step = step;
        o.coordinator_rank = c != nullptr ? c->coordinator : 0;
        o.communicator = &comm;
        st = Save(sd, fw, o);
      }
      statuses[rank] = st;
    });
    return statuses;
  };
  auto committed = [&] {
    auto reader = OpenStoreReader(store);
    std::vector<int64_t> out;
    if (!reader.ok()) return out;
    auto steps = (*reader)->ListSteps();
    if (steps.ok()) {
      for (const auto& s : *steps) out.push_back(s.step);
    }
    return out;
  };
  for (const Status& st : save(nullptr)) ASSERT_TRUE(st.ok()) << st;
  for (const SaveCase& c : cases) {
    SCOPED_TRACE(c.what);
    ++step;
    const std::vector<Status> got = save(&c);
    int first = c.leaves && c.rank == 0 ? 1 : 0;
    for (int rank = 0; rank < kWorld; ++rank) {
      if (c.leaves && rank == c.rank) continue;
      EXPECT_EQ(got[rank].ToString(), got[first].ToString()) << "rank " << rank;
    }
    EXPECT_EQ(got[first].code(), c.code) << got[first];
    EXPECT_NE(got[first].ToString().find(c.message), std::string::npos) << got[first];
    if (c.bad_plan) {  // (the plans disagree: the merge names the rank)
      EXPECT_NE(got[first].ToString().find("on rank " + std::to_string(c.rank)), std::string::npos) << got[first];
    } else {
      ASSERT_EQ(got[first].rank_failures().size(), 1u) << got[first];
      EXPECT_EQ(got[first].rank_failures().begin()->first, c.rank) << got[first];
    }
    EXPECT_EQ(committed(), std::vector<int64_t>{1});
  }

  // Loads of step 1: a rank whose metadata read fails, or whose read fails.
  for (const bool in_read : {false, true}) {
    SCOPED_TRACE(in_read ? "read on rank 33" : "read_metadata on rank 12");
    const int failing = in_read ? 33 : 12;
    std::vector<Status> statuses(kWorld);
    ThreadJob job(kWorld, std::chrono::seconds(60));
    RunRanksAsThreads(job, [&](int rank, Communicator& comm) {
      auto r = OpenStoreReader(store);
      Status st = r.status();
      if (r.ok()) {
        FaultyReader fr(r->get());
        if (rank == failing) {
          if (in_read) {
            fr.on_read = [] { return Status::IOError("read failed"); };
          } else {
            fr.on_read_metadata = [] { return Status::IOError("metadata unreadable"); };
          }
        }
        StateDict target;
        (void)target.Add("t", ShardedTensor::Create(DType::kF32, {kWorld, 4},
                                                    {Shard{{rank, 0}, Tensor::Zeros(DType::kF32, {1, 4}).value()}})
                                  .value());
        LoadOptions o;
        o.step = 1;
        o.communicator = &comm;
        st = Load(target, fr, o);
      }
      statuses[rank] = st;
    });
    for (int rank = 0; rank < kWorld; ++rank) {
      EXPECT_EQ(statuses[rank].ToString(), statuses[0].ToString()) << "rank " << rank;
    }
    EXPECT_EQ(statuses[0].code(), StatusCode::kIOError) << statuses[0];
    ASSERT_EQ(statuses[0].rank_failures().size(), 1u) << statuses[0];
    EXPECT_EQ(statuses[0].rank_failures().begin()->first, failing) << statuses[0];
  }
}

// What a rank other than the coordinator sends and receives in a save and a
// load does not grow with the world size (it did when plans and statuses
// were all-gathered: every rank received every rank's); the coordinator
// receives from each rank once per gather.
TEST(ThreadJobTest, ControlTrafficOfARankDoesNotGrowWithTheWorldSize) {
  struct Traffic {
    CollectiveStats rank1, coordinator;
  };
  auto run = [](int world) {
    TempDir dir;
    const std::string store = dir.Sub("store");
    ThreadJob job(world, std::chrono::seconds(60));
    std::mutex mu;
    std::vector<std::string> failures;
    RunRanksAsThreads(job, [&](int rank, Communicator& comm) {
      auto w = OpenStoreWriter(store);
      Status st = w.status();
      if (st.ok()) {
        StateDict sd;
        (void)sd.Add("t", ShardedTensor::Create(DType::kF32, {world, 8},
                                                {Shard{{rank, 0}, ::ckptdb::testing::PatternTensor(DType::kF32, {1, 8}, rank)}})
                              .value());
        SaveOptions o;
        o.step = 1;
        o.communicator = &comm;
        st = Save(sd, **w, o);
        w->reset();
      }
      if (st.ok()) {
        auto r = OpenStoreReader(store);
        st = r.status();
        if (st.ok()) {
          StateDict target;
          (void)target.Add("t", ShardedTensor::Create(DType::kF32, {world, 8},
                                                      {Shard{{rank, 0}, Tensor::Zeros(DType::kF32, {1, 8}).value()}})
                                    .value());
          LoadOptions o;
          o.step = 1;
          o.communicator = &comm;
          st = Load(target, **r, o);
        }
      }
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back("rank " + std::to_string(rank) + ": " + st.ToString());
      }
    });
    EXPECT_TRUE(failures.empty()) << failures.front();
    return Traffic{job.stats(1), job.stats(0)};
  };
  const Traffic small = run(8), large = run(64);
  EXPECT_EQ(large.rank1.messages_received, small.rank1.messages_received);
  EXPECT_EQ(large.rank1.messages_sent, small.rank1.messages_sent);
  // (A few bytes more: varints of a larger shape and rank.)
  EXPECT_LE(large.rank1.bytes_received, small.rank1.bytes_received + 16);
  EXPECT_LE(large.rank1.bytes_sent, small.rank1.bytes_sent + 16);
  EXPECT_EQ(large.rank1.peers, 1u);  // the coordinator alone
  EXPECT_EQ(large.coordinator.peers, 63u);
  EXPECT_EQ(large.coordinator.messages_received, small.coordinator.messages_received / 7 * 63);
}

// Plan caching: a save whose plan is unchanged since the job's previous
// successful save sends a fingerprint, and the coordinator reuses its
// merged metadata; a plan changed on one rank is sent whole and merged
// anew (a change that contradicts the others fails every rank alike,
// naming that rank); after a failed save every plan goes whole again.
TEST(ThreadJobTest, AnUnchangedPlanIsNotSentAgainAndAChangedOneIs) {
  constexpr int kWorld = 16, kEntries = 20;
  TempDir dir;
  const std::string store = dir.Sub("store");
  ThreadJob job(kWorld, std::chrono::seconds(60));
  struct Round {
    Status status;
    bool sent_reference = false, reused_merge = false;
    uint64_t bytes_sent = 0, bytes_received = 0;
  };
  std::vector<std::vector<Round>> rounds(kWorld);
  RunRanksAsThreads(job, [&](int rank, Communicator& comm) {
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok()) << w.status();
    // `blob`: rank 5's bytes entry (only the coordinator's is saved, but
    // its size is in the rank's plan); `dtype`: rank 7's shards of "e3".
    auto save = [&](int64_t step, size_t blob, DType dtype) {
      StateDict sd;
      for (int e = 0; e < kEntries; ++e) {
        const DType d = e == 3 && rank == 7 ? dtype : DType::kF32;
        (void)sd.Add("e" + std::to_string(e),
                     ShardedTensor::Create(d, {kWorld, 4},
                                           {Shard{{rank, 0}, ::ckptdb::testing::PatternTensor(d, {1, 4}, rank + e)}})
                         .value());
      }
      (void)sd.Add("blob", Bytes{std::string(rank == 5 ? blob : 8, 'x')});
      const CollectiveStats before = comm.stats();
      SaveOptions o;
      o.step = step;
      o.communicator = &comm;
      Round r;
      r.status = Save(sd, **w, o);
      const CollectiveStats after = comm.stats();
      r.sent_reference = PlanCache::Of(comm).sent_reference();
      r.reused_merge = PlanCache::Of(comm).reused_merge();
      r.bytes_sent = after.bytes_sent - before.bytes_sent;
      r.bytes_received = after.bytes_received - before.bytes_received;
      rounds[rank].push_back(r);
    };
    save(1, 8, DType::kF32);
    save(2, 8, DType::kF32);    // unchanged
    save(3, 100, DType::kF32);  // rank 5's plan changed
    save(4, 100, DType::kF64);  // rank 7's contradicts the others
    save(5, 100, DType::kF32);  // after a failure
    save(6, 100, DType::kF32);  // unchanged again
  });
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_EQ(rounds[rank].size(), 6u);
    for (int i : {0, 1, 2, 4, 5}) ASSERT_TRUE(rounds[rank][i].status.ok()) << "rank " << rank << ": " << rounds[rank][i].status;
    EXPECT_FALSE(rounds[rank][0].sent_reference) << rank;
    EXPECT_TRUE(rounds[rank][1].sent_reference) << rank;
    EXPECT_EQ(rounds[rank][2].sent_reference, rank != 5) << rank;
    EXPECT_EQ(rounds[rank][3].sent_reference, rank != 7) << rank;
    EXPECT_FALSE(rounds[rank][4].sent_reference) << rank;  // (save 4 failed)
    EXPECT_TRUE(rounds[rank][5].sent_reference) << rank;
    // Save 4 fails alike on every rank, naming rank 7.
    EXPECT_EQ(rounds[rank][3].status.ToString(), rounds[0][3].status.ToString()) << rank;
  }
  EXPECT_EQ(rounds[0][3].status.code(), StatusCode::kInvalidArgument) << rounds[0][3].status;
  EXPECT_NE(rounds[0][3].status.ToString().find("'e3' on rank 7 has dtype f64"), std::string::npos)
      << rounds[0][3].status;
  // The coordinator merged anew unless every plan was unchanged.
  const std::vector<bool> reused = {rounds[0][0].reused_merge, rounds[0][1].reused_merge, rounds[0][2].reused_merge,
                                    rounds[0][4].reused_merge, rounds[0][5].reused_merge};
  EXPECT_EQ(reused, (std::vector<bool>{false, true, false, false, true}));
  // What a rank sends shrinks by its plan (20 entries: hundreds of bytes),
  // and what the coordinator receives by every rank's.
  EXPECT_LT(rounds[1][1].bytes_sent + 300, rounds[1][0].bytes_sent)
      << rounds[1][1].bytes_sent << " vs " << rounds[1][0].bytes_sent;
  EXPECT_LT(rounds[0][1].bytes_received + 300 * (kWorld - 1), rounds[0][0].bytes_received);
  EXPECT_GT(rounds[5][2].bytes_sent, rounds[1][2].bytes_sent + 300);  // rank 5 re-sent its plan

  // Every committed step loads back whole, and save 4 committed nothing.
  auto reader = OpenStoreReader(store);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto steps = (*reader)->ListSteps();
  ASSERT_TRUE(steps.ok());
  std::vector<int64_t> numbers;
  for (const auto& s : *steps) numbers.push_back(s.step);
  EXPECT_EQ(numbers, (std::vector<int64_t>{1, 2, 3, 5, 6}));
  // Save 2 reused what save 1 merged (the cache keeps the planned part of
  // what save 1 committed): the same entries and pieces, and each piece's
  // storage fields its own.
  {
    auto first = (*reader)->ReadMetadata(1), second = (*reader)->ReadMetadata(2);
    ASSERT_TRUE(first.ok() && second.ok());
    ASSERT_EQ(first->entries.size(), second->entries.size());
    EXPECT_EQ(second->world_size, kWorld);
    for (size_t i = 0; i < first->entries.size(); ++i) {
      const EntryMetadata &a = first->entries[i], &b = second->entries[i];
      EXPECT_EQ(a.fqn, b.fqn);
      EXPECT_EQ(a.shape, b.shape);
      ASSERT_EQ(a.pieces.size(), b.pieces.size()) << a.fqn;
      for (size_t k = 0; k < a.pieces.size(); ++k) {
        const StoredPiece &p = a.pieces[k], &q = b.pieces[k];
        EXPECT_EQ(p.offsets, q.offsets) << a.fqn << " piece " << k;
        EXPECT_EQ(p.sizes, q.sizes) << a.fqn << " piece " << k;
        EXPECT_EQ(p.key.rank, q.key.rank) << a.fqn << " piece " << k;
        EXPECT_EQ(p.key.item, q.key.item) << a.fqn << " piece " << k;
        EXPECT_EQ(p.nbytes, q.nbytes) << a.fqn << " piece " << k;
        EXPECT_EQ(p.num_chunks, q.num_chunks) << a.fqn << " piece " << k;
        EXPECT_EQ(p.chunk_hashes, q.chunk_hashes) << a.fqn << " piece " << k;
      }
    }
  }
  StateDict target;
  (void)target.Add("e3", Tensor::Zeros(DType::kF32, {kWorld, 4}).value());
  (void)target.Add("blob", Bytes{});
  LoadOptions o;
  o.step = 6;
  o.no_dist = true;
  ASSERT_TRUE(Load(target, **reader, o).ok());
  const Tensor& e3 = std::get<Tensor>(*target.Find("e3"));
  for (int rank = 0; rank < kWorld; ++rank) {
    const Tensor want = ::ckptdb::testing::PatternTensor(DType::kF32, {1, 4}, rank + 3);
    EXPECT_EQ(std::memcmp(static_cast<const char*>(e3.data()) + rank * 4 * sizeof(float), want.data(), 4 * sizeof(float)), 0)
        << "row " << rank;
  }
}

}  // namespace
}  // namespace ckptdb
