// A save that dies after its SST files were ingested and before its
// metadata was committed: the step stays invisible, earlier steps load, and
// the next writer sweeps the leftover data.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <algorithm>
#include <filesystem>

#include "ckptdb/ckptdb.h"
#include "dedup_scenario.h"
#include "fault_injection_fs.h"
#include "store/rocksdb_store_internal.h"
#include "test_util.h"

namespace ckptdb {
namespace {

using testing::TempDir;

TEST(Crash, InterruptedAfterIngestionLeavesNoHalfStep) {
  TempDir dir;
  const std::string store = dir.Sub("store");
  StateDict sd;
  ASSERT_OK(sd.Add("w", testing::PatternTensor(DType::kF32, {128}, 1)));
  {
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok());
    ASSERT_OK(testing::SaveNoDist(sd, **w, 0));
  }
  const uint64_t committed_keys = testing::CountDataKeys(store);

  std::string cmd = std::string(CKPTDB_CRASH_HELPER) + " " + store + " 1";
  int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  ASSERT_EQ(WEXITSTATUS(rc), testing::FaultInjectionFS::kCrashExitCode) << "the helper did not crash where asked";

  // The ingested data of the dead save is in the database...
  EXPECT_GT(testing::CountDataKeys(store), committed_keys);
  // ...but step 1 is invisible and step 0 intact, to readers.
  auto r = OpenStoreReader(store);
  ASSERT_TRUE(r.ok()) << r.status();
  auto steps = (*r)->ListSteps();
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_EQ((*steps)[0].step, 0);
  EXPECT_EQ((*r)->ReadMetadata(1).status().code(), StatusCode::kNotFound);
  StateDict target;
  ASSERT_OK(target.Add("w", Tensor::Zeros(DType::kF32, {128}).value()));
  ASSERT_OK(testing::LoadNoDist(target, **r, 0));
  EXPECT_TRUE(std::get<Tensor>(*target.Find("w")).BitwiseEquals(std::get<Tensor>(*sd.Find("w"))));

  // The next writer sweeps the orphan; a second sweep finds nothing.
  StoreOptions no_sweep;
  no_sweep.sweep_on_open = false;
  auto w = OpenStoreWriter(store, no_sweep);
  ASSERT_TRUE(w.ok());
  auto swept = (*w)->Sweep();
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(swept->orphan_saves, 1u);
  swept = (*w)->Sweep();
  ASSERT_TRUE(swept.ok());
  EXPECT_EQ(swept->orphan_saves, 0u);
  // Step 1 can now be saved for real (the same bytes as step 0: it shares
  // step 0's chunks, and adds none).
  ASSERT_OK(testing::SaveNoDist(sd, **w, 1));
  w->reset();
  EXPECT_EQ(testing::CountDataKeys(store), committed_keys);
}

TEST(Crash, FailedMetadataCommitIsRolledBack) {
  TempDir dir;
  const std::string store = dir.Sub("store");
  auto fs = std::make_shared<testing::FaultInjectionFS>();
  auto env = testing::FaultInjectionFS::MakeEnv(fs);
  auto w = OpenStoreWriterWithEnv(store, StoreOptions{}, env.get());
  ASSERT_TRUE(w.ok());
  testing::FaultyWriter faulty(w->get());
  faulty.on_finish = [&] {
    fs->wal_append = testing::FaultInjectionFS::Action::kFail;
    return Status::OK();
  };
  StateDict sd;
  ASSERT_OK(sd.Add("w", testing::PatternTensor(DType::kF32, {128}, 1)));
  Status st = testing::SaveNoDist(sd, faulty, 0);
  EXPECT_NE(st.ToString().find("Failed to finish checkpoint"), std::string::npos) << st;
  EXPECT_NE(st.ToString().find("injected WAL append failure"), std::string::npos) << st;
  EXPECT_EQ(faulty.aborts, 1);
}

// A crash at any file write of commits that prune by keep-best: the steps
// left are exactly those before or after one commit, never another set, and
// each loads bit for bit with its metric.
TEST(Crash, KeepBestCommitsLeaveTheSetBeforeOrAfter) {
  int crashes = 0;
  for (int64_t n = 0;; ++n) {
    ASSERT_LT(n, 2000) << "the scenario never finished";
    TempDir dir;
    const std::string store = dir.Sub("store");
    testing::CommandResult run = testing::RunCommand(std::string(CKPTDB_CRASH_HELPER) + " --keep-best " + store +
                                                     " " + std::to_string(n) + " 2>&1");
    SCOPED_TRACE("crash at write " + std::to_string(n));
    std::vector<int64_t> listed;
    if (std::filesystem::exists(store + "/db/CURRENT")) {
      // The next writer recovers the store as a user's would.
      auto w = OpenStoreWriter(store);
      ASSERT_TRUE(w.ok()) << w.status();
      ASSERT_OK((*w)->OpenDatabase());
      w->reset();
      auto r = OpenStoreReader(store);
      ASSERT_TRUE(r.ok()) << r.status();
      auto steps = (*r)->ListSteps();
      ASSERT_TRUE(steps.ok()) << steps.status();
      for (const StepInfo& s : *steps) {
        listed.push_back(s.step);
        EXPECT_EQ(s.metrics.at("loss"), testing::kKeepBestLoss[s.step]);
        auto whole = LoadWhole(**r, s.step);
        ASSERT_TRUE(whole.ok()) << "step " << s.step << ": " << whole.status();
        EXPECT_TRUE(std::get<Tensor>(*whole->Find("adapter"))
                        .BitwiseEquals(std::get<Tensor>(*testing::DedupScenarioStep(s.step).Find("adapter"))));
      }
    }
    EXPECT_NE(std::find(testing::kKeepBestHistory.begin(), testing::kKeepBestHistory.end(), listed),
              testing::kKeepBestHistory.end())
        << "steps left: " << ::testing::PrintToString(listed);
    if (run.code == 0) {
      EXPECT_EQ(listed, testing::kKeepBestHistory.back());
      break;
    }
    ASSERT_EQ(run.code, testing::FaultInjectionFS::kCrashExitCode) << run.out;
    ++crashes;
  }
  EXPECT_GT(crashes, 20) << "too few crash points for the scenario";
  std::printf("keep-best crash test: %d crash points checked\n", crashes);
}

}  // namespace
}  // namespace ckptdb

