// The store around the protocol: readers beside a writer, deleting steps,
// sweeping.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <filesystem>
#include <fstream>
#include <cstring>
#include <algorithm>
#include <random>
#include <set>

#include "ckptdb/ckptdb.h"
#include "format/keys.h"
#include "format/metadata_codec.h"
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

// ---- Pieces records (store format 6) ----

// Three entries: a tensor, a sharded tensor of four local shards, a bytes
// entry.
StateDict ThreeEntries(uint32_t seed) {
  StateDict sd;
  EXPECT_TRUE(sd.Add("a", testing::PatternTensor(DType::kF32, {16}, seed)).ok());
  std::vector<Shard> shards;
  for (int64_t i = 0; i < 4; ++i) shards.push_back(Shard{{2 * i, 0}, testing::PatternTensor(DType::kF32, {2, 3}, seed + 1 + i)});
  EXPECT_TRUE(sd.Add("b", ShardedTensor::Create(DType::kF32, {8, 3}, std::move(shards)).value()).ok());
  EXPECT_TRUE(sd.AddBytes("c", "bytes of c " + std::to_string(seed), BytesEncoding::kRaw).ok());
  return sd;
}

// A target like ThreeEntries (b whole), zero-filled.
StateDict ThreeTargets(const std::vector<std::string>& only = {}) {
  StateDict t;
  auto want = [&](const char* f) { return only.empty() || std::find(only.begin(), only.end(), f) != only.end(); };
  if (want("a")) {
    EXPECT_TRUE(t.Add("a", Tensor::Zeros(DType::kF32, {16}).value()).ok());
  }
  if (want("b")) {
    EXPECT_TRUE(t.Add("b", Tensor::Zeros(DType::kF32, {8, 3}).value()).ok());
  }
  if (want("c")) {
    EXPECT_TRUE(t.Add("c", Bytes{}).ok());
  }
  return t;
}

// Whether `got`'s entries hold ThreeEntries(seed)'s values.
void ExpectThree(uint32_t seed, const StateDict& got) {
  const StateDict want = ThreeEntries(seed);
  if (const Entry* a = got.Find("a")) {
    EXPECT_TRUE(std::get<Tensor>(*a).BitwiseEquals(std::get<Tensor>(*want.Find("a"))));
  }
  if (const Entry* b = got.Find("b")) {
    const Tensor& t = std::get<Tensor>(*b);
    const ShardedTensor& w = std::get<ShardedTensor>(*want.Find("b"));
    for (const Shard& sh : w.local_shards()) {
      EXPECT_EQ(std::memcmp(static_cast<const char*>(t.data()) + sh.offsets[0] * 3 * 4, sh.tensor.data(), 24), 0);
    }
  }
  if (const Entry* c = got.Find("c")) {
    EXPECT_EQ(std::get<Bytes>(*c).data, "bytes of c " + std::to_string(seed));
  }
}

using testing::WithRawDb;

std::vector<std::string> PiecesKeysOf(const std::string& store, int64_t step) {
  std::vector<std::string> out;
  for (const std::string& k : testing::KeysWithPrefix(store, kPiecesPrefix)) {
    int64_t s;
    uint32_t e;
    EXPECT_TRUE(ParsePiecesKey(k, &s, &e)) << k;
    if (s == step) out.push_back(k);
  }
  return out;
}

