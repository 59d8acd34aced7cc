// Damage stays local (issue 11.4): one step's truncated, deleted or damaged
// SST file affects that step only; a damaged tag or summary record affects
// that record only. Every other step stays listable, verifiable and
// loadable, and the commands that drop what is damaged (rm, gc, tag
// --delete) work on the damaged store.
#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <filesystem>
#include <fstream>

#include "ckptdb/ckptdb.h"
#include "format/keys.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace ckptdb {
namespace {

using testing::TempDir;

StateDict StepState(int64_t step) {
  StateDict sd;
  EXPECT_TRUE(sd.Add("w", testing::PatternTensor(DType::kF32, {256, 1024}, static_cast<uint32_t>(step))).ok());
  EXPECT_TRUE(sd.Add("b", testing::PatternTensor(DType::kI32, {7}, static_cast<uint32_t>(step))).ok());
  return sd;
}

std::string Cli(const std::string& args) { return std::string(CKPTDB_CLI) + " " + args + " 2>&1"; }

class DamageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto w = OpenStoreWriter(store_);
    ASSERT_TRUE(w.ok()) << w.status();
    for (int64_t s = 0; s < 4; ++s) ASSERT_OK(testing::SaveNoDist(StepState(s), **w, s));
    ASSERT_TRUE((*w)->Tag(1, "best").ok());
  }

  // The SST file holding the data of `step` (one rank, one file).
  std::string SstOfStep(int64_t step) {
    auto r = OpenStoreReader(store_);
    EXPECT_TRUE(r.ok()) << r.status();
    auto md = (*r)->ReadMetadata(step);
    EXPECT_TRUE(md.ok()) << md.status();
    const std::string key = EncodeDataKey(DataKey{step, md->save_id, 0, 0, 0});
    for (const std::string& f : testing::FilesWithSuffix(store_ + "/db", ".sst")) {
      std::ifstream in(f, std::ios::binary);
      std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (data.find(key) != std::string::npos) return f;
    }
    ADD_FAILURE() << "no SST holds step " << step;
    return "";
  }

  std::vector<int64_t> Listed() {
    auto r = OpenStoreReader(store_);
    if (!r.ok()) {
      ADD_FAILURE() << r.status();
      return {};
    }
    auto steps = (*r)->ListSteps();
    if (!steps.ok()) {
      ADD_FAILURE() << steps.status();
      return {};
    }
    std::vector<int64_t> out;
    for (const StepInfo& i : *steps) out.push_back(i.step);
    return out;
  }

  void ExpectLoads(int64_t step) {
    auto r = OpenStoreReader(store_);
    ASSERT_TRUE(r.ok()) << r.status();
    auto got = LoadWhole(**r, step);
    ASSERT_TRUE(got.ok()) << "step " << step << ": " << got.status();
    StateDict want = StepState(step);
    EXPECT_TRUE(std::get<Tensor>(*got->Find("w")).BitwiseEquals(std::get<Tensor>(*want.Find("w")))) << step;
  }

  // With step 2's file damaged: the others are fine, step 2 is named
  // damaged, and it can be dropped; then the store is whole again.
  void ExpectOnlyStepTwoDamaged(const std::string& file) {
    EXPECT_EQ(Listed(), (std::vector<int64_t>{0, 1, 2, 3}));
    for (int64_t s : {0, 1, 3}) ExpectLoads(s);
    {
      auto r = OpenStoreReader(store_);
      ASSERT_TRUE(r.ok()) << r.status();
      auto got = LoadWhole(**r, 2);
      EXPECT_FALSE(got.ok());
    }
    testing::CommandResult v = testing::RunCommand(Cli("verify " + store_));
    EXPECT_EQ(v.code, 1) << v.out;
    EXPECT_NE(v.out.find("step 2: DAMAGED"), std::string::npos) << v.out;
    EXPECT_NE(v.out.find(fs::path(file).stem().string()), std::string::npos) << v.out;  // (.sst or .ldb)
    EXPECT_NE(v.out.find("step 3: ok"), std::string::npos) << v.out;
    EXPECT_NE(v.out.find("1 of 4 steps damaged"), std::string::npos) << v.out;
    testing::CommandResult ls = testing::RunCommand(Cli("ls " + store_));
    EXPECT_EQ(ls.code, 0) << ls.out;
    // The writer opens (and sweeps) and saves on.
    {
      auto w = OpenStoreWriter(store_);
      ASSERT_TRUE(w.ok()) << w.status();
      ASSERT_OK(testing::SaveNoDist(StepState(4), **w, 4));
    }
    testing::CommandResult gc = testing::RunCommand(Cli("gc " + store_));
    EXPECT_EQ(gc.code, 0) << gc.out;
    testing::CommandResult rm = testing::RunCommand(Cli("rm " + store_ + " 2"));
    EXPECT_EQ(rm.code, 0) << rm.out;
    v = testing::RunCommand(Cli("verify " + store_));
    EXPECT_EQ(v.code, 0) << v.out;
    EXPECT_EQ(Listed(), (std::vector<int64_t>{0, 1, 3, 4}));
  }

  TempDir dir_;
  std::string store_ = dir_.Sub("s");
};

