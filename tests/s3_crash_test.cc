// A save into a bucket whose one process is killed (SIGKILL) at each of its
// requests to the server in turn, once before the request reaches the
// server and once after the server acted on it but before the answer came
// back: the step is then either not visible at all or visible and whole
// (never a half), the steps committed before stay loadable, and `gc` (once
// the save counts as abandoned) leaves exactly the objects of committed
// steps. The process is ckptdb_rank_helper (a real save, world size 1); a
// fault proxy between it and the real SeaweedFS holds the chosen request.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bucket/bucket_index.h"
#include "bucket/bucket_store.h"
#include "ckptdb/ckptdb.h"
#include "s3/s3_client.h"
#include "s3_fault_proxy.h"
#include "s3_test_server.h"
#include "test_util.h"

extern char** environ;

namespace ckptdb {
namespace {

using Action = ::ckptdb::testing::S3FaultProxy::Action;

const ::ckptdb::testing::S3TestServer& Server() { return ::ckptdb::testing::TestS3Server(); }

// Starts ckptdb_rank_helper saving `step` into `url` through `endpoint`.
pid_t StartSave(const std::string& url, int64_t step, const std::string& endpoint, const std::string& dir) {
  static int job = 0;
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string v = *e;
    if (v.rfind("AWS_", 0) != 0 && v.rfind("CKPTDB_", 0) != 0) env.push_back(v);  // (set below)
  }
  const std::string id = "crash-" + std::to_string(getpid()) + "-" + std::to_string(job++);
  ::unlink((dir + "/last").c_str());
  (void)!::symlink((dir + "/out-" + id).c_str(), (dir + "/last").c_str());
  env.push_back("CKPTDB_RANK=0");
  env.push_back("CKPTDB_WORLD_SIZE=1");
  env.push_back("CKPTDB_RENDEZVOUS=file://" + dir + "/rdv-" + id);
  env.push_back("CKPTDB_JOB_ID=" + id);
  env.push_back("CKPTDB_BIND_ADDRESS=127.0.0.1");
  env.push_back("AWS_ENDPOINT_URL=" + endpoint);
  env.push_back("AWS_ACCESS_KEY_ID=" + Server().settings.credentials.access_key_id);
  env.push_back("AWS_SECRET_ACCESS_KEY=" + Server().settings.credentials.secret_access_key);
  env.push_back("AWS_REGION=us-east-1");
  env.push_back("AWS_CONFIG_FILE=/nonexistent");
  env.push_back("AWS_SHARED_CREDENTIALS_FILE=/nonexistent");
  const std::vector<std::string> args = {CKPTDB_RANK_HELPER, "save", url, std::to_string(step), dir + "/out-" + id,
                                         "--tag", std::to_string(step)};
  return ::ckptdb::testing::SpawnProcess(args, env);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Waits for `pid`; its exit status (-1 when killed).
int Wait(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class S3CrashTest : public ::ckptdb::testing::S3ServerTest {
 protected:
  void SetUp() override {
    S3ServerTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ::ckptdb::testing::SetAwsVariablesForTestServer();
  }

  // The saves (step, save id) whose objects are under `prefix`.
  std::set<SaveRef> SavesWithObjects(const std::string& prefix) {
    std::set<SaveRef> out;
    for (const char* dir : {"data/", "steps/"}) {
      auto objects = client_->ListAll(Server().bucket, prefix + dir);
      EXPECT_TRUE(objects.ok()) << objects.status();
      if (!objects.ok()) continue;
      for (const s3::ObjectInfo& o : *objects) {
        const std::string rest = o.key.substr(prefix.size() + std::string(dir).size());
        out.insert(SaveRef{std::stoll(rest.substr(0, 20)), std::stoull(rest.substr(21, 16), nullptr, 16)});
      }
    }
    return out;
  }

  ::ckptdb::testing::TempDir dir_;
};

TEST_F(S3CrashTest, ASaveKilledAtAnyRequestLeavesNothingOrAllAndGcLeavesOnlyCommittedSteps) {
  int points = 0, committed_at = 0;
  for (const Action hold : {Action::kHoldBeforeSending, Action::kHoldAfterForwarding}) {
    for (int n = 1;; ++n) {
      const std::string prefix = ::ckptdb::testing::UniqueTestPrefix() + "-" + std::to_string(points) + "/";
      const std::string url = "s3://" + Server().bucket + "/" + prefix;
      // Step 1 committed in full, straight to the server.
      ASSERT_EQ(Wait(StartSave(url, 1, Server().settings.endpoint, dir_.path())), 0) << "the first save";
      ::ckptdb::testing::S3FaultProxy proxy(Server().port);
      std::vector<Action> script(n - 1, Action::kPass);
      script.push_back(hold);
      proxy.Script(script);
      const pid_t pid = StartSave(url, 2, proxy.endpoint(), dir_.path());
      bool finished = false;
      for (int i = 0; i < 3000 && proxy.held() == 0; ++i) {
        int status = 0;
        if (waitpid(pid, &status, WNOHANG) == pid) {
          finished = true;
          EXPECT_GT(n, 1) << "exit status " << status;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (finished) {  // the save made fewer than n requests: every point is done
        EXPECT_GT(n, 1) << "the save failed at once; its report: "
                        << ReadAll(dir_.path() + "/last/rank-0.txt");
        break;
      }
      ASSERT_EQ(proxy.held(), 1) << "request " << n << " was never held";
      kill(pid, SIGKILL);
      Wait(pid);
      ++points;
      SCOPED_TRACE("killed at request " + std::to_string(n) +
                   (hold == Action::kHoldBeforeSending ? " before it reached the server" : " after the server acted"));
      auto reader = OpenStoreReader(url);
      ASSERT_TRUE(reader.ok()) << reader.status();
      auto steps = (*reader)->ListSteps();
      ASSERT_TRUE(steps.ok()) << steps.status();
      ASSERT_TRUE(steps->size() == 1 || steps->size() == 2) << steps->size();
      if (steps->size() == 2) ++committed_at;
      for (const StepInfo& s : *steps) {
        auto whole = LoadWhole(**reader, s.step);
        EXPECT_TRUE(whole.ok()) << "step " << s.step << ": " << whole.status();
      }
      // gc, with the killed save taken as abandoned: only committed steps'
      // objects stay, and every step still loads.
      StoreOptions o;
      o.abandoned_save_seconds = 0;
      auto writer = OpenStoreWriter(url, o);
      ASSERT_TRUE(writer.ok()) << writer.status();
      auto swept = (*writer)->Sweep();
      ASSERT_TRUE(swept.ok()) << swept.status();
      auto index = bucket::ReadIndex(client_.get(), Server().bucket, prefix);
      ASSERT_TRUE(index.ok()) << index.status();
      std::set<SaveRef> used;
      for (const auto& [step, s] : index->index.steps) used.insert(s.uses.begin(), s.uses.end());
      EXPECT_EQ(SavesWithObjects(prefix), used);
      auto pending = client_->ListAll(Server().bucket, prefix + "pending/");
      ASSERT_TRUE(pending.ok()) << pending.status();
      EXPECT_TRUE(pending->empty());
      ASSERT_TRUE((*reader)->Refresh().ok());
      auto after = (*reader)->ListSteps();
      ASSERT_TRUE(after.ok()) << after.status();
      EXPECT_EQ(after->size(), steps->size());
      for (const StepInfo& s : *after) {
        auto whole = LoadWhole(**reader, s.step);
        EXPECT_TRUE(whole.ok()) << "after gc, step " << s.step << ": " << whole.status();
      }
      ASSERT_LT(n, 40) << "the save never ends";
    }
  }
  std::printf("killed the saving process at %d points; step 2 was committed at %d of them\n", points, committed_at);
  EXPECT_GE(points, 10);
  EXPECT_GE(committed_at, 1);  // killed after the commit's write landed
}

}  // namespace
}  // namespace ckptdb
