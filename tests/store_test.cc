// The store around the protocol: readers beside a writer, deleting steps,
// sweeping.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <rocksdb/db.h>

#include <filesystem>
#include <random>
#include <set>

#include "ckptdb/ckptdb.h"
#include "format/keys.h"
#include "store/retention.h"
#include "test_util.h"

namespace ckptdb {
namespace {

using testing::Reader;
using testing::Steps;
using testing::TempDir;

StateDict Small(uint32_t seed) {
  StateDict sd;
  EXPECT_TRUE(sd.Add("w", testing::PatternTensor(DType::kF32, {256}, seed)).ok());
  return sd;
}

TEST(Store, ReadersWorkWhileAWriterHoldsTheStore) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok());
  ASSERT_OK(testing::SaveNoDist(Small(1), **w, 10));
  // The writer keeps the database open (and locked) while readers come and go.
  auto r = OpenStoreReader(store);
  ASSERT_TRUE(r.ok()) << r.status();
  auto steps = (*r)->ListSteps();
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 1u);
  ASSERT_OK(testing::SaveNoDist(Small(2), **w, 20));
  // A reader sees the steps as of its opening; Refresh catches up.
  EXPECT_EQ(*(*r)->LatestStep(), 10);
  ASSERT_OK((*r)->Refresh());
  EXPECT_EQ(*(*r)->LatestStep(), 20);
  // A second writer process would be refused; in one process the lock is ours.
  auto w2 = OpenStoreWriter(store);
  ASSERT_TRUE(w2.ok());
  Status st = (*w2)->OpenDatabase();
  EXPECT_FALSE(st.ok());
}

TEST(Store, LatestStepAndEmptyStore) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok());
  ASSERT_OK((*w)->OpenDatabase());
  auto r = OpenStoreReader(store);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->LatestStep().status().code(), StatusCode::kNotFound);
  // Steps sort numerically, beyond one byte.
  for (int64_t s : {255, 256, 3}) ASSERT_OK(testing::SaveNoDist(Small(1), **w, s));
  ASSERT_OK((*r)->Refresh());
  EXPECT_EQ(*(*r)->LatestStep(), 256);
  auto steps = (*r)->ListSteps();
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 3u);
  EXPECT_EQ((*steps)[0].step, 3);
  EXPECT_EQ((*steps)[2].step, 256);
  EXPECT_EQ((*steps)[0].logical_bytes, 1024u);
  EXPECT_EQ((*steps)[0].world_size, 1);
}

TEST(Store, DeleteStepRemovesItsDataAndOnlyIt) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok());
  ASSERT_OK(testing::SaveNoDist(Small(1), **w, 1));
  ASSERT_OK(testing::SaveNoDist(Small(2), **w, 2));
  ASSERT_OK((*w)->DeleteStep(1));
  EXPECT_EQ((*w)->DeleteStep(1).code(), StatusCode::kNotFound);
  w->reset();
  EXPECT_EQ(testing::CountDataKeys(store), 1u);
  auto r = OpenStoreReader(store);
  ASSERT_TRUE(r.ok());
  StateDict t;
  ASSERT_OK(t.Add("w", Tensor::Zeros(DType::kF32, {256}).value()));
  ASSERT_OK(testing::LoadNoDist(t, **r, 2));
  EXPECT_TRUE(std::get<Tensor>(*t.Find("w")).BitwiseEquals(std::get<Tensor>(*Small(2).Find("w"))));
  EXPECT_EQ(testing::LoadNoDist(t, **r, 1).code(), StatusCode::kNotFound);
}

// The bytes of every file under STORE/db, as `du` would count them.
uint64_t DbBytesOnDisk(const std::string& store) {
  uint64_t n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(store + "/db")) {
    if (e.is_regular_file()) n += e.file_size();
  }
  return n;
}

// 1 MiB of incompressible bytes.
StateDict Big(uint32_t seed) {
  std::vector<uint8_t> v(1 << 20);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  StateDict sd;
  EXPECT_TRUE(sd.Add("big", Tensor::Copy(DType::kU8, {1 << 20}, v.data(), v.size()).value()).ok());
  return sd;
}