// A step's M record holds its entries without their pieces; each entry's
// pieces are a record of its own, written with the step and deleted with it
// (DeleteStep, retention pruning), never left behind.
TEST(PiecesRecords, AreWrittenWithTheStepAndDeletedWithIt) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  StoreOptions opts;
  opts.retention.keep_last = 2;
  {
    auto w = OpenStoreWriter(store, opts);
    ASSERT_TRUE(w.ok());
    for (int64_t s : {1, 2}) ASSERT_OK(testing::SaveNoDist(ThreeEntries(static_cast<uint32_t>(s)), **w, s));
  }
  EXPECT_EQ(testing::KeysWithPrefix(store, kPiecesPrefix),
            (std::vector<std::string>{PiecesKey(1, 0), PiecesKey(1, 1), PiecesKey(1, 2), PiecesKey(2, 0),
                                      PiecesKey(2, 1), PiecesKey(2, 2)}));
  WithRawDb(store, [&](rocksdb::DB* db) {
    std::string v;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), MetadataKey(2), &v).ok());
    auto rec = DecodeMetadataRecord(v);
    ASSERT_TRUE(rec.ok()) << rec.status();
    EXPECT_TRUE(rec->pieces_apart);
    ASSERT_EQ(rec->metadata.entries.size(), 3u);
    for (const EntryMetadata& e : rec->metadata.entries) {
      EXPECT_TRUE(e.pieces.empty()) << e.fqn;
      EXPECT_TRUE(e.pieces_omitted) << e.fqn;
    }
    EXPECT_EQ(rec->metadata.entries[1].shape, (Shape{8, 3}));
    // The M record alone is not a whole step's metadata.
    EXPECT_EQ(DecodeMetadataValue(v).status().code(), StatusCode::kDataLoss);
  });
  {
    auto r = Reader(store);
    auto md = r->ReadMetadata(2);
    ASSERT_TRUE(md.ok()) << md.status();
    EXPECT_EQ(md->Find("b")->pieces.size(), 4u);
    EXPECT_FALSE(md->Find("b")->pieces_omitted);
    ASSERT_OK(ValidateStepMetadata(*md));
    StateDict t = ThreeTargets();
    ASSERT_OK(testing::LoadNoDist(t, *r, 2));
    ExpectThree(2, t);
  }
  auto w = OpenStoreWriter(store, opts);
  ASSERT_TRUE(w.ok());
  ASSERT_OK((*w)->DeleteStep(1));
  EXPECT_TRUE(PiecesKeysOf(store, 1).empty());
  EXPECT_EQ(PiecesKeysOf(store, 2).size(), 3u);
  // Retention drops steps 2 and 3 in the commits of 4 and 5.
  for (int64_t s : {3, 4, 5}) ASSERT_OK(testing::SaveNoDist(ThreeEntries(static_cast<uint32_t>(s)), **w, s));
  EXPECT_EQ((*w)->PrunedByLastCommit(), (std::vector<int64_t>{3}));
  // gc (sweep, reclaiming space) leaves the kept steps' records alone.
  ASSERT_TRUE((*w)->Sweep().ok());
  ASSERT_TRUE((*w)->ReclaimSpace(ReclaimOptions{}).ok());
  // A step number saved again after its delete gets fresh records.
  ASSERT_OK((*w)->DeleteStep(4));
  ASSERT_OK(testing::SaveNoDist(ThreeEntries(44), **w, 4));
  w->reset();
  EXPECT_EQ(testing::KeysWithPrefix(store, kPiecesPrefix),
            (std::vector<std::string>{PiecesKey(4, 0), PiecesKey(4, 1), PiecesKey(4, 2), PiecesKey(5, 0),
                                      PiecesKey(5, 1), PiecesKey(5, 2)}));
  auto r = Reader(store);
  EXPECT_EQ(Steps(*r), (std::vector<int64_t>{4, 5}));
  for (int64_t s : {4, 5}) {
    StateDict t = ThreeTargets();
    ASSERT_OK(testing::LoadNoDist(t, *r, s));
    ExpectThree(s == 4 ? 44 : 5, t);
  }
  auto damage = r->FindDamagedRecords();
  ASSERT_TRUE(damage.ok());
  EXPECT_TRUE(damage->empty());
  testing::CommandResult v = testing::RunCommand(std::string(CKPTDB_CLI) + " verify " + store + " 2>&1");
  EXPECT_EQ(v.code, 0) << v.out;
  // A pieces record without its step (never written so) is named.
  r.reset();
  WithRawDb(store, [&](rocksdb::DB* db) {
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), PiecesKey(99, 0), "stray").ok());
  });
  r = Reader(store);
  damage = r->FindDamagedRecords();
  ASSERT_TRUE(damage.ok());
  ASSERT_EQ(damage->size(), 1u);
  EXPECT_EQ((*damage)[0].record, "pieces records of step 99");
}