TEST_F(DamageTest, ATruncatedSstAffectsItsStepOnly) {
  const std::string f = SstOfStep(2);
  fs::resize_file(f, fs::file_size(f) / 2);
  ExpectOnlyStepTwoDamaged(f);
}

TEST_F(DamageTest, ADeletedSstAffectsItsStepOnly) {
  const std::string f = SstOfStep(2);
  fs::remove(f);
  ExpectOnlyStepTwoDamaged(f);
}

TEST_F(DamageTest, ADamagedFooterAffectsItsStepOnly) {
  const std::string f = SstOfStep(2);
  {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(fs::file_size(f) - 8));
    const char junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};  // over the magic number
    io.write(junk, sizeof junk);
  }
  ExpectOnlyStepTwoDamaged(f);
}

// Writes `value` under `key` directly, as damage would leave it.
void PutRaw(const std::string& store, const std::string& key, const std::string& value) {
  rocksdb::DB* raw = nullptr;
  rocksdb::Options o;
  ASSERT_TRUE(rocksdb::DB::Open(o, store + "/db", &raw).ok());
  rocksdb::WriteOptions wo;
  wo.sync = true;
  ASSERT_TRUE(raw->Put(wo, key, value).ok());
  ASSERT_TRUE(raw->Flush(rocksdb::FlushOptions()).ok());
  delete raw;
}

TEST_F(DamageTest, ADamagedTagAffectsThatTagOnly) {
  PutRaw(store_, TagKey("best"), "not a tag value");
  EXPECT_EQ(Listed(), (std::vector<int64_t>{0, 1, 2, 3}));
  testing::CommandResult ls = testing::RunCommand(Cli("ls " + store_));
  EXPECT_EQ(ls.code, 0) << ls.out;
  testing::CommandResult v = testing::RunCommand(Cli("verify " + store_));
  EXPECT_EQ(v.code, 1) << v.out;  // the tag is damage, and named
  EXPECT_NE(v.out.find("tag 'best'"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("step 3: ok"), std::string::npos) << v.out;
  testing::CommandResult gc = testing::RunCommand(Cli("gc " + store_ + " --keep-last 3"));
  EXPECT_EQ(gc.code, 0) << gc.out;
  testing::CommandResult rm = testing::RunCommand(Cli("rm " + store_ + " 1"));
  EXPECT_EQ(rm.code, 0) << rm.out;
  testing::CommandResult del = testing::RunCommand(Cli("tag " + store_ + " --delete best"));
  EXPECT_EQ(del.code, 0) << del.out;
  v = testing::RunCommand(Cli("verify " + store_));
  EXPECT_EQ(v.code, 0) << v.out;
  EXPECT_EQ(Listed(), (std::vector<int64_t>{2, 3}));
}

TEST_F(DamageTest, ADamagedSummaryFallsBackToTheMetadata) {
  PutRaw(store_, SummaryKey(3), "not a summary");
  auto r = OpenStoreReader(store_);
  ASSERT_TRUE(r.ok()) << r.status();
  auto steps = (*r)->ListSteps();
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 4u);
  EXPECT_EQ((*steps)[3].entries, 2u);
  testing::CommandResult v = testing::RunCommand(Cli("verify " + store_));
  EXPECT_EQ(v.code, 1) << v.out;
  EXPECT_NE(v.out.find("summary of step 3"), std::string::npos) << v.out;
  testing::CommandResult rm = testing::RunCommand(Cli("rm " + store_ + " 3"));
  EXPECT_EQ(rm.code, 0) << rm.out;
  v = testing::RunCommand(Cli("verify " + store_));
  EXPECT_EQ(v.code, 0) << v.out;
}

// A failed save writes (and removes) a pending record; that must leave the
// log empty too, or a damaged SST would then stop the store from opening.
TEST_F(DamageTest, AfterAFailedSaveADamagedSstStillAffectsItsStepOnly) {
  {
    auto w = OpenStoreWriter(store_);
    ASSERT_TRUE(w.ok()) << w.status();
    testing::FaultyWriter faulty(w->get());
    faulty.on_finish = [] { return Status::IOError("injected"); };
    ASSERT_FALSE(testing::SaveNoDist(StepState(9), faulty, 9).ok());
  }
  const std::string f = SstOfStep(2);
  fs::resize_file(f, fs::file_size(f) / 2);
  ExpectOnlyStepTwoDamaged(f);
}

}  // namespace
}  // namespace ckptdb