TEST(History, LatestAtOrBeforeAndHasStep) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok());
  for (int64_t s : {10, 20, 30}) ASSERT_OK(testing::SaveNoDist(Small(1), **w, s));
  auto r = Reader(store);
  EXPECT_EQ(*r->LatestStepAtOrBefore(25), 20);
  EXPECT_EQ(*r->LatestStepAtOrBefore(20), 20);
  EXPECT_EQ(*r->LatestStepAtOrBefore(kMaxStep), 30);
  EXPECT_EQ(r->LatestStepAtOrBefore(9).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r->LatestStepAtOrBefore(-1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(*r->HasStep(20));
  EXPECT_FALSE(*r->HasStep(21));
}

TEST(History, TagsNameStepsMoveAndGoWithTheirStep) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok());
  for (int64_t s : {1, 2, 3}) ASSERT_OK(testing::SaveNoDist(Small(1), **w, s));
  auto first = (*w)->Tag(1, "best");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->has_value());
  auto moved = (*w)->Tag(2, "best");
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(**moved, 1);
  ASSERT_TRUE((*w)->Tag(2, "release-1").ok());
  EXPECT_EQ((*w)->Tag(9, "x").status().code(), StatusCode::kNotFound);
  for (const std::string& bad : std::vector<std::string>{"", "1abc", "latest", "a b", "a/b", std::string(129, 'a')}) {
    EXPECT_EQ((*w)->Tag(1, bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  auto r = Reader(store);
  EXPECT_EQ(*r->ResolveTag("best"), 2);
  EXPECT_EQ(r->ResolveTag("nope").status().code(), StatusCode::kNotFound);
  auto steps = r->ListSteps();
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ((*steps)[1].tags, (std::vector<std::string>{"best", "release-1"}));
  EXPECT_TRUE((*steps)[0].tags.empty());
  // Deleting a step deletes its tags in the same batch.
  ASSERT_OK((*w)->DeleteStep(2));
  ASSERT_OK(r->Refresh());
  EXPECT_TRUE(r->ListTags()->empty());
  EXPECT_EQ((*w)->DeleteTag("best").code(), StatusCode::kNotFound);
  ASSERT_TRUE((*w)->Tag(3, "keep").ok());
  ASSERT_OK((*w)->DeleteTag("keep"));
  ASSERT_OK(r->Refresh());
  EXPECT_TRUE(r->ListTags()->empty());
  EXPECT_EQ(Steps(*r), (std::vector<int64_t>{1, 3}));
}

TEST(History, DeleteStepsIsAllOrNothing) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok());
  for (int64_t s : {1, 2, 3}) ASSERT_OK(testing::SaveNoDist(Small(1), **w, s));
  Status st = (*w)->DeleteSteps({1, 7});
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("step 7 not found"), std::string::npos) << st;
  auto r = Reader(store);
  EXPECT_EQ(Steps(*r), (std::vector<int64_t>{1, 2, 3}));
  ASSERT_OK((*w)->DeleteSteps({3, 1, 1}));
  ASSERT_OK(r->Refresh());
  EXPECT_EQ(Steps(*r), (std::vector<int64_t>{2}));
}

