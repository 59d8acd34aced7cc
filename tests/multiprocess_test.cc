// The save and load protocols across real processes over TCP on 127.0.0.1:
// PyTorch 1.13's failure matrix, a rank killed mid-write, a rank that never
// arrives, both rendezvous kinds, and 32 ranks on two cores.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "ckptdb/ckptdb.h"
#include "rank_jobs.h"
#include "redis_server.h"
#include "test_util.h"

namespace ckptdb {
namespace {

namespace fs = std::filesystem;

using Clock = std::chrono::steady_clock;

using RankResult = testing::ProcResult;

struct JobResult {
  std::vector<RankResult> ranks;
  double seconds = 0;  // until the last rank exited
};

// Starts `start` ranks (of a world of `world`) of ckptdb_rank_helper with
// `args`, waits for all (killing them after `limit`), and reads their reports.
JobResult RunJob(int world, const std::vector<std::string>& args, const std::string& rendezvous,
                 const std::string& out_dir, int start = -1, int timeout_ms = 20000,
                 std::chrono::seconds limit = std::chrono::seconds(120),
                 const std::map<std::string, std::string>& env = {}) {
  if (start < 0) start = world;
  static int job = 0;
  const std::string job_id = "test-" + std::to_string(getpid()) + "-" + std::to_string(job++);
  std::vector<testing::Proc> procs;
  for (int r = 0; r < start; ++r) procs.push_back(testing::Proc{r, world, args, env});
  JobResult result;
  result.ranks = testing::RunProcs(procs, rendezvous, job_id, timeout_ms, out_dir, static_cast<double>(limit.count()));
  for (const RankResult& r : result.ranks) result.seconds = std::max(result.seconds, r.seconds);
  return result;
}

std::string ThisHost() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

class MultiProcessTest : public ::testing::Test {
 protected:
  std::string FileRendezvous() { return "file://" + dir_.Sub("rdv"); }
  std::vector<std::string> Args(const std::string& mode, int64_t step, std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {mode, store_, std::to_string(step), dir_.path()};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  JobResult Save(int world, int64_t step, std::vector<std::string> extra = {}) {
    return RunJob(world, Args("save", step, std::move(extra)), FileRendezvous(), dir_.path());
  }
  JobResult LoadStep(int world, int64_t step, std::vector<std::string> extra = {}) {
    return RunJob(world, Args("load", step, std::move(extra)), FileRendezvous(), dir_.path());
  }

  // Every rank failed with the same error, naming exactly `failed` ranks.
  void ExpectFailedAlike(const JobResult& job, const std::string& failed, const std::string& message) {
    ASSERT_FALSE(job.ranks.empty());
    for (size_t r = 0; r < job.ranks.size(); ++r) {
      const RankResult& rr = job.ranks[r];
      EXPECT_EQ(rr.exit_code, 3) << "rank " << r << ": " << rr.text;
      EXPECT_EQ(rr.failed, failed) << "rank " << r << ": " << rr.text;
      EXPECT_EQ(rr.text, job.ranks[0].text) << "rank " << r << " reports a different error";
      EXPECT_NE(rr.text.find(message), std::string::npos) << rr.text;
    }
  }

  // No step committed, and after a sweep no data and no staging left.
  void ExpectStoreHoldsOnly(size_t steps) {
    {
      auto w = OpenStoreWriter(store_);
      ASSERT_TRUE(w.ok());
      auto swept = (*w)->Sweep();
      ASSERT_TRUE(swept.ok()) << swept.status();
    }
    auto r = OpenStoreReader(store_);
    ASSERT_TRUE(r.ok()) << r.status();
    auto listed = (*r)->ListSteps();
    ASSERT_TRUE(listed.ok());
    EXPECT_EQ(listed->size(), steps);
    uint64_t expect_keys = 0;
    for (const StepInfo& s : *listed) {
      auto md = (*r)->ReadMetadata(s.step);
      ASSERT_TRUE(md.ok());
      for (const EntryMetadata& e : md->entries) {
        for (const StoredPiece& p : e.pieces) expect_keys += p.num_chunks - p.referenced_chunks();  // (shared chunks are stored once)
      }
    }
    EXPECT_EQ(testing::CountDataKeys(store_), expect_keys);
    const std::string staging = store_ + "/staging";
    EXPECT_TRUE(!std::filesystem::exists(staging) || std::filesystem::is_empty(staging));
  }

  testing::TempDir dir_;
  std::string store_ = dir_.Sub("store");
};

TEST_F(MultiProcessTest, HappyPathWithFileRendezvous) {
  JobResult saved = Save(4, 100);
  for (const RankResult& r : saved.ranks) ASSERT_EQ(r.code, "OK") << r.text;
  JobResult loaded = LoadStep(4, 100);
  for (const RankResult& r : loaded.ranks) ASSERT_EQ(r.code, "OK") << r.text;
  auto reader = OpenStoreReader(store_);
  ASSERT_TRUE(reader.ok());
  auto md = (*reader)->ReadMetadata(100);
  ASSERT_TRUE(md.ok());
  EXPECT_EQ(md->world_size, 4);
  EXPECT_EQ(md->Find("sharded")->pieces.size(), 4u);
  EXPECT_EQ(md->Find("uneven")->shape, (Shape{10, 3}));
  // The whole sharded tensor reassembles on one process.
  auto whole = LoadWhole(**reader, 100, {"sharded"});
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(std::get<Tensor>(*whole->Find("sharded")).BitwiseEquals(testing::PatternTensor(DType::kF32, {24, 4}, 2)));
  ExpectStoreHoldsOnly(1);
}

// A step saved by 4 ranks loads on 2 (by columns) and on 3 (by rows), and
// on 5 ranks saved by 3 with columns.
TEST_F(MultiProcessTest, SavedOnFourLoadedOnTwoAndThree) {
  JobResult saved = Save(4, 40);
  for (const RankResult& r : saved.ranks) ASSERT_EQ(r.code, "OK") << r.text;
  JobResult on2 = LoadStep(2, 40, {"--layout", "cols"});
  ASSERT_EQ(on2.ranks.size(), 2u);
  for (const RankResult& r : on2.ranks) EXPECT_EQ(r.code, "OK") << r.text;
  JobResult on3 = LoadStep(3, 40);
  ASSERT_EQ(on3.ranks.size(), 3u);
  for (const RankResult& r : on3.ranks) EXPECT_EQ(r.code, "OK") << r.text;
  JobResult saved3 = Save(3, 41, {"--layout", "cols"});
  for (const RankResult& r : saved3.ranks) ASSERT_EQ(r.code, "OK") << r.text;
  JobResult on5 = LoadStep(5, 41);
  for (const RankResult& r : on5.ranks) EXPECT_EQ(r.code, "OK") << r.text;
  // (Loads go through OpenSharedStoreReader; ranks opening readers of their
  // own load alike.)
  JobResult own = LoadStep(3, 40, {"--own-reader", "--layout", "cols"});
  ASSERT_EQ(own.ranks.size(), 3u);
  for (const RankResult& r : own.ranks) EXPECT_EQ(r.code, "OK") << r.text;
}

// Save failures (PyTorch 1.13's matrix). In every case every rank fails with
// the same error naming exactly the injected ranks, and nothing is left.
struct SaveFault {
  const char* name;
  std::vector<std::string> args;
  const char* failed;
  const char* message;
};

TEST_F(MultiProcessTest, SaveFailureMatrix) {
  const SaveFault cases[] = {
      {"prepare on coordinator 0", {"--fail", "prepare@0"}, "0", "failed to prepare storage"},
      {"prepare on coordinator 1", {"--coordinator", "1", "--fail", "prepare@1"}, "1", "failed to prepare storage"},
      {"prepare_storage on rank 0", {"--fail", "prepare_storage@0"}, "0", "Failed to write data"},
      {"write on rank 1", {"--fail", "write@1"}, "1", "Failed to write data"},
      {"async write on rank 2", {"--fail", "async_write@2"}, "2", "injected async_write failure on rank 2"},
      {"bytes write on rank 3", {"--coordinator", "3", "--fail", "write_bytes@3"}, "3", "write_bytes failure"},
      {"writes on ranks 1 and 3", {"--fail", "write@1", "--fail", "write@3"}, "1 3", "Failed to write data"},
      {"finish on coordinator 0", {"--fail", "finish@0"}, "0", "Failed to finish checkpoint"},
      {"finish on coordinator 1", {"--coordinator", "1", "--fail", "finish@1"}, "1", "Failed to finish checkpoint"},
  };
  int64_t step = 1;
  for (const SaveFault& c : cases) {
    SCOPED_TRACE(c.name);
    ExpectFailedAlike(Save(4, step++, c.args), c.failed, c.message);
    ExpectStoreHoldsOnly(0);
  }
}

TEST_F(MultiProcessTest, LoadFailureMatrix) {
  JobResult saved = Save(4, 7);
  for (const RankResult& r : saved.ranks) ASSERT_EQ(r.code, "OK") << r.text;
  struct LoadFault {
    const char* name;
    std::vector<std::string> args;
    const char* failed;
  };
  const LoadFault cases[] = {
      {"read_metadata on rank 0", {"--fail", "read_metadata@0"}, "0"},
      {"read on rank 3", {"--fail", "read@3"}, "3"},
      {"coordinator 2, read on rank 0", {"--coordinator", "2", "--fail", "read@0"}, "0"},
      {"read on rank 3 of ranks with readers of their own", {"--own-reader", "--fail", "read@3"}, "3"},
      // Checked on every rank before any rank reads: no target changes.
      {"a target the step does not match on rank 1", {"--bad-target", "1"}, "1"},
  };
  for (const LoadFault& c : cases) {
    SCOPED_TRACE(c.name);
    ExpectFailedAlike(LoadStep(4, 7, c.args), c.failed, "Failed to load checkpoint");
  }
  // A step that does not exist fails on every rank.
  ExpectFailedAlike(LoadStep(4, 8), "0 1 2 3", "step 8 not found");
}

TEST_F(MultiProcessTest, RankKilledMidWriteTurnsIntoErrorsOnEverySurvivor) {
  const int timeout_ms = 5000;
  auto t0 = Clock::now();
  JobResult job = RunJob(4, Args("save", 3, {"--kill-in-write", "2"}), FileRendezvous(), dir_.path(), -1, timeout_ms);
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_EQ(job.ranks.size(), 4u);
  EXPECT_EQ(job.ranks[2].exit_code, 128 + SIGKILL);
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(job.ranks[r].exit_code, 3) << "rank " << r;
    EXPECT_NE(job.ranks[r].code, "OK") << job.ranks[r].text;
  }
  // Survivors do not hang: they return within the collective timeout (plus
  // process start-up), not after the test's 120 s limit.
  EXPECT_LT(seconds, 3.0 * timeout_ms / 1000) << "survivors took " << seconds << " s";
  ExpectStoreHoldsOnly(0);
}

// A rank that hangs (3 s, past the 1 s timeout) after writing: the
// coordinator stops waiting for its report at the timeout and tells every
// other rank, so that the survivors fail alike naming it (with an
// all-gather they each timed out on their own, naming no one); the hung
// rank fails on its own when it wakes; nothing is committed.
TEST_F(MultiProcessTest, ARankThatHangsIsNamedOnEverySurvivor) {
  JobResult job = RunJob(4, Args("save", 4, {"--stall-in-write", "2"}), FileRendezvous(), dir_.path(), -1,
                         /*timeout_ms=*/1000);
  ASSERT_EQ(job.ranks.size(), 4u);
  for (int r : {0, 1, 3}) {
    const RankResult& rr = job.ranks[r];
    EXPECT_EQ(rr.exit_code, 3) << "rank " << r << ": " << rr.text;
    EXPECT_EQ(rr.failed, "2") << "rank " << r << ": " << rr.text;
    EXPECT_EQ(rr.text, job.ranks[0].text) << "rank " << r << " reports a different error";
    EXPECT_NE(rr.text.find("Failed to write data"), std::string::npos) << rr.text;
    EXPECT_NE(rr.text.find("nothing came from rank 2 within 1000 ms"), std::string::npos) << rr.text;
  }
  EXPECT_EQ(job.ranks[2].exit_code, 3) << job.ranks[2].text;
  ExpectStoreHoldsOnly(0);
}

// The same with the coordinator on rank 2, whose connections to the other
// ranks were made on demand (relayed by rank 0) by the save's first rooted
// call: rank 3 hangs after writing, and every survivor fails alike naming it.
TEST_F(MultiProcessTest, ARankThatHangsIsNamedOnEverySurvivorWhenTheCoordinatorIsNotRankZero) {
  JobResult job = RunJob(5, Args("save", 4, {"--coordinator", "2", "--stall-in-write", "3"}), FileRendezvous(),
                         dir_.path(), -1, /*timeout_ms=*/1000);
  ASSERT_EQ(job.ranks.size(), 5u);
  for (int r : {0, 1, 2, 4}) {
    const RankResult& rr = job.ranks[r];
    EXPECT_EQ(rr.exit_code, 3) << "rank " << r << ": " << rr.text;
    EXPECT_EQ(rr.failed, "3") << "rank " << r << ": " << rr.text;
    EXPECT_EQ(rr.text, job.ranks[2].text) << "rank " << r << " reports a different error";
    EXPECT_NE(rr.text.find("nothing came from rank 3 within 1000 ms"), std::string::npos) << rr.text;
  }
  ExpectStoreHoldsOnly(0);
}

// A store on the coordinator's host only: the other ranks send their files
// over gloo's point-to-point pairs, and loading ranks fetch their chunks
// from the coordinator; a rank that dies while sending fails the save on
// every survivor, and nothing is committed.
TEST_F(MultiProcessTest, StoreOnTheCoordinatorsHostOnly) {
  JobResult saved = Save(4, 7, {"--coordinator-only"});
  for (const RankResult& r : saved.ranks) ASSERT_EQ(r.code, "OK") << r.text;
  ExpectStoreHoldsOnly(1);
  JobResult on3 = LoadStep(3, 7, {"--coordinator-only", "--layout", "cols"});
  ASSERT_EQ(on3.ranks.size(), 3u);
  for (const RankResult& r : on3.ranks) EXPECT_EQ(r.code, "OK") << r.text;
  JobResult saved2 = Save(3, 8, {"--coordinator-only", "--coordinator", "2", "--layout", "cols"});
  for (const RankResult& r : saved2.ranks) ASSERT_EQ(r.code, "OK") << r.text;
  JobResult on5 = LoadStep(5, 8, {"--coordinator-only", "--coordinator", "3"});
  for (const RankResult& r : on5.ranks) EXPECT_EQ(r.code, "OK") << r.text;

  const int timeout_ms = 5000;
  auto t0 = Clock::now();
  JobResult died = RunJob(4, Args("save", 9, {"--coordinator-only", "--kill-in-send", "2"}), FileRendezvous(),
                          dir_.path(), -1, timeout_ms);
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_EQ(died.ranks.size(), 4u);
  EXPECT_EQ(died.ranks[2].exit_code, 128 + SIGKILL);
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(died.ranks[r].exit_code, 3) << "rank " << r;
    EXPECT_NE(died.ranks[r].code, "OK") << died.ranks[r].text;
  }
  EXPECT_LT(seconds, 3.0 * timeout_ms / 1000) << "survivors took " << seconds << " s";
  ExpectStoreHoldsOnly(2);
}

// A rank killed while its files wait on its own host to be sent leaves its
// local staging directory behind; the next save that stages on that host
// (any job's, in the same directory) removes it. A live save's directory is
// never touched: each is locked (flock) by the process that made it.
// The killed rank stages on a host of its own (its own TMPDIR): on a shared
// one, a survivor of the same job that stages after the kill already sweeps
// the folder (as it should), and what is left would depend on timing.
TEST_F(MultiProcessTest, AKilledRanksLocalStagingIsRemovedByTheNextSaveOnItsHost) {
  const std::string host_a = dir_.Sub("tmp-a"), host_b = dir_.Sub("tmp-b");
  for (const std::string& d : {host_a, host_b}) std::filesystem::create_directories(d);
  auto staged = [](const std::string& tmp) {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(tmp)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("ckptdb-staging-", 0) == 0) names.push_back(name);
    }
    return names;
  };
  auto on_hosts = [&](int world, const std::vector<std::string>& args, const std::set<int>& on_b,
                      int timeout_ms = 20000) {
    static int job = 0;
    std::vector<testing::Proc> procs;
    for (int r = 0; r < world; ++r) {
      procs.push_back(testing::Proc{r, world, args, {{"TMPDIR", on_b.count(r) ? host_b : host_a}}});
    }
    return testing::RunProcs(procs, FileRendezvous(), "staging-" + std::to_string(getpid()) + "-" +
                             std::to_string(job++), timeout_ms, dir_.path(), 120);
  };
  std::vector<RankResult> saved = on_hosts(4, Args("save", 1, {"--coordinator-only"}), {2});
  for (const RankResult& r : saved) ASSERT_EQ(r.code, "OK") << r.text;
  EXPECT_TRUE(staged(host_a).empty());
  EXPECT_TRUE(staged(host_b).empty());
  // (In columns: step 1's rows would all be shared, and rank 2 would send no file.)
  std::vector<RankResult> died =
      on_hosts(4, Args("save", 2, {"--coordinator-only", "--layout", "cols", "--kill-in-send", "2"}), {2}, 5000);
  ASSERT_EQ(died.size(), 4u);
  EXPECT_EQ(died[2].exit_code, 128 + SIGKILL);
  EXPECT_TRUE(staged(host_a).empty()) << "the survivors remove their own folders";
  const std::vector<std::string> left = staged(host_b);
  ASSERT_GE(left.size(), 1u);
  for (const std::string& name : left) EXPECT_NE(name.find("-rank-2"), std::string::npos) << name;
  // The next save stages on host B from another rank.
  std::vector<RankResult> next = on_hosts(4, Args("save", 3, {"--coordinator-only"}), {1});
  for (const RankResult& r : next) ASSERT_EQ(r.code, "OK") << r.text;
  EXPECT_TRUE(staged(host_b).empty()) << "left: " << (staged(host_b).empty() ? "" : staged(host_b)[0]);
}

