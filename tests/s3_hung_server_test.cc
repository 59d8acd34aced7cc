// A bucket whose server stops answering: SeaweedFS stopped with SIGSTOP, so
// its sockets stay open (connections are even accepted) and nothing ever
// answers, as with a hung server process, a partitioned network or a load
// balancer that holds the connection. In the middle of a 2-rank save, of a
// 2-rank load, and under the `ckptdb` command, every rank must end with the
// same Unavailable error, naming the server and "no answer", within the
// stall limit and its retries (CKPTDB_S3_STALL_TIMEOUT=2 here), never a
// hang; after SIGCONT nothing of the failed step is visible, gc cleans up,
// and the step saves again. The ranks are ckptdb_rank_helper processes over
// gloo on loopback. The server is this test's own (tools/seaweedfs.sh), not
// the S3Server fixture's, which the other tests share.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "bucket/bucket_store.h"
#include "ckptdb/ckptdb.h"
#include "s3/s3_client.h"
#include "s3_test_server.h"
#include "test_util.h"

extern char** environ;

namespace ckptdb {
namespace {

using ::ckptdb::testing::TempDir;

constexpr int kStallSeconds = 2;
// Every rank's collective timeout: longer than the bounds asserted, so that
// an error reaching the others is the bucket's, not a timeout's.
constexpr int kJobTimeoutMs = 60000;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

int Wait(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class S3HungServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // (Skipped where the fixture's server could not be had: no SeaweedFS.)
    if (!::ckptdb::testing::TestS3Server().skip_reason.empty()) {
      GTEST_SKIP() << ::ckptdb::testing::TestS3Server().skip_reason;
    }
    server_dir_ = dir_.Sub("server");
    auto started = ::ckptdb::testing::RunCommand(std::string(CKPTDB_SOURCE_DIR) + "/tools/seaweedfs.sh start " +
                                                 server_dir_ + " 2>&1");
    ASSERT_EQ(started.code, 0) << started.out;
    server_ = ::ckptdb::testing::ReadS3ServerEnv(server_dir_ + "/server.env");
    ASSERT_TRUE(server_.skip_reason.empty()) << server_.skip_reason;
    weed_pid_ = static_cast<pid_t>(std::atoi(ReadAll(server_dir_ + "/weed.pid").c_str()));
    ASSERT_GT(weed_pid_, 0);
    auto c = s3::S3Client::Create(server_.settings);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
    ASSERT_TRUE(client_->CreateBucket("hung").ok());
    // A new bucket's first write waits for SeaweedFS to grow its volumes
    // (seconds): not under the 2 s stall limit of the tests.
    auto warm = client_->PutObject("hung", "warm", "x");
    ASSERT_TRUE(warm.ok()) << warm.status();
    url_ = "s3://hung/store/";
  }

  void TearDown() override {
    if (weed_pid_ > 0) {
      kill(weed_pid_, SIGCONT);
      (void)::ckptdb::testing::RunCommand(std::string(CKPTDB_SOURCE_DIR) + "/tools/seaweedfs.sh stop " + server_dir_ +
                                          " 2>&1");
    }
  }

  // The environment of a process of ours against this server.
  std::vector<std::string> Environment() const {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string v = *e;
      if (v.rfind("AWS_", 0) != 0 && v.rfind("CKPTDB_", 0) != 0) env.push_back(v);
    }
    env.push_back("AWS_ENDPOINT_URL=" + server_.settings.endpoint);
    env.push_back("AWS_ACCESS_KEY_ID=" + server_.settings.credentials.access_key_id);
    env.push_back("AWS_SECRET_ACCESS_KEY=" + server_.settings.credentials.secret_access_key);
    env.push_back("AWS_REGION=us-east-1");
    env.push_back("AWS_CONFIG_FILE=/nonexistent");
    env.push_back("AWS_SHARED_CREDENTIALS_FILE=/nonexistent");
    env.push_back("CKPTDB_S3_STALL_TIMEOUT=" + std::to_string(kStallSeconds));
    return env;
  }

  struct JobResult {
    double seconds = 0;
    std::vector<std::string> reports;  // rank R's report (rank_helper.cc)
  };