TEST(Retention, StepsToPruneKeepsLastEveryTaggedAndNewest) {
  const std::vector<int64_t> steps = {0, 5, 10, 15, 20, 25, 30};
  RetentionPolicy p;
  EXPECT_TRUE(StepsToPrune(steps, {}, p).empty());  // disabled
  p.keep_last = 2;
  EXPECT_EQ(StepsToPrune(steps, {}, p), (std::vector<int64_t>{0, 5, 10, 15, 20}));
  p.keep_every = 10;
  EXPECT_EQ(StepsToPrune(steps, {}, p), (std::vector<int64_t>{5, 15}));
  EXPECT_EQ(StepsToPrune(steps, {15}, p), (std::vector<int64_t>{5}));
  p.keep_tagged = false;
  EXPECT_EQ(StepsToPrune(steps, {15}, p), (std::vector<int64_t>{5, 15}));
  // keep_every alone still keeps the newest step.
  RetentionPolicy every;
  every.keep_every = 20;
  EXPECT_EQ(StepsToPrune(steps, {}, every), (std::vector<int64_t>{5, 10, 15, 25}));
  p.keep_last = 100;
  EXPECT_TRUE(StepsToPrune(steps, {}, p).empty());
  EXPECT_TRUE(StepsToPrune({}, {}, p).empty());
  RetentionPolicy bad;
  bad.keep_last = -1;
  EXPECT_EQ(ValidateRetentionPolicy(bad).code(), StatusCode::kInvalidArgument);
}

TEST(Retention, ASaveAppliesThePolicyInItsCommit) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  StoreOptions opts;
  opts.retention.keep_last = 2;
  opts.retention.keep_every = 10;
  auto w = OpenStoreWriter(store, opts);
  ASSERT_TRUE(w.ok());
  for (int64_t s = 0; s <= 12; ++s) {
    ASSERT_OK(testing::SaveNoDist(Small(static_cast<uint32_t>(s)), **w, s));
    if (s == 3) {
      ASSERT_TRUE((*w)->Tag(3, "best").ok());
    }
  }
  // Before step 12: 0 and 10 (multiples of 10), 3 (tagged), 11 (last two);
  // with 12 they are all kept, so its commit dropped nothing.
  EXPECT_TRUE((*w)->PrunedByLastCommit().empty());
  ASSERT_OK(testing::SaveNoDist(Small(13), **w, 13));
  EXPECT_EQ((*w)->PrunedByLastCommit(), (std::vector<int64_t>{11}));
  w->reset();
  auto r = Reader(store);
  EXPECT_EQ(Steps(*r), (std::vector<int64_t>{0, 3, 10, 12, 13}));
  // Every data key left belongs to a kept step.
  EXPECT_EQ(testing::CountDataKeys(store), 5u);
  StateDict t;
  ASSERT_OK(t.Add("w", Tensor::Zeros(DType::kF32, {256}).value()));
  ASSERT_OK(testing::LoadNoDist(t, *r, 3));
  EXPECT_TRUE(std::get<Tensor>(*t.Find("w")).BitwiseEquals(std::get<Tensor>(*Small(3).Find("w"))));
}

TEST(Retention, AStepSavedBelowTheKeptOnesIsNotDroppedByItsOwnCommit) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  StoreOptions opts;
  opts.retention.keep_last = 2;
  auto w = OpenStoreWriter(store, opts);
  ASSERT_TRUE(w.ok());
  for (int64_t s : {10, 11, 12}) ASSERT_OK(testing::SaveNoDist(Small(1), **w, s));
  // Step 5 is older than the two newest, but the save that commits it must
  // not delete it in the same breath.
  ASSERT_OK(testing::SaveNoDist(Small(5), **w, 5));
  EXPECT_TRUE((*w)->PrunedByLastCommit().empty());
  w->reset();
  auto r = Reader(store);
  EXPECT_EQ(Steps(*r), (std::vector<int64_t>{5, 11, 12}));
}

TEST(Retention, PruneDryRunChangesNothing) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok());
  for (int64_t s = 1; s <= 5; ++s) ASSERT_OK(testing::SaveNoDist(Small(1), **w, s));
  RetentionPolicy p;
  p.keep_last = 2;
  auto dry = (*w)->Prune(p, /*dry_run=*/true);
  ASSERT_TRUE(dry.ok());
  EXPECT_EQ(*dry, (std::vector<int64_t>{1, 2, 3}));
  auto r = Reader(store);
  EXPECT_EQ(Steps(*r).size(), 5u);
  auto wet = (*w)->Prune(p, /*dry_run=*/false);
  ASSERT_TRUE(wet.ok());
  EXPECT_EQ(*wet, *dry);
  ASSERT_OK(r->Refresh());
  EXPECT_EQ(Steps(*r), (std::vector<int64_t>{4, 5}));
}

