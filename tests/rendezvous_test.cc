// Joining a job, with real processes over TCP on 127.0.0.1: every phase of
// ConnectGloo is bounded by the timeout (a rank that dies while the ranks
// connect, ranks that disagree on the world size or share a rank id), and a
// job's ranks only ever form a job with ranks of their own launch (two
// launches with one job id on one rendezvous, a rendezvous left behind).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ckptdb/ckptdb.h"
#include "rank_jobs.h"
#include "test_util.h"

namespace ckptdb {
namespace {

using Clock = std::chrono::steady_clock;
using testing::Proc;
using testing::ProcResult;
using testing::RunProcs;

class RendezvousTest : public ::testing::Test {
 protected:
  // `world` processes, ranks 0..world-1, saving `step` into `store`.
  std::vector<Proc> Job(int world, const std::string& store, int64_t step, std::map<std::string, std::string> env = {}) {
    std::vector<Proc> procs;
    for (int r = 0; r < world; ++r) procs.push_back(Proc{r, world, {"save", store, std::to_string(step), dir_.path()}, env});
    return procs;
  }
  std::string Rendezvous() const { return "file://" + dir_.Sub("rdv"); }
  std::string JobId() { return "job-" + std::to_string(getpid()) + "-" + std::to_string(jobs_++); }

  // Every process failed (a ckptdb error) within the bound, its message
  // holding `fragment`.
  void ExpectAllFailWithin(const std::vector<ProcResult>& results, double bound_s, const std::string& fragment) {
    for (size_t i = 0; i < results.size(); ++i) {
      SCOPED_TRACE("process " + std::to_string(i));
      EXPECT_EQ(results[i].exit_code, 3) << results[i].text;
      EXPECT_LT(results[i].seconds, bound_s) << results[i].text;
      EXPECT_NE(results[i].text.find(fragment), std::string::npos) << results[i].text;
    }
  }

  static void PrintFigures(const char* what, const std::vector<ProcResult>& results) {
    std::string line;
    for (const ProcResult& r : results) line += " " + std::to_string(r.seconds).substr(0, 5);
    std::printf("[ figures ] %s: processes exited after (s):%s\n", what, line.c_str());
  }

