// A process that saved, then forked (Python's multiprocessing on Linux, a
// launcher or test runner that forks): the child saves and loads without
// hanging, and a writer it inherited is refused with a clear error.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "ckptdb/ckptdb.h"
#include "test_util.h"

namespace ckptdb {
namespace {

using testing::LoadNoDist;
using testing::PatternTensor;
using testing::SaveNoDist;
using testing::TempDir;
using testing::ZerosLike;

StateDict Sample(uint32_t seed) {
  StateDict sd;
  EXPECT_TRUE(sd.Add("w", PatternTensor(DType::kF32, {256, 64}, seed)).ok());
  EXPECT_TRUE(sd.Add("extra", Bytes{"loader state " + std::to_string(seed)}).ok());
  return sd;
}

// Saves Sample(seed) as `step` with a fresh writer, loads it back with a
// fresh reader and compares; the writer is closed before the load.
Status SaveAndCheck(const std::string& store, int64_t step, uint32_t seed) {
  {
    auto w = OpenStoreWriter(store);
    if (!w.ok()) return w.status();
    Status st = SaveNoDist(Sample(seed), **w, step);
    if (!st.ok()) return st;
  }
  auto r = OpenStoreReader(store);
  if (!r.ok()) return r.status();
  StateDict got;
  Status st = got.Add("w", ZerosLike(PatternTensor(DType::kF32, {256, 64}, seed)));
  if (st.ok()) st = got.Add("extra", Bytes{});
  if (st.ok()) st = LoadNoDist(got, **r, step);
  if (!st.ok()) return st;
  if (!testing::SameContents(Sample(seed), got)) return Status::Internal("step " + std::to_string(step) + " differs");
  return Status::OK();
}

// Runs `child` in a forked child and returns what it reported: its exit
// status 0 is success; a child still running after 60 s (a hang) is killed
// and reported as such. The child writes its error to stderr.
std::string RunInChild(const std::function<Status()>& child) {
  const pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    Status st = child();
    if (!st.ok()) fprintf(stderr, "child: %s\n", st.ToString().c_str());
    fflush(stderr);
    _exit(st.ok() ? 0 : 1);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int status = 0;
  while (true) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return "the child hung (killed after 60 s)";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "ok";
  return "the child failed (status " + std::to_string(status) + ")";
}

TEST(ForkTest, ChildSavesToAStoreOfItsOwnWhileTheParentsWriterIsOpen) {
  TempDir dir;
  auto parent = OpenStoreWriter(dir.Sub("parent.ckptdb"));
  ASSERT_TRUE(parent.ok()) << parent.status();
  ASSERT_OK(SaveNoDist(Sample(1), **parent, 0));
  // The parent's database (and RocksDB's background threads) exist at the
  // fork; the child's commit flushes its own database.
  EXPECT_EQ(RunInChild([&] {
              Status st = SaveAndCheck(dir.Sub("child.ckptdb"), 0, 2);
              if (st.ok()) st = SaveAndCheck(dir.Sub("child.ckptdb"), 1, 3);
              return st;
            }),
            "ok");
  // The parent's writer goes on working.
  ASSERT_OK(SaveNoDist(Sample(4), **parent, 1));
}

TEST(ForkTest, ChildSavesToTheParentsStoreOnceTheParentClosedIt) {
  TempDir dir;
  const std::string store = dir.Sub("s.ckptdb");
  ASSERT_OK(SaveAndCheck(store, 0, 1));
  EXPECT_EQ(RunInChild([&] { return SaveAndCheck(store, 1, 2); }), "ok");
  // What the child committed is there for the parent.
  ASSERT_OK(SaveAndCheck(store, 2, 3));
  auto r = OpenStoreReader(store);
  ASSERT_TRUE(r.ok()) << r.status();
  auto steps = (*r)->ListSteps();
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_EQ(steps->size(), 3u);
}

TEST(ForkTest, AWriterInheritedAcrossForkIsRefusedNamingTheParent) {
  TempDir dir;
  const std::string store = dir.Sub("s.ckptdb");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_OK(SaveNoDist(Sample(1), **w, 0));
  const std::string parent_pid = std::to_string(getpid());
  EXPECT_EQ(RunInChild([&]() -> Status {
              Status st = SaveNoDist(Sample(2), **w, 1);
              if (st.ok()) return Status::Internal("the inherited writer saved");
              if (st.code() != StatusCode::kFailedPrecondition ||
                  st.ToString().find("process " + parent_pid) == std::string::npos ||
                  st.ToString().find("fork") == std::string::npos) {
                return Status::Internal("unexpected error: " + st.ToString());
              }
              // Dropping the inherited writer neither hangs nor closes the
              // parent's database.
              w->reset();
              return Status::OK();
            }),
            "ok");
  // The parent's writer is untouched by the child.
  ASSERT_OK(SaveNoDist(Sample(3), **w, 1));
  w->reset();
  auto r = OpenStoreReader(store);
  ASSERT_TRUE(r.ok()) << r.status();
  auto steps = (*r)->ListSteps();
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 2u);
}

TEST(ForkTest, ChildOfAChildSaves) {
  TempDir dir;
  auto parent = OpenStoreWriter(dir.Sub("a.ckptdb"));
  ASSERT_TRUE(parent.ok()) << parent.status();
  ASSERT_OK(SaveNoDist(Sample(1), **parent, 0));
  EXPECT_EQ(RunInChild([&]() -> Status {
              Status st = SaveAndCheck(dir.Sub("b.ckptdb"), 0, 2);
              if (!st.ok()) return st;
              std::string grandchild = RunInChild([&] { return SaveAndCheck(dir.Sub("c.ckptdb"), 0, 3); });
              return grandchild == "ok" ? Status::OK() : Status::Internal("grandchild: " + grandchild);
            }),
            "ok");
}

}  // namespace
}  // namespace ckptdb