TEST_F(MultiProcessTest, RankThatNeverArrivesIsARendezvousTimeout) {
  JobResult job = RunJob(4, Args("save", 1), FileRendezvous(), dir_.path(), /*start=*/3, /*timeout_ms=*/1500);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(job.ranks[r].code, "DeadlineExceeded") << job.ranks[r].text;
    EXPECT_NE(job.ranks[r].text.find("rank(s) 3 of 4 never arrived"), std::string::npos) << job.ranks[r].text;
  }
  EXPECT_FALSE(std::filesystem::exists(store_ + "/db"));  // nothing was touched
}

// A store one rank cannot see (on its host the store's path is a disk of its
// own: here, another directory): that rank fails naming its host, and every
// rank reports it, also with a timeout shorter than the wait for a network
// file system to show the coordinator's staging directory (10 s).
TEST_F(MultiProcessTest, ARankThatCannotSeeTheStoreIsNamedOnEveryRankWhateverTheTimeout) {
  std::vector<testing::Proc> procs;
  for (int r = 0; r < 4; ++r) procs.push_back(testing::Proc{r, 4, Args("save", 1), {}});
  procs[2].args[1] = dir_.Sub("elsewhere");
  JobResult job;
  job.ranks = testing::RunProcs(procs, FileRendezvous(), "unseen-" + std::to_string(getpid()), /*timeout_ms=*/2000,
                                dir_.path());
  ExpectFailedAlike(job, "2", "is not shared with the coordinator: on this host (" + ThisHost() + ")");
  for (const RankResult& r : job.ranks) EXPECT_EQ(r.code, "FailedPrecondition") << r.text;
  ExpectStoreHoldsOnly(0);
}

