// ckptdb-launch, run as a user would.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

using Launched = ckptdb::testing::CommandResult;

Launched Launch(const std::string& args) {
  // (The ranks listen on 127.0.0.1, whatever this host's name resolves to.)
  return ckptdb::testing::RunCommand("CKPTDB_BIND_ADDRESS=127.0.0.1 " + std::string(CKPTDB_LAUNCH) + " " + args +
                                     " 2>&1");
}

TEST(Launch, SetsEachRanksEnvironmentAndPrefixesItsOutput) {
  Launched r = Launch(
      "-n 3 -- sh -c 'echo \"r=$CKPTDB_RANK w=$CKPTDB_WORLD_SIZE l=$LOCAL_RANK t=$RANK/$WORLD_SIZE job=${#CKPTDB_JOB_ID} "
      "rdv=${CKPTDB_RENDEZVOUS%%/tmp*}\"'");
  ASSERT_EQ(r.code, 0) << r.out;
  for (int k = 0; k < 3; ++k) {
    std::string want = "[rank " + std::to_string(k) + "] r=" + std::to_string(k) + " w=3 l=" + std::to_string(k) +
                       " t=" + std::to_string(k) + "/3 job=20 rdv=file://\n";
    EXPECT_NE(r.out.find(want), std::string::npos) << r.out;
  }
}

// The launcher ignores SIGPIPE for itself, but its ranks start with the
// default disposition (and inherit none of each other's pipes).
TEST(Launch, RanksStartWithSigpipeAtItsDefaultAndNoOtherRanksPipes) {
  Launched r = Launch("-n 3 -- sh -c 'grep SigIgn /proc/self/status; ls /proc/self/fd | wc -l'");
  ASSERT_EQ(r.code, 0) << r.out;
  for (size_t pos = r.out.find("SigIgn:"); pos != std::string::npos; pos = r.out.find("SigIgn:", pos + 1)) {
    const unsigned long long ignored = std::stoull(r.out.substr(pos + 7), nullptr, 16);
    EXPECT_EQ(ignored & (1ull << (SIGPIPE - 1)), 0u) << r.out;
  }
  // As many descriptors in every rank: rank 2 would hold two more than rank
  // 0 if each rank inherited the pipes of the ranks started before it.
  std::set<std::string> counts;
  for (int k = 0; k < 3; ++k) {
    const std::string tag = "[rank " + std::to_string(k) + "] ";
    for (size_t pos = r.out.find(tag); pos != std::string::npos; pos = r.out.find(tag, pos + 1)) {
      const std::string line = r.out.substr(pos + tag.size(), r.out.find('\n', pos) - pos - tag.size());
      if (line.rfind("SigIgn", 0) != 0) counts.insert(line);
    }
  }
  EXPECT_EQ(counts.size(), 1u) << r.out;
}

// Every launch gets a launch id of its own, so a rendezvous and job id used
// before (or by a launch running now) serve the next launch too.
TEST(Launch, EveryLaunchHasItsOwnLaunchIdSoARendezvousCanBeReused) {
  ckptdb::testing::TempDir dir;
  const std::string args = "-n 4 --rendezvous file://" + dir.Sub("rdv") + " --job-id same -- " + CKPTDB_RANK_HELPER +
                           " save " + dir.Sub("store") + " ";
  Launched first = Launch(args + "1 " + dir.path());
  ASSERT_EQ(first.code, 0) << first.out;
  Launched second = Launch(args + "2 " + dir.path());
  EXPECT_EQ(second.code, 0) << second.out;
  Launched ids = Launch("-n 2 -- sh -c 'echo \"id=${#CKPTDB_LAUNCH_ID}\"'");
  EXPECT_NE(ids.out.find("id=23"), std::string::npos) << ids.out;
}

TEST(Launch, AFailingRankFailsTheJobAndStopsTheOthers) {
  auto t0 = std::chrono::steady_clock::now();
  Launched r = Launch("-n 3 --grace-ms 300 -- sh -c '[ $CKPTDB_RANK = 1 ] && exit 7; exec sleep 60'");
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.code, 7) << r.out;
  EXPECT_NE(r.out.find("rank 1 exited with code 7"), std::string::npos) << r.out;
  EXPECT_LT(s, 30.0) << "the sleeping ranks were not stopped";
}