  // Runs `mode` (save or load) of `step` on 2 ranks; `extra` goes to each.
  JobResult RunJob(const std::string& mode, int64_t step, const std::vector<std::string>& extra) {
    static int job = 0;
    const std::string id = "hung-" + std::to_string(getpid()) + "-" + std::to_string(job++);
    const std::string out = dir_.Sub("out-" + id);
    ::ckptdb::testing::RunCommand("mkdir -p " + out);
    std::vector<pid_t> pids;
    const auto start = std::chrono::steady_clock::now();
    for (int rank = 0; rank < 2; ++rank) {
      std::vector<std::string> env = Environment();
      env.push_back("CKPTDB_RANK=" + std::to_string(rank));
      env.push_back("CKPTDB_WORLD_SIZE=2");
      env.push_back("CKPTDB_RENDEZVOUS=file://" + dir_.Sub("rdv-" + id));
      env.push_back("CKPTDB_JOB_ID=" + id);
      env.push_back("CKPTDB_BIND_ADDRESS=127.0.0.1");
      env.push_back("CKPTDB_TIMEOUT_MS=" + std::to_string(kJobTimeoutMs));
      std::vector<std::string> args = {CKPTDB_RANK_HELPER, mode, url_, std::to_string(step), out, "--tag",
                                       std::to_string(step)};
      args.insert(args.end(), extra.begin(), extra.end());
      pids.push_back(::ckptdb::testing::SpawnProcess(args, env));
    }
    JobResult r;
    for (pid_t pid : pids) (void)Wait(pid);
    r.seconds = SecondsSince(start);
    for (int rank = 0; rank < 2; ++rank) r.reports.push_back(ReadAll(out + "/rank-" + std::to_string(rank) + ".txt"));
    return r;
  }

  // A report's first two lines: the status code and the failed ranks.
  static std::string Verdict(const std::string& report) {
    const size_t first = report.find('\n');
    const size_t second = first == std::string::npos ? first : report.find('\n', first + 1);
    return report.substr(0, second);
  }

  // Both ranks failed alike, with the bucket's error, in bounded time.
  void ExpectBothFailedAlike(const JobResult& r, const char* what) {
    ASSERT_EQ(r.reports.size(), 2u);
    EXPECT_EQ(Verdict(r.reports[0]), Verdict(r.reports[1])) << what << "\nrank 0:\n"
                                                            << r.reports[0] << "rank 1:\n"
                                                            << r.reports[1];
    EXPECT_EQ(r.reports[0].rfind("Unavailable\n", 0), 0u) << what << ":\n" << r.reports[0];
    for (const std::string& report : r.reports) {
      EXPECT_NE(report.find("no answer for " + std::to_string(kStallSeconds) + " s"), std::string::npos)
          << what << ":\n" << report;
      EXPECT_NE(report.find(server_.settings.endpoint), std::string::npos) << what << ":\n" << report;
    }
    // Well within the job's timeout: the ranks ended on the stall limit.
    EXPECT_LT(r.seconds, 40.0) << what << " took " << r.seconds << " s";
    std::printf("%s failed alike on both ranks in %.1f s\n", what, r.seconds);
  }

  std::vector<int64_t> Steps() {
    auto made = s3::S3Client::Create(server_.settings);
    EXPECT_TRUE(made.ok()) << made.status();
    if (!made.ok()) return {};
    auto reader = bucket::OpenBucketStoreReader(std::shared_ptr<s3::S3Client>(std::move(*made)), "hung", "store/");
    EXPECT_TRUE(reader.ok()) << reader.status();
    if (!reader.ok()) return {};
    auto steps = (*reader)->ListSteps();
    EXPECT_TRUE(steps.ok()) << steps.status();
    std::vector<int64_t> out;
    if (steps.ok()) {
      for (const StepInfo& s : *steps) out.push_back(s.step);
    }
    return out;
  }

  size_t ObjectsUnder(const std::string& dir) {
    auto all = client_->ListAll("hung", "store/" + dir);
    EXPECT_TRUE(all.ok()) << all.status();
    return all.ok() ? all->size() : 0;
  }

  ::ckptdb::testing::CommandResult Cli(const std::string& args) {
    std::string line = "env";
    for (const std::string& e : Environment()) {
      if (e.rfind("AWS_", 0) == 0 || e.rfind("CKPTDB_", 0) == 0) line += " '" + e + "'";
    }
    return ::ckptdb::testing::RunCommand(line + " " + CKPTDB_CLI + " " + args + " 2>&1");
  }