TEST_F(MultiProcessTest, HappyPathWithRedisRendezvous) {
  testing::RedisServer redis;
  ASSERT_TRUE(redis.ready()) << "redis-server did not start (tools/install-deps.sh installs it)";
  JobResult saved = RunJob(4, Args("save", 5), redis.uri(), dir_.path());
  for (const RankResult& r : saved.ranks) ASSERT_EQ(r.code, "OK") << r.text;
  JobResult loaded = RunJob(4, Args("load", 5), redis.uri(), dir_.path());
  for (const RankResult& r : loaded.ranks) ASSERT_EQ(r.code, "OK") << r.text;
  ExpectStoreHoldsOnly(1);
  // The launches' keys expire (a shared Redis does not keep them for ever).
  const std::string port = redis.uri().substr(redis.uri().rfind(':') + 1);
  testing::CommandResult ttls = testing::RunCommand("for k in $(redis-cli -p " + port +
                                                    " --scan); do redis-cli -p " + port + " pttl \"$k\"; done");
  ASSERT_EQ(ttls.code, 0) << ttls.out;
  std::istringstream lines(ttls.out);
  int keys = 0;
  for (std::string line; std::getline(lines, line); ++keys) {
    EXPECT_GT(std::stoll(line), 0) << "a key without expiry: " << ttls.out;
  }
  EXPECT_GT(keys, 0);
}