// A load of some entries reads only their pieces records: with entry b's
// record gone and c's damaged, a load of a still works, a load of b or c
// fails DataLoss naming it, on every rank alike; the whole metadata, `ckptdb
// verify` and FindDamagedRecords name the damage.
TEST(PiecesRecords, ALoadReadsOnlyTheRecordsOfItsEntries) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  {
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok());
    ASSERT_OK(testing::SaveNoDist(ThreeEntries(7), **w, 3));
  }
  WithRawDb(store, [&](rocksdb::DB* db) {
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), PiecesKey(3, 1)).ok());
    std::string v;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), PiecesKey(3, 2), &v).ok());
    v[v.size() - 2] ^= 0x01;
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), PiecesKey(3, 2), v).ok());
  });
  auto r = Reader(store);
  {
    auto md = r->ReadMetadataOf(3, {"a", "not-there"});
    ASSERT_TRUE(md.ok()) << md.status();
    ASSERT_EQ(md->entries.size(), 3u);
    EXPECT_FALSE(md->Find("a")->pieces_omitted);
    EXPECT_EQ(md->Find("a")->pieces.size(), 1u);
    for (const char* f : {"b", "c"}) {
      EXPECT_TRUE(md->Find(f)->pieces_omitted) << f;
      EXPECT_TRUE(md->Find(f)->pieces.empty()) << f;
    }
    EXPECT_EQ(md->Find("b")->shape, (Shape{8, 3}));
    EXPECT_EQ(ValidateStepMetadata(*md).code(), StatusCode::kInvalidArgument);
  }
  StateDict a = ThreeTargets({"a"});
  ASSERT_OK(testing::LoadNoDist(a, *r, 3));
  ExpectThree(7, a);
  // LoadOptions::keys picks a out of a target that names every entry.
  StateDict all = ThreeTargets();
  LoadOptions lo;
  lo.step = 3;
  lo.no_dist = true;
  lo.keys = {"a"};
  ASSERT_OK(Load(all, *r, lo));
  EXPECT_TRUE(std::get<Tensor>(*all.Find("a")).BitwiseEquals(std::get<Tensor>(*ThreeEntries(7).Find("a"))));
  EXPECT_EQ(std::get<Bytes>(*all.Find("c")).data, "");  // not loaded
  auto whole = LoadWhole(*r, 3, {"a"});
  ASSERT_TRUE(whole.ok()) << whole.status();
  ExpectThree(7, *whole);
  StateDict b = ThreeTargets({"b"});
  Status st = testing::LoadNoDist(b, *r, 3);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
  EXPECT_NE(st.ToString().find("the pieces record of entry 'b' of step 3 is missing"), std::string::npos) << st;
  StateDict c = ThreeTargets({"c"});
  st = testing::LoadNoDist(c, *r, 3);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
  EXPECT_NE(st.ToString().find("entry 'c' of step 3"), std::string::npos) << st;
  st = r->ReadMetadata(3).status();
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
  auto damage = r->FindDamagedRecords();
  ASSERT_TRUE(damage.ok());
  ASSERT_EQ(damage->size(), 1u);
  EXPECT_EQ((*damage)[0].record, "metadata of step 3");
  EXPECT_NE((*damage)[0].error.ToString().find("entry 'b'"), std::string::npos) << (*damage)[0].error;
  testing::CommandResult v = testing::RunCommand(std::string(CKPTDB_CLI) + " verify " + store + " 2>&1");
  EXPECT_NE(v.code, 0) << v.out;
  EXPECT_NE(v.out.find("the pieces record of entry 'b' of step 3 is missing"), std::string::npos) << v.out;
  // Another entry's record under c's key is named as such.
  r.reset();
  WithRawDb(store, [&](rocksdb::DB* db) {
    std::string v0;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), PiecesKey(3, 0), &v0).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), PiecesKey(3, 2), v0).ok());
  });
  r = Reader(store);
  st = testing::LoadNoDist(c, *r, 3);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
  EXPECT_NE(st.ToString().find("belongs to entry 'a'"), std::string::npos) << st;
}

// A listing reads a step's summary, then the entries it needs one at a
// time (StorageReader::ReadStepSummary, ReadEntryPieces): only their pieces
// records; a step gone or saved again since the summary was read is said
// to be so, not taken for damage.
TEST(PiecesRecords, ASummaryAndThenOneEntrysPieces) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok());
  ASSERT_OK(testing::SaveNoDist(ThreeEntries(7), **w, 3));
  auto r = Reader(store);
  auto whole = r->ReadMetadata(3);
  ASSERT_TRUE(whole.ok()) << whole.status();
  auto md = r->ReadStepSummary(3);
  ASSERT_TRUE(md.ok()) << md.status();
  ASSERT_EQ(md->entries.size(), 3u);
  for (const EntryMetadata& e : md->entries) {
    EXPECT_TRUE(e.pieces_omitted) << e.fqn;
    ASSERT_TRUE(e.recorded_totals.has_value()) << e.fqn;
    EXPECT_EQ(e.recorded_totals->pieces, whole->Find(e.fqn)->pieces.size()) << e.fqn;
    EXPECT_EQ(e.recorded_totals->stored_bytes, whole->Find(e.fqn)->stored_bytes()) << e.fqn;
    EXPECT_EQ(e.logical_bytes(), whole->Find(e.fqn)->logical_bytes()) << e.fqn;
  }
  ASSERT_OK(r->ReadEntryPieces(&*md, {"b", "not-there"}));
  EXPECT_FALSE(md->Find("b")->pieces_omitted);
  EXPECT_EQ(md->Find("b")->pieces.size(), 4u);
  EXPECT_TRUE(md->Find("a")->pieces_omitted);
  auto read = LoadWhole(*r, 3, {"b"});
  ASSERT_TRUE(read.ok()) << read.status();
  // The step deleted and saved again: its summary read before is stale.
  ASSERT_OK((*w)->DeleteStep(3));
  ASSERT_OK(r->Refresh());
  EXPECT_EQ(r->ReadEntryPieces(&*md, {"a"}).code(), StatusCode::kNotFound);
  ASSERT_OK(testing::SaveNoDist(ThreeEntries(8), **w, 3));
  ASSERT_OK(r->Refresh());
  Status st = r->ReadEntryPieces(&*md, {"a"});
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.ToString().find("step 3 was saved again"), std::string::npos) << st;
  EXPECT_TRUE(md->Find("a")->pieces_omitted);
}