  TempDir dir_;
  std::string server_dir_;
  ::ckptdb::testing::S3TestServer server_;
  pid_t weed_pid_ = 0;
  std::unique_ptr<s3::S3Client> client_;
  std::string url_;
};

TEST_F(S3HungServerTest, ASaveLoadAndTheCliEndAlikeOnEveryRankWhenTheServerStopsAnswering) {
  JobResult first = RunJob("save", 1, {});
  ASSERT_EQ(first.reports[0].rfind("OK\n", 0), 0u) << first.reports[0];
  ASSERT_EQ(first.reports[1].rfind("OK\n", 0), 0u) << first.reports[1];

  // The save of step 2: the server stops as the ranks start writing.
  JobResult save = RunJob("save", 2, {"--stop-in-write", std::to_string(weed_pid_)});
  ExpectBothFailedAlike(save, "the save");
  ASSERT_EQ(kill(weed_pid_, SIGCONT), 0);
  // Nothing of step 2 is visible; gc takes what it left; it saves again.
  EXPECT_EQ(Steps(), std::vector<int64_t>{1});
  auto gc = Cli("gc " + url_ + " --abandoned-after 0");
  EXPECT_EQ(gc.code, 0) << gc.out;
  EXPECT_EQ(ObjectsUnder("data/00000000000000000002/"), 0u);
  EXPECT_EQ(ObjectsUnder("pending/"), 0u);
  JobResult again = RunJob("save", 2, {});
  EXPECT_EQ(again.reports[0].rfind("OK\n", 0), 0u) << again.reports[0];
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1, 2}));

  // An async save alike: the error reaches every rank's wait.
  JobResult async = RunJob("save", 3, {"--async", "--stop-in-write", std::to_string(weed_pid_)});
  ExpectBothFailedAlike(async, "the async save");
  ASSERT_EQ(kill(weed_pid_, SIGCONT), 0);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1, 2}));

  // A load of it: the server stops as the ranks start reading.
  JobResult load = RunJob("load", 2, {"--stop-in-read", std::to_string(weed_pid_)});
  ExpectBothFailedAlike(load, "the load");
  ASSERT_EQ(kill(weed_pid_, SIGCONT), 0);
  JobResult loaded = RunJob("load", 2, {});
  EXPECT_EQ(loaded.reports[0].rfind("OK\n", 0), 0u) << loaded.reports[0];
  EXPECT_EQ(loaded.reports[1].rfind("OK\n", 0), 0u) << loaded.reports[1];

  // The command: each ends with the error, naming the server, in bounded time.
  ASSERT_EQ(kill(weed_pid_, SIGSTOP), 0);
  for (const std::string& args : {"ls " + url_, "verify " + url_ + " 2", "cat " + url_ + " 2 t",
                                 "gc " + url_, "cp " + url_ + " " + dir_.Sub("copy")}) {
    const auto start = std::chrono::steady_clock::now();
    auto r = Cli(args);
    const double took = SecondsSince(start);
    EXPECT_NE(r.code, 0) << "ckptdb " << args << ":\n" << r.out;
    EXPECT_NE(r.out.find("no answer for " + std::to_string(kStallSeconds) + " s"), std::string::npos)
        << "ckptdb " << args << ":\n" << r.out;
    EXPECT_NE(r.out.find(server_.settings.endpoint), std::string::npos) << "ckptdb " << args << ":\n" << r.out;
    EXPECT_LT(took, 20.0) << "ckptdb " << args << " took " << took << " s";
    std::printf("ckptdb %s failed in %.1f s\n", args.substr(0, args.find(' ')).c_str(), took);
  }
  ASSERT_EQ(kill(weed_pid_, SIGCONT), 0);
  // gc and cp left nothing that a second run cannot finish.
  auto gc_again = Cli("gc " + url_ + " --abandoned-after 0");
  EXPECT_EQ(gc_again.code, 0) << gc_again.out;
  EXPECT_EQ(ObjectsUnder("data/00000000000000000003/"), 0u);
  auto cp = Cli("cp " + url_ + " " + dir_.Sub("copy"));
  EXPECT_EQ(cp.code, 0) << cp.out;
  auto ls = Cli("ls " + dir_.Sub("copy"));
  EXPECT_NE(ls.out.find("2"), std::string::npos) << ls.out;
}

}  // namespace
}  // namespace ckptdb