// 32 ranks on this 2-core machine: the control plane holds up. Prints the
// time spent in collectives (a benchmark figure, not asserted).
// Connections on demand: a rank connects to rank 0 and to the root of the
// rooted calls it makes, not to every rank. A save coordinated by rank 0
// leaves every other rank with one connection; a load coordinated by rank 2
// adds the star around rank 2 (its peers relayed by rank 0).
TEST_F(MultiProcessTest, RanksConnectOnlyToTheRanksTheyExchangeMessagesWith) {
  // peers[r]: how many connections rank r must hold, given the roots.
  auto expect_peers = [](const JobResult& job, std::set<int> roots, const char* what) {
    for (size_t r = 0; r < job.ranks.size(); ++r) {
      ASSERT_EQ(job.ranks[r].code, "OK") << what << ", rank " << r << ": " << job.ranks[r].text;
      const int want = roots.count(static_cast<int>(r)) ? 7 : static_cast<int>(roots.size());
      EXPECT_EQ(job.ranks[r].peers, want) << what << ", rank " << r;
    }
  };
  expect_peers(Save(8, 1), {0}, "save coordinated by rank 0");
  expect_peers(LoadStep(8, 1, {"--coordinator", "2"}), {0, 2}, "load coordinated by rank 2");
  // The store on the coordinator's host only: point-to-point messages to and
  // from the coordinator, rank 3.
  expect_peers(Save(8, 2, {"--coordinator-only", "--coordinator", "3"}), {0, 3}, "save sent to rank 3");
  expect_peers(LoadStep(8, 2, {"--coordinator-only", "--coordinator", "3", "--layout", "cols"}), {0, 3},
               "load fetched from rank 3");
}