// A store written before format 6 (every piece in the M record; marker
// format 5) loads, whole or entry by entry; its writer marks it format 8,
// writes new steps with pieces records, and deletes the old steps.
TEST(PiecesRecords, AFormatFiveStoreLoadsAndItsWriterUpgradesIt) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  {
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok());
    ASSERT_OK(testing::SaveNoDist(ThreeEntries(1), **w, 1));
  }
  StepMetadata md;
  {
    auto r = Reader(store);
    auto read = r->ReadMetadata(1);
    ASSERT_TRUE(read.ok()) << read.status();
    md = *read;
  }
  // As a format-5 writer left it: the M value holds every piece, no Q keys.
  WithRawDb(store, [&](rocksdb::DB* db) {
    rocksdb::WriteBatch b;
    ASSERT_TRUE(b.Put(MetadataKey(1), EncodeMetadataValue(md)).ok());
    for (uint32_t i = 0; i < 3; ++i) ASSERT_TRUE(b.Delete(PiecesKey(1, i)).ok());
    ASSERT_TRUE(db->Write(rocksdb::WriteOptions(), &b).ok());
  });
  {
    std::ofstream marker(store + "/CKPTDB", std::ios::trunc);
    marker << "ckptdb store\nformat 5\n";
  }
  EXPECT_TRUE(testing::KeysWithPrefix(store, kPiecesPrefix).empty());
  {
    auto r = Reader(store);
    StateDict t = ThreeTargets();
    ASSERT_OK(testing::LoadNoDist(t, *r, 1));
    ExpectThree(1, t);
    StateDict b = ThreeTargets({"b"});
    ASSERT_OK(testing::LoadNoDist(b, *r, 1));
    ExpectThree(1, b);
    auto some = r->ReadMetadataOf(1, {"b"});
    ASSERT_TRUE(some.ok()) << some.status();
    EXPECT_EQ(some->Find("b")->pieces.size(), 4u);
    EXPECT_TRUE(some->Find("a")->pieces_omitted);
    // An entry's pieces are taken from the M record (there are no pieces
    // records); a summary is the whole step (it costs the same).
    ASSERT_OK(r->ReadEntryPieces(&*some, {"a"}));
    EXPECT_FALSE(some->Find("a")->pieces_omitted);
    EXPECT_EQ(some->Find("a")->pieces.size(), 1u);
    EXPECT_TRUE(some->Find("c")->pieces_omitted);
    auto summary = r->ReadStepSummary(1);
    ASSERT_TRUE(summary.ok()) << summary.status();
    ASSERT_OK(ValidateStepMetadata(*summary));
    testing::CommandResult v = testing::RunCommand(std::string(CKPTDB_CLI) + " verify " + store + " 2>&1");
    EXPECT_EQ(v.code, 0) << v.out;
    EXPECT_NE(v.out.find("step 1: ok (3 entries, "), std::string::npos) << v.out;
    testing::CommandResult ls = testing::RunCommand(std::string(CKPTDB_CLI) + " ls " + store + " 1 2>&1");
    EXPECT_EQ(ls.code, 0) << ls.out;
    EXPECT_NE(ls.out.find("b    sharded_tensor  f32    [8, 3]  4       96 B\n"), std::string::npos) << ls.out;
  }
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok());
  ASSERT_OK(testing::SaveNoDist(ThreeEntries(2), **w, 2));
  {
    std::ifstream marker(store + "/CKPTDB");
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(marker), std::istreambuf_iterator<char>()),
              "ckptdb store\nformat 8\n");
  }
  EXPECT_EQ(PiecesKeysOf(store, 2).size(), 3u);
  ASSERT_OK((*w)->DeleteStep(1));
  w->reset();
  auto r = Reader(store);
  EXPECT_EQ(Steps(*r), (std::vector<int64_t>{2}));
  StateDict t = ThreeTargets();
  ASSERT_OK(testing::LoadNoDist(t, *r, 2));
  ExpectThree(2, t);
}

}  // namespace
}  // namespace ckptdb