  testing::TempDir dir_;
  int jobs_ = 0;
};

constexpr int kTimeoutMs = 2000;
// Timeout plus a generous constant for process start-up on a loaded
// machine: a correctness bound (no hang), not a speed benchmark.
constexpr double kBoundS = kTimeoutMs / 1000.0 + 3.0;

TEST_F(RendezvousTest, ARankThatDiesWhileRanksConnectFailsTheSurvivorsWithinTheTimeout) {
  std::vector<Proc> procs = Job(4, dir_.Sub("store"), 1);
  procs[3].env["CKPTDB_TEST_DIE_CONNECTING"] = "1";
  std::vector<ProcResult> results = RunProcs(procs, Rendezvous(), JobId(), kTimeoutMs, dir_.path());
  PrintFigures("rank 3 dies while connecting, timeout 2 s", results);
  EXPECT_EQ(results[3].exit_code, 9) << "rank 3 should have died connecting: " << results[3].text;
  results.pop_back();
  // A survivor still connecting fails naming the peers it could not connect
  // to ("connecting rank 0 to rank(s) 1, 3 ..."); one whose connection to
  // rank 3 completed before it died fails at its first collective instead.
  // Either way within the bound.
  ExpectAllFailWithin(results, kBoundS, "");
}

TEST_F(RendezvousTest, AWorldSizeDisagreementIsNamedOnEveryRank) {
  // Rank 0 believes the world has 5 ranks; the others 4.
  std::vector<Proc> procs = Job(4, dir_.Sub("store"), 1);
  procs[0].world = 5;
  std::vector<ProcResult> results = RunProcs(procs, Rendezvous(), JobId(), kTimeoutMs, dir_.path());
  PrintFigures("rank 0 says world size 5, the others 4", results);
  ExpectAllFailWithin(results, kBoundS, "says world size");
  for (const ProcResult& r : results) EXPECT_NE(r.text.find("rank 0 says world size 5"), std::string::npos) << r.text;

  // Rank 1 is told world size 3 in a job of 4.
  procs = Job(4, dir_.Sub("store"), 1);
  procs[1].world = 3;
  results = RunProcs(procs, Rendezvous(), JobId(), kTimeoutMs, dir_.path());
  PrintFigures("rank 1 says world size 3, the others 4", results);
  ExpectAllFailWithin(results, kBoundS, "says world size");
  for (const ProcResult& r : results) EXPECT_NE(r.text.find("rank 1 says world size 3"), std::string::npos) << r.text;
  EXPECT_FALSE(std::filesystem::exists(dir_.Sub("store") + "/db"));  // nothing was touched
}

TEST_F(RendezvousTest, TwoProcessesWithOneRankIdAreNamedOnEveryRank) {
  // Ranks 0, 1, 2, R of a world of 4: rank 3 never comes, rank R twice.
  // Rank 0 too: the second finds the launch opened already, and every
  // process (the first rank 0 included) names rank 0, not a stale launch.
  for (int twice : {2, 0}) {
    SCOPED_TRACE("rank " + std::to_string(twice) + " twice");
    std::vector<Proc> procs = Job(4, dir_.Sub("store"), 1);
    procs[3].rank = twice;
    std::vector<ProcResult> results = RunProcs(procs, Rendezvous(), JobId(), kTimeoutMs, dir_.path());
    PrintFigures(twice == 0 ? "two processes as rank 0" : "two processes as rank 2", results);
    const std::string named = "two processes claim rank " + std::to_string(twice) + " ";
    ExpectAllFailWithin(results, kBoundS, named);
    for (const ProcResult& r : results) EXPECT_EQ(r.code, "AlreadyExists") << r.text;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.Sub("store") + "/db"));  // nothing was touched
}

// The step of `store` holds exactly what launch `tag` of ckptdb_rank_helper
// saved: no shard of any other launch.
void ExpectStepOfLaunch(const std::string& store, int64_t step, uint32_t tag) {
  auto reader = OpenStoreReader(store);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto whole = LoadWhole(**reader, step);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(std::get<Tensor>(*whole->Find("replicated")).BitwiseEquals(testing::PatternTensor(DType::kF32, {32}, 1 + 10 * tag)));
  EXPECT_TRUE(std::get<Tensor>(*whole->Find("sharded")).BitwiseEquals(testing::PatternTensor(DType::kF32, {24, 4}, 2 + 10 * tag)))
      << "a shard of another launch in " << store;
  EXPECT_TRUE(std::get<Tensor>(*whole->Find("uneven")).BitwiseEquals(testing::PatternTensor(DType::kI16, {10, 3}, 3 + 10 * tag)))
      << "a shard of another launch in " << store;
  EXPECT_EQ(std::get<Bytes>(*whole->Find("bytes")).data, "hello from the coordinator of launch " + std::to_string(tag));
}

bool HasStep(const std::string& store, int64_t step) {
  if (!std::filesystem::exists(store + "/db")) return false;
  auto reader = OpenStoreReader(store);
  return reader.ok() && (*reader)->ReadMetadata(step).ok();
}

// Launches 1 and 2 of 4 ranks each, interleaved (0 of 1, 0 of 2, 1 of 1...),
// each saving step 1 into a store of its own with its own contents.
std::vector<Proc> TwoLaunches(const std::string& store1, const std::string& store2,
                              const std::map<std::string, std::string>& env1,
                              const std::map<std::string, std::string>& env2, const std::string& out_dir) {
  std::vector<Proc> procs;
  for (int r = 0; r < 4; ++r) {
    procs.push_back(Proc{r, 4, {"save", store1, "1", out_dir, "--tag", "1"}, env1});
    procs.push_back(Proc{r, 4, {"save", store2, "1", out_dir, "--tag", "2"}, env2});
  }
  return procs;
}

// Two launches with one job id on one rendezvous at the same time, each
// with its launch id (ckptdb-launch sets CKPTDB_LAUNCH_ID, torchrun
// TORCHELASTIC_RUN_ID): both form their jobs, apart, and each store holds
// only its own launch's shards. (Without launch ids two such launches cannot
// be told apart: see ConnectGloo in ckptdb/distributed.h.)
TEST_F(RendezvousTest, TwoLaunchesWithOneJobIdNeverFormOneJob) {
  // A launch id each (ckptdb-launch, torchrun): both form their jobs, apart.
  const std::string s1 = dir_.Sub("ids-1"), s2 = dir_.Sub("ids-2");
  std::vector<ProcResult> results =
      RunProcs(TwoLaunches(s1, s2, {{"CKPTDB_LAUNCH_ID", "launch-a"}}, {{"TORCHELASTIC_RUN_ID", "run-b"}}, dir_.path()),
               Rendezvous(), JobId(), kTimeoutMs, dir_.path());
  PrintFigures("two launches, one job id, a launch id each", results);
  for (const ProcResult& r : results) EXPECT_EQ(r.exit_code, 0) << r.text;
  ExpectStepOfLaunch(s1, 1, 1);
  ExpectStepOfLaunch(s2, 1, 2);
}

TEST_F(RendezvousTest, ARendezvousLeftByAFinishedLaunchIsRefusedOrUnseen) {
  const std::string job = JobId();
  auto with_tag = [](std::vector<Proc> procs, const std::map<std::string, std::string>& env) {
    for (Proc& p : procs) {
      p.args.insert(p.args.end(), {"--tag", "1"});
      p.env = env;
    }
    return procs;
  };
  // A finished launch without a launch id leaves its keys.
  std::vector<ProcResult> first = RunProcs(with_tag(Job(4, dir_.Sub("a"), 1), {}), Rendezvous(), job, kTimeoutMs, dir_.path());
  for (const ProcResult& r : first) ASSERT_EQ(r.exit_code, 0) << r.text;
  // The next launch of the job on that rendezvous, without a launch id:
  // refused on every rank, saying what to do.
  std::vector<ProcResult> again = RunProcs(with_tag(Job(4, dir_.Sub("a"), 2), {}), Rendezvous(), job, kTimeoutMs, dir_.path());
  PrintFigures("a stale rendezvous, no launch id", again);
  ExpectAllFailWithin(again, kBoundS, "CKPTDB_JOB_ID");
  for (const ProcResult& r : again) {
    EXPECT_NE(r.text.find("job '" + job + "'"), std::string::npos) << r.text;
    EXPECT_NE(r.text.find("Remove the rendezvous directory " + dir_.Sub("rdv")), std::string::npos) << r.text;
  }
  EXPECT_FALSE(HasStep(dir_.Sub("a"), 2));
  // With a launch id per launch (ckptdb-launch), the old keys are never
  // read: the same rendezvous and job id work again, and again.
  for (const char* id : {"launch-1", "launch-2"}) {
    std::vector<ProcResult> next =
        RunProcs(with_tag(Job(4, dir_.Sub("b"), id[7] - '0'), {{"CKPTDB_LAUNCH_ID", id}}), Rendezvous(), job, kTimeoutMs,
                 dir_.path());
    for (const ProcResult& r : next) EXPECT_EQ(r.exit_code, 0) << r.text;
  }
  ExpectStepOfLaunch(dir_.Sub("b"), 1, 1);
  ExpectStepOfLaunch(dir_.Sub("b"), 2, 1);
}

}  // namespace
}  // namespace ckptdb