TEST(Launch, ForwardsCtrlCToEveryRank) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    execl(CKPTDB_LAUNCH, CKPTDB_LAUNCH, "-n", "2", "--", "sh", "-c",
          "trap 'echo got INT; exit 5' INT; echo ready; while :; do sleep 0.05; done", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[256];
  // Wait until both ranks are up.
  while (out.find("[rank 0] ready") == std::string::npos || out.find("[rank 1] ready") == std::string::npos) {
    ssize_t n = read(fds[0], buf, sizeof buf);
    ASSERT_GT(n, 0) << out;
    out.append(buf, static_cast<size_t>(n));
  }
  kill(pid, SIGINT);
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  int status;
  waitpid(pid, &status, 0);
  close(fds[0]);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(out.find("[rank 0] got INT"), std::string::npos) << out;
  EXPECT_NE(out.find("[rank 1] got INT"), std::string::npos) << out;
}

TEST(Launch, UsageErrors) {
  EXPECT_EQ(Launch("-- true").code, 2);
  EXPECT_EQ(Launch("-n 2").code, 2);
  EXPECT_EQ(Launch("-n 0 -- true").code, 2);
  EXPECT_EQ(Launch("-n 2 --rendezvous tcp://x -- true").code, 2);
  Launched help = Launch("--help");
  EXPECT_EQ(help.code, 0);
  EXPECT_EQ(help.out.rfind("usage: ckptdb-launch", 0), 0u);
  Launched missing = Launch("-n 1 -- /nonexistent/program");
  EXPECT_EQ(missing.code, 127) << missing.out;
  EXPECT_NE(missing.out.find("cannot run '/nonexistent/program'"), std::string::npos) << missing.out;
}

// Whether process `pid` still runs (a zombie that nobody reaped has ended).
bool Running(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!f || !std::getline(f, line)) return false;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state != 'Z' && state != 'X';
}

// The command line of `pid`, arguments separated by spaces.
std::string CommandLine(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (char& c : s) {
    if (c == '\0') c = ' ';
  }
  return s;
}

TEST(Launch, RanksDieWithTheLauncherWhenItIsKilled) {
  ckptdb::testing::TempDir dir;
  constexpr int kRanks = 3;
  // Each rank records its pid (atomically, by rename) and sleeps long.
  const std::string rank_cmd = "echo $$ > " + dir.path() + "/pid.$CKPTDB_RANK.tmp && mv " + dir.path() +
                               "/pid.$CKPTDB_RANK.tmp " + dir.path() + "/pid.$CKPTDB_RANK && exec sleep 60";
  pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    // A rendezvous inside the test's directory: the killed launcher cannot
    // remove the one it would make itself.
    const std::string rendezvous = "file://" + dir.Sub("rendezvous");
    execl(CKPTDB_LAUNCH, CKPTDB_LAUNCH, "-n", std::to_string(kRanks).c_str(), "--rendezvous", rendezvous.c_str(), "--",
          "sh", "-c", rank_cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  std::vector<pid_t> ranks;
  // Whatever happens below, no sleeping rank outlives the test.
  struct Reaper {
    std::vector<pid_t>* pids;
    pid_t launcher;
    ~Reaper() {
      kill(launcher, SIGKILL);
      waitpid(launcher, nullptr, 0);
      for (pid_t p : *pids) {
        if (Running(p) && CommandLine(p).rfind("sleep 60", 0) == 0) kill(p, SIGKILL);
      }
    }
  } reaper{&ranks, launcher};

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int r = 0; r < kRanks; ++r) {
    pid_t pid = 0;
    while (pid == 0) {
      std::ifstream f(dir.Sub("pid." + std::to_string(r)));
      if (!(f >> pid)) pid = 0;
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "rank " << r << " did not start";
      if (pid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ranks.push_back(pid);
  }
  // Every rank is the sleep by now, or about to exec it.
  for (pid_t p : ranks) EXPECT_TRUE(Running(p)) << p;

  ASSERT_EQ(kill(launcher, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  ASSERT_TRUE(WIFSIGNALED(status));

  const auto gone_by = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::vector<pid_t> alive = ranks;
  while (!alive.empty() && std::chrono::steady_clock::now() < gone_by) {
    std::vector<pid_t> still;
    for (pid_t p : alive) {
      if (Running(p)) still.push_back(p);
    }
    alive.swap(still);
    if (!alive.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (pid_t p : alive) ADD_FAILURE() << "rank process " << p << " (" << CommandLine(p) << ") outlived the launcher";
}

}  // namespace