namespace ckptdb {
namespace {

// After a crash at any point of a sequence of deduplicated saves, a delete,
// the rewrite of a file without its unused chunks, commits with retention, a
// prune and a sweep: every committed step loads
// bit for bit (no chunk it refers to is missing), and once every step is
// deleted no data key is left (nothing leaked).
TEST(Crash, DeduplicatedSavesAndDeletesSurviveACrashAtEveryWrite) {
  int crashes = 0;
  for (int64_t n = 0;; ++n) {
    ASSERT_LT(n, 2000) << "the scenario never finished";
    TempDir dir;
    const std::string store = dir.Sub("store");
    testing::CommandResult run = testing::RunCommand(std::string(CKPTDB_CRASH_HELPER) + " --dedup " + store + " " +
                                                     std::to_string(n) + " 2>&1");
    SCOPED_TRACE("crash at write " + std::to_string(n));
    if (run.code == 0) break;  // the whole scenario ran: every write was tried
    ASSERT_EQ(run.code, testing::FaultInjectionFS::kCrashExitCode) << run.out;
    ++crashes;
    if (!std::filesystem::exists(store + "/CKPTDB")) continue;  // before the store existed
    // A crash inside the very first open of the database (no CURRENT yet):
    // nothing was committed; the next writer must still open it.
    if (std::filesystem::exists(store + "/db/CURRENT")) {
      auto r = OpenStoreReader(store);
      if (!r.ok() && r.status().code() == StatusCode::kNotFound) continue;
      ASSERT_TRUE(r.ok()) << r.status();
      auto steps = (*r)->ListSteps();
      ASSERT_TRUE(steps.ok()) << steps.status();
      for (const StepInfo& s : *steps) {
        auto whole = LoadWhole(**r, s.step);
        ASSERT_TRUE(whole.ok()) << "step " << s.step << ": " << whole.status();
        StateDict want = testing::DedupScenarioStep(s.step);
        for (const char* fqn : {"frozen", "adapter"}) {
          EXPECT_TRUE(std::get<Tensor>(*whole->Find(fqn)).BitwiseEquals(std::get<Tensor>(*want.Find(fqn))))
              << "step " << s.step << " " << fqn;
        }
      }
    }
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_OK((*w)->OpenDatabase());
    // A rewrite cut short is done again: afterwards no file holds an unused
    // chunk, and every step still loads.
    ReclaimOptions any_unused;
    any_unused.min_unused_fraction = 0;
    auto redone = (*w)->ReclaimSpace(any_unused);
    ASSERT_TRUE(redone.ok()) << redone.status();
    any_unused.dry_run = true;
    auto left = (*w)->ReclaimSpace(any_unused);
    ASSERT_TRUE(left.ok()) << left.status();
    EXPECT_EQ(left->files_rewritten + left->files_left, 0u) << "unused chunks left after a rewrite";
    {
      auto r = OpenStoreReader(store);
      ASSERT_TRUE(r.ok()) << r.status();
      auto steps = (*r)->ListSteps();
      ASSERT_TRUE(steps.ok()) << steps.status();
      for (const StepInfo& s : *steps) {
        auto whole = LoadWhole(**r, s.step);
        ASSERT_TRUE(whole.ok()) << "step " << s.step << " after the rewrite: " << whole.status();
        StateDict want = testing::DedupScenarioStep(s.step);
        EXPECT_TRUE(std::get<Tensor>(*whole->Find("frozen")).BitwiseEquals(std::get<Tensor>(*want.Find("frozen"))));
      }
    }
    auto r = OpenStoreReader(store);
    ASSERT_TRUE(r.ok()) << r.status();
    auto listed = (*r)->ListSteps();
    ASSERT_TRUE(listed.ok());
    std::vector<int64_t> every;
    for (const StepInfo& s : *listed) every.push_back(s.step);
    if (!every.empty()) ASSERT_OK((*w)->DeleteSteps(every));
    auto swept = (*w)->Sweep();
    ASSERT_TRUE(swept.ok()) << swept.status();
    EXPECT_EQ(swept->unaccounted_saves, 0u);
    w->reset();
    EXPECT_EQ(testing::CountDataKeys(store), 0u) << "data left after deleting every step";
  }
  EXPECT_GT(crashes, 50) << "too few crash points for the scenario";
  std::printf("dedup crash test: %d crash points checked\n", crashes);
}

}  // namespace
}  // namespace ckptdb