// Rank 0 holds a connection to every other rank. A node that starts the
// processes with a soft limit of open files below that (clusters often set
// 1,024 under a far higher hard limit) must not fail the job: each rank
// raises its soft limit, up to the hard limit, as far as a connection to
// every rank needs. A hard limit too low for that fails every rank alike,
// saying so, before any rank connects.
TEST_F(MultiProcessTest, ALimitOfOpenFilesBelowTheWorldIsRaisedOrNamed) {
  constexpr int kWorld = 40;
  JobResult saved = Save(kWorld, 1, {"--open-files", "30:20000"});
  for (const RankResult& r : saved.ranks) ASSERT_EQ(r.code, "OK") << r.text;
  JobResult loaded = LoadStep(kWorld, 1, {"--open-files", "30:20000"});
  for (const RankResult& r : loaded.ranks) ASSERT_EQ(r.code, "OK") << r.text;

  JobResult refused = Save(kWorld, 2, {"--open-files", "60:60@0"});
  for (const RankResult& r : refused.ranks) {
    EXPECT_EQ(r.code, "FailedPrecondition") << r.text;
    EXPECT_EQ(r.text, refused.ranks[0].text);
  }
  EXPECT_NE(refused.ranks[0].text.find("rank 0 of job"), std::string::npos) << refused.ranks[0].text;
  EXPECT_NE(refused.ranks[0].text.find("hard limit is 60"), std::string::npos) << refused.ranks[0].text;
  EXPECT_NE(refused.ranks[0].text.find("ulimit -n"), std::string::npos) << refused.ranks[0].text;
}

