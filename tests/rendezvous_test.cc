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
#include "test_util.h"

namespace ckptdb {
namespace {

using Clock = std::chrono::steady_clock;

// One process of ckptdb_rank_helper: its rank, the world size it is told,
// its arguments and environment (on top of the job's).
struct Proc {
  int rank;
  int world;
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
};

struct ProcResult {
  int exit_code = -1;
  double seconds = 0;  // from the start of the job to this process's exit
  std::string code;    // status code name ("" when it wrote no report)
  std::string failed;  // failed ranks of a checkpoint error
  std::string text;    // Status::ToString()
};

// Starts every process at once, waits for all (killing all of them after
// `limit_s`, so a hang fails the test instead of stalling it), and reads
// their reports.
std::vector<ProcResult> RunProcs(const std::vector<Proc>& procs, const std::string& rendezvous,
                                 const std::string& job_id, int timeout_ms, const std::string& out_dir,
                                 double limit_s = 30) {
  std::vector<pid_t> pids;
  std::vector<ProcResult> results(procs.size());
  const auto t0 = Clock::now();
  for (size_t i = 0; i < procs.size(); ++i) {
    const std::string report = out_dir + "/proc-" + std::to_string(i) + ".txt";
    std::filesystem::remove(report);
    pid_t pid = fork();
    if (pid == 0) {
      setenv("CKPTDB_RANK", std::to_string(procs[i].rank).c_str(), 1);
      setenv("CKPTDB_WORLD_SIZE", std::to_string(procs[i].world).c_str(), 1);
      setenv("CKPTDB_RENDEZVOUS", rendezvous.c_str(), 1);
      setenv("CKPTDB_JOB_ID", job_id.c_str(), 1);
      setenv("CKPTDB_TIMEOUT_MS", std::to_string(timeout_ms).c_str(), 1);
      setenv("CKPTDB_TEST_REPORT", report.c_str(), 1);
      for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "CKPTDB_LAUNCH_ID", "TORCHELASTIC_RUN_ID",
                            "TORCHELASTIC_RESTART_COUNT"}) {
        unsetenv(v);
      }
      for (const auto& [k, v] : procs[i].env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(CKPTDB_RANK_HELPER));
      for (const std::string& a : procs[i].args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(CKPTDB_RANK_HELPER, argv.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  size_t running = pids.size();
  bool killed = false;
  while (running > 0) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      auto it = std::find(pids.begin(), pids.end(), pid);
      if (it == pids.end()) continue;
      ProcResult& r = results[it - pids.begin()];
      r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      --running;
      continue;
    }
    if (!killed && std::chrono::duration<double>(Clock::now() - t0).count() > limit_s) {
      ADD_FAILURE() << "processes still running after " << limit_s << " s: killing them";
      for (size_t i = 0; i < pids.size(); ++i) {
        if (results[i].exit_code < 0) kill(pids[i], SIGKILL);
      }
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (size_t i = 0; i < procs.size(); ++i) {
    std::ifstream in(out_dir + "/proc-" + std::to_string(i) + ".txt");
    if (!in) continue;
    ProcResult& r = results[i];
    std::string line;
    std::getline(in, r.code);
    std::getline(in, r.failed);
    std::getline(in, line);
    std::stringstream rest;
    rest << in.rdbuf();
    r.text = rest.str();
  }
  return results;
}

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
  // Ranks 0, 1, 2, 2 of a world of 4: rank 3 never comes, rank 2 twice.
  std::vector<Proc> procs = Job(4, dir_.Sub("store"), 1);
  procs[3].rank = 2;
  std::vector<ProcResult> results = RunProcs(procs, Rendezvous(), JobId(), kTimeoutMs, dir_.path());
  PrintFigures("two processes as rank 2", results);
  ExpectAllFailWithin(results, kBoundS, "rank 2");
  for (const ProcResult& r : results) EXPECT_NE(r.text.find("two processes claim rank 2"), std::string::npos) << r.text;
}

}  // namespace
}  // namespace ckptdb