TEST(History, DeletedSpaceIsGivenBackOnDisk) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok());
  for (int64_t s = 0; s < 4; ++s) ASSERT_OK(testing::SaveNoDist(Big(static_cast<uint32_t>(s)), **w, s));
  // A background compaction of the (small) metadata files may hold dropped
  // files a moment longer; they go when it ends.
  auto shrunk_by = [&](uint64_t before, uint64_t freed) {
    uint64_t after = DbBytesOnDisk(store);
    for (int i = 0; i < 100 && after + freed >= before; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      after = DbBytesOnDisk(store);
    }
    return after;
  };
  const uint64_t before = DbBytesOnDisk(store);
  ASSERT_OK((*w)->DeleteSteps({1, 2}));
  const uint64_t after = shrunk_by(before, (2u << 20) - (64u << 10));
  EXPECT_LT(after + (2u << 20) - (64u << 10), before) << "before " << before << ", after " << after;
  // Steps saved after a delete (its range tombstones are in the memtable and
  // then in a flushed file) are still dropped as whole files.
  ASSERT_OK(testing::SaveNoDist(Big(4), **w, 4));
  ASSERT_OK(testing::SaveNoDist(Big(5), **w, 5));
  const uint64_t before2 = DbBytesOnDisk(store);
  RetentionPolicy p;
  p.keep_last = 1;
  auto pruned = (*w)->Prune(p, false);
  ASSERT_TRUE(pruned.ok());
  EXPECT_EQ(*pruned, (std::vector<int64_t>{0, 3, 4}));
  const uint64_t after2 = shrunk_by(before2, (3u << 20) - (64u << 10));
  EXPECT_LT(after2 + (3u << 20) - (64u << 10), before2) << "before " << before2 << ", after " << after2;
  auto r = Reader(store);
  EXPECT_EQ(Steps(*r), (std::vector<int64_t>{5}));
  auto stats = r->GetStoreStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_LT(stats->sst_bytes, 2u << 20);
}

TEST(History, ListStepsFallsBackToMetadataWithoutSummaries) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  {
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok());
    for (int64_t s : {1, 2}) ASSERT_OK(testing::SaveNoDist(Small(1), **w, s));
  }
  auto r = Reader(store);
  auto with = r->ListSteps();
  ASSERT_TRUE(with.ok());
  r.reset();
  {
    // A store written before summaries existed: no S keys.
    rocksdb::DB* db = nullptr;
    rocksdb::Options o;
    ASSERT_TRUE(rocksdb::DB::Open(o, store + "/db", &db).ok());
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), SummaryKey(1)).ok());
    delete db;
  }
  r = Reader(store);
  auto without = r->ListSteps();
  ASSERT_TRUE(without.ok()) << without.status();
  ASSERT_EQ(without->size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ((*without)[i].step, (*with)[i].step);
    EXPECT_EQ((*without)[i].created_unix_ms, (*with)[i].created_unix_ms);
    EXPECT_EQ((*without)[i].entries, (*with)[i].entries);
    EXPECT_EQ((*without)[i].logical_bytes, (*with)[i].logical_bytes);
    EXPECT_EQ((*without)[i].stored_bytes, (*with)[i].stored_bytes);
  }
}

TEST(History, LazyReaderListsTheSameSteps) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok());
  for (int64_t s = 0; s < 30; ++s) ASSERT_OK(testing::SaveNoDist(Small(1), **w, s));
  ReaderOptions lazy;
  lazy.open_all_files = false;
  lazy.max_open_files = 20;
  auto r = OpenStoreReader(store, lazy);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Steps(**r).size(), 30u);
  StateDict t;
  ASSERT_OK(t.Add("w", Tensor::Zeros(DType::kF32, {256}).value()));
  for (int64_t s = 0; s < 30; ++s) ASSERT_OK(testing::LoadNoDist(t, **r, s));
}

}  // namespace
}  // namespace ckptdb