// Rank 0 connects to every other rank at once. A container or a scheduler
// often caps the tasks (threads) a job's processes may start (a cgroup's
// pids.max: Kubernetes' pod pid limit): rank 0 started a thread per peer,
// and a thread it could not start ended the process (std::terminate). It
// now connects on the threads it can have; and so, as the coordinator of a
// store on its host only, it receives and serves every rank.
TEST_F(MultiProcessTest, RankZeroConnectsUnderALimitOfTasks) {
  const std::string cgroup = "/sys/fs/cgroup/pids/ckptdb-test-" + std::to_string(getpid());
  std::error_code ec;
  fs::create_directory(cgroup, ec);
  if (ec || !fs::exists(cgroup + "/pids.max")) {
    GTEST_SKIP() << "no cgroup pids controller to make a limit of tasks with at " << cgroup;
  }
  struct Remove {
    std::string dir;
    ~Remove() {
      std::error_code e;
      fs::remove(dir, e);  // (rmdir: the job's processes have left it)
    }
  } remove{cgroup};
  {
    std::ofstream max(cgroup + "/pids.max");
    max << 24 << std::endl;
    ASSERT_TRUE(max.good());
  }
  constexpr int kWorld = 48;
  JobResult saved = Save(kWorld, 1, {"--pids-cgroup", cgroup + "@0"});
  for (const RankResult& r : saved.ranks) ASSERT_EQ(r.code, "OK") << r.text;
  JobResult loaded = LoadStep(kWorld, 1, {"--pids-cgroup", cgroup + "@0"});
  for (const RankResult& r : loaded.ranks) ASSERT_EQ(r.code, "OK") << r.text;
  // The store on the coordinator's host only: it receives every rank's
  // files, and serves every rank its chunks, on a thread per rank it can have.
  const std::vector<std::string> only = {"--pids-cgroup", cgroup + "@0", "--coordinator-only"};
  JobResult sent = Save(kWorld, 2, only);
  for (const RankResult& r : sent.ranks) ASSERT_EQ(r.code, "OK") << r.text;
  JobResult served = LoadStep(kWorld, 2, only);
  for (const RankResult& r : served.ranks) ASSERT_EQ(r.code, "OK") << r.text;
}

// What a rank other than the coordinator receives in a save and in a load,
// over gloo between processes, is the same at 4 and at 16 ranks (it grew
// linearly with the world when plans and statuses were all-gathered).
TEST_F(MultiProcessTest, ControlTrafficOfARankIsFlatInTheWorldSize) {
  struct Traffic {
    uint64_t save_bytes, save_messages, load_bytes, load_messages;
  };
  auto run = [&](int world, int64_t step) {
    JobResult saved = Save(world, step);
    JobResult loaded = LoadStep(world, step);
    for (const JobResult* j : {&saved, &loaded}) {
      for (const RankResult& r : j->ranks) EXPECT_EQ(r.code, "OK") << "world " << world << ": " << r.text;
    }
    const RankResult &s = saved.ranks.at(1), &l = loaded.ranks.at(1);
    std::printf("[ figures ] %d processes: rank 1 received %llu bytes in %llu messages saving, %llu in %llu loading; "
                "the coordinator %llu and %llu bytes\n",
                world, static_cast<unsigned long long>(s.bytes_received),
                static_cast<unsigned long long>(s.messages_received),
                static_cast<unsigned long long>(l.bytes_received),
                static_cast<unsigned long long>(l.messages_received),
                static_cast<unsigned long long>(saved.ranks[0].bytes_received),
                static_cast<unsigned long long>(loaded.ranks[0].bytes_received));
    return Traffic{s.bytes_received, s.messages_received, l.bytes_received, l.messages_received};
  };
  const Traffic small = run(4, 1), large = run(16, 2);
  EXPECT_GT(small.save_bytes, 0u);
  EXPECT_EQ(large.save_messages, small.save_messages);
  EXPECT_EQ(large.load_messages, small.load_messages);
  EXPECT_LE(large.save_bytes, small.save_bytes + 64);
  EXPECT_LE(large.load_bytes, small.load_bytes + 64);
}

TEST_F(MultiProcessTest, ThirtyTwoRanksSaveAndLoad) {
  JobResult saved = RunJob(32, Args("save", 32), FileRendezvous(), dir_.path(), -1, 60000);
  for (const RankResult& r : saved.ranks) ASSERT_EQ(r.code, "OK") << r.text;
  JobResult loaded = RunJob(32, Args("load", 32), FileRendezvous(), dir_.path(), -1, 60000);
  for (const RankResult& r : loaded.ranks) ASSERT_EQ(r.code, "OK") << r.text;
  auto median = [](const JobResult& j) {
    std::vector<double> v;
    for (const RankResult& r : j.ranks) v.push_back(r.collective_s);
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("[ figures ] 32 ranks: save job %.2f s (median rank %.3f s in collectives), "
              "load job %.2f s (median rank %.3f s in collectives)\n",
              saved.seconds, median(saved), loaded.seconds, median(loaded));
}

}  // namespace
}  // namespace ckptdb
