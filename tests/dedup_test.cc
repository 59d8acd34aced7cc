// Deduplication across steps (StoreOptions::deduplicate): a chunk whose
// bytes are already stored for the latest step is not written again, the new
// step refers to it, and deleting steps keeps exactly the chunks that the
// steps which stay refer to and gives back the rest.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "ckptdb/ckptdb.h"
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "format/chunk_codec.h"
#include "format/keys.h"
#include "store/sst_chunk_writer.h"
#include "test_util.h"
#include "thread_communicator.h"

namespace ckptdb {
namespace {

using testing::PatternTensor;

constexpr uint64_t kChunk = 64 << 10;

Tensor CopyOf(const Tensor& t) { return Tensor::Copy(t.dtype(), t.shape(), t.data(), t.nbytes()).value(); }

class DedupTest : public ::testing::Test {
 protected:
  void SetUp() override { store_ = tmp_.Sub("store"); }

  StoreOptions Options() const {
    StoreOptions o;
    o.chunk_bytes = kChunk;
    return o;
  }

  // Saves `sd` alone (no_dist) as `step` through a fresh writer.
  void SaveStep(const StateDict& sd, int64_t step, StoreOptions o) {
    auto w = OpenStoreWriter(store_, o);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_OK(testing::SaveNoDist(sd, **w, step));
  }
  void SaveStep(const StateDict& sd, int64_t step) { SaveStep(sd, step, Options()); }

  StepMetadata Metadata(int64_t step) {
    auto r = OpenStoreReader(store_);
    EXPECT_TRUE(r.ok()) << r.status();
    auto md = (*r)->ReadMetadata(step);
    EXPECT_TRUE(md.ok()) << md.status();
    return md.ok() ? *md : StepMetadata{};
  }

  StepInfo Info(int64_t step) {
    auto r = OpenStoreReader(store_);
    auto steps = (*r)->ListSteps();
    EXPECT_TRUE(steps.ok());
    for (const StepInfo& s : *steps) {
      if (s.step == step) return s;
    }
    ADD_FAILURE() << "step " << step << " not listed";
    return {};
  }

  // Every tensor of `want` loads from `step` bit for bit.
  void ExpectLoads(int64_t step, const std::vector<std::pair<std::string, Tensor>>& want) {
    auto r = OpenStoreReader(store_);
    ASSERT_TRUE(r.ok()) << r.status();
    auto whole = LoadWhole(**r, step);
    ASSERT_TRUE(whole.ok()) << "step " << step << ": " << whole.status();
    for (const auto& [fqn, t] : want) {
      const auto* v = whole->Find(fqn);
      ASSERT_NE(v, nullptr) << fqn;
      EXPECT_TRUE(std::get<Tensor>(*v).BitwiseEquals(t)) << "step " << step << " entry " << fqn;
    }
  }

  void Delete(const std::vector<int64_t>& steps) {
    auto w = OpenStoreWriter(store_, Options());
    ASSERT_TRUE(w.ok());
    ASSERT_OK((*w)->DeleteSteps(steps));
    auto swept = (*w)->Sweep();
    ASSERT_TRUE(swept.ok()) << swept.status();
    EXPECT_EQ(swept->unaccounted_saves, 0u) << "shared chunks of deleted steps must be accounted for";
    EXPECT_EQ(swept->orphan_saves, 0u);
  }

  testing::TempDir tmp_;
  std::string store_;
};

TEST_F(DedupTest, AStepIdenticalToTheLatestAddsNoChunk) {
  Tensor w = PatternTensor(DType::kF32, {256, 1024}, 1);  // 1 MiB: 16 chunks
  StateDict sd;
  ASSERT_OK(sd.Add("w", w));
  ASSERT_OK(sd.AddBytes("b", "loader position 17"));
  SaveStep(sd, 1);
  const uint64_t keys = testing::CountDataKeys(store_);
  EXPECT_EQ(keys, 17u);
  SaveStep(sd, 2);
  EXPECT_EQ(testing::CountDataKeys(store_), keys);
  EXPECT_EQ(Info(2).stored_bytes, 0u);
  EXPECT_EQ(Info(2).logical_bytes, Info(1).logical_bytes);
  EXPECT_GT(Info(1).stored_bytes, w.nbytes());
  StepMetadata m1 = Metadata(1), m2 = Metadata(2);
  const StoredPiece& p = m2.entries.at(0).pieces.at(0);
  ASSERT_EQ(p.references.size(), 1u);  // one run: chunks 0..15 of step 1's piece
  EXPECT_EQ(p.references[0], (ChunkReference{0, 16, 1, m1.save_id, m1.entries[0].pieces[0].key, 0}));
  ExpectLoads(2, {{"w", w}});
  ExpectLoads(1, {{"w", w}});
}

TEST_F(DedupTest, AStepWithOneChangedTensorAddsAboutThatTensor) {
  Tensor frozen = PatternTensor(DType::kBF16, {512, 1024}, 2);  // 1 MiB
  Tensor trained = PatternTensor(DType::kF32, {64, 1024}, 3);   // 256 KiB
  StateDict sd1;
  ASSERT_OK(sd1.Add("frozen", frozen));
  ASSERT_OK(sd1.Add("trained", trained));
  SaveStep(sd1, 1);
  Tensor trained2 = PatternTensor(DType::kF32, {64, 1024}, 4);
  StateDict sd2;
  ASSERT_OK(sd2.Add("frozen", frozen));
  ASSERT_OK(sd2.Add("trained", trained2));
  SaveStep(sd2, 2);
  const uint64_t added = Info(2).stored_bytes;
  EXPECT_GE(added, trained2.nbytes());
  EXPECT_LE(added, trained2.nbytes() + 4 * 16);  // the tensor and its 4 chunk headers
  // One element changed: one chunk added.
  Tensor trained3 = CopyOf(trained2);
  trained3.data_as<float>()[5 * 1024] += 1.0f;  // chunk 0 (16 rows a chunk)
  StateDict sd3;
  ASSERT_OK(sd3.Add("frozen", frozen));
  ASSERT_OK(sd3.Add("trained", trained3));
  SaveStep(sd3, 3);
  EXPECT_EQ(Info(3).stored_bytes, kChunk + 16);
  StepMetadata m3 = Metadata(3);
  EXPECT_EQ(m3.entries.at(1).pieces.at(0).referenced_chunks(), 3u);
  ExpectLoads(1, {{"frozen", frozen}, {"trained", trained}});
  ExpectLoads(2, {{"frozen", frozen}, {"trained", trained2}});
  ExpectLoads(3, {{"frozen", frozen}, {"trained", trained3}});
}

// Ranks as threads: each decides for its own shards; a save on another
// world size (other shard boundaries) shares nothing and still loads.
TEST_F(DedupTest, EachRankSharesItsOwnShardsAndOtherShardingsStillLoad) {
  Tensor full = PatternTensor(DType::kF32, {384, 1024}, 5);  // 1.5 MiB
  auto save = [&](int world, int64_t step) {
    std::mutex mu;
    std::vector<Status> st(world);
    testing::RunRanksAsThreads(world, [&](int rank, Communicator& comm) {
      auto w = OpenStoreWriter(store_, Options());
      const int64_t rows = 384 / world;
      Tensor part = Tensor::Copy(DType::kF32, {rows, 1024},
                                 static_cast<const char*>(full.data()) + rank * rows * 1024 * 4,
                                 static_cast<uint64_t>(rows) * 1024 * 4)
                        .value();
      StateDict sd;
      (void)sd.Add("t", ShardedTensor::Create(DType::kF32, {384, 1024}, {Shard{{rank * rows, 0}, part}}).value());
      SaveOptions o;
      o.step = step;
      o.communicator = &comm;
      Status s = w.ok() ? Save(sd, **w, o) : w.status();
      std::lock_guard<std::mutex> lock(mu);
      st[rank] = s;
    });
    for (const Status& s : st) ASSERT_TRUE(s.ok()) << s;
  };
  save(2, 1);
  const uint64_t keys = testing::CountDataKeys(store_);
  save(2, 2);
  EXPECT_EQ(testing::CountDataKeys(store_), keys);
  EXPECT_EQ(Info(2).stored_bytes, 0u);
  StepMetadata m2 = Metadata(2);
  ASSERT_EQ(m2.entries.at(0).pieces.size(), 2u);
  for (const StoredPiece& p : m2.entries[0].pieces) EXPECT_EQ(p.referenced_chunks(), p.num_chunks);
  save(3, 3);  // 128 rows a shard: other regions, nothing shared
  // Every byte written again (the pieces are cut into other chunks, each
  // with its header).
  auto payload = [&](int64_t step) {
    uint64_t chunks = 0;
    for (const StoredPiece& p : Metadata(step).entries.at(0).pieces) chunks += p.num_chunks;
    return Info(step).stored_bytes - chunks * kChunkHeaderSize;
  };
  EXPECT_EQ(payload(3), payload(1));
  EXPECT_EQ(payload(1), full.nbytes());
  save(3, 4);
  EXPECT_EQ(Info(4).stored_bytes, 0u);
  for (int64_t step : {1, 2, 3, 4}) ExpectLoads(step, {{"t", full}});
}

TEST_F(DedupTest, DeletingTheOlderStepKeepsTheNewerWholeAndFreesOnlyUnsharedChunks) {
  Tensor a = PatternTensor(DType::kF32, {128, 1024}, 6);  // 8 chunks
  Tensor b = PatternTensor(DType::kF32, {64, 1024}, 7);   // 4 chunks
  Tensor b2 = PatternTensor(DType::kF32, {64, 1024}, 8);
  StateDict sd1, sd2;
  ASSERT_OK(sd1.Add("a", a));
  ASSERT_OK(sd1.Add("b", b));
  ASSERT_OK(sd2.Add("a", a));
  ASSERT_OK(sd2.Add("b", b2));
  SaveStep(sd1, 1);
  SaveStep(sd2, 2);
  EXPECT_EQ(testing::CountDataKeys(store_), 16u);
  Delete({1});
  // a's 8 chunks stay (step 2 uses them), b's 4 of step 1 are gone.
  EXPECT_EQ(testing::CountDataKeys(store_), 12u);
  ExpectLoads(2, {{"a", a}, {"b", b2}});
  // A later step shares them again, through step 2's references.
  SaveStep(sd2, 3);
  EXPECT_EQ(Info(3).stored_bytes, 0u);
  Delete({2});
  EXPECT_EQ(testing::CountDataKeys(store_), 12u);
  ExpectLoads(3, {{"a", a}, {"b", b2}});
  Delete({3});
  EXPECT_EQ(testing::CountDataKeys(store_), 0u);
  // The space is given back: no data file is left.
  auto r = OpenStoreReader(store_);
  auto stats = (*r)->GetStoreStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_LT(stats->sst_bytes, 64u << 10) << "data files of deleted steps are still live";
}

TEST_F(DedupTest, StepsDeletedInAnyOrderKeepEveryOtherStepLoadable) {
  // Step k changes tensor k-1 of four; every other tensor is shared.
  std::vector<Tensor> t;
  for (uint32_t i = 0; i < 4; ++i) t.push_back(PatternTensor(DType::kF32, {32, 1024}, 10 + i));  // 2 chunks each
  std::vector<std::vector<Tensor>> at_step(5);
  for (int64_t step = 1; step <= 4; ++step) {
    t[step - 1] = PatternTensor(DType::kF32, {32, 1024}, 20 + static_cast<uint32_t>(step));
    at_step[step] = t;
    StateDict sd;
    for (size_t i = 0; i < t.size(); ++i) ASSERT_OK(sd.Add("t" + std::to_string(i), t[i]));
    SaveStep(sd, step);
  }
  auto expect = [&](int64_t step) {
    std::vector<std::pair<std::string, Tensor>> want;
    for (size_t i = 0; i < 4; ++i) want.emplace_back("t" + std::to_string(i), at_step[step][i]);
    ExpectLoads(step, want);
  };
  Delete({2});
  for (int64_t s : {1, 3, 4}) expect(s);
  Delete({1, 4});
  expect(3);
  // Step 3 alone: its own chunks and the ones it shares of steps 1 and 2.
  EXPECT_EQ(testing::CountDataKeys(store_), 8u + 0u);
  Delete({3});
  EXPECT_EQ(testing::CountDataKeys(store_), 0u);
}

TEST_F(DedupTest, RetentionInTheCommitBatchKeepsSharedChunks) {
  StoreOptions o = Options();
  o.retention.keep_last = 2;
  Tensor frozen = PatternTensor(DType::kBF16, {256, 1024}, 30);  // 512 KiB: 8 chunks
  std::vector<Tensor> adapters;
  for (int64_t step = 0; step < 6; ++step) {
    adapters.push_back(PatternTensor(DType::kF32, {16, 1024}, 40 + static_cast<uint32_t>(step)));  // 1 chunk
    StateDict sd;
    ASSERT_OK(sd.Add("frozen", frozen));
    ASSERT_OK(sd.Add("adapter", adapters.back()));
    SaveStep(sd, step, o);
  }
  auto r = OpenStoreReader(store_);
  auto steps = (*r)->ListSteps();
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 2u);
  EXPECT_EQ((*steps)[0].step, 4);
  // The frozen chunks of step 0, kept through five prunings, and the two
  // adapters kept.
  EXPECT_EQ(testing::CountDataKeys(store_), 8u + 2u);
  ExpectLoads(4, {{"frozen", frozen}, {"adapter", adapters[4]}});
  ExpectLoads(5, {{"frozen", frozen}, {"adapter", adapters[5]}});
  StepMetadata m5 = Metadata(5);
  EXPECT_EQ(m5.entries.at(0).pieces.at(0).references.at(0).step, 0) << "references name where the bytes are";
}

TEST_F(DedupTest, OffWritesEveryChunk) {
  StoreOptions o = Options();
  o.deduplicate = false;
  StateDict sd;
  ASSERT_OK(sd.Add("w", PatternTensor(DType::kF32, {64, 1024}, 50)));
  SaveStep(sd, 1, o);
  SaveStep(sd, 2, o);
  EXPECT_EQ(testing::CountDataKeys(store_), 8u);
  EXPECT_TRUE(Metadata(2).entries.at(0).pieces.at(0).references.empty());
  o.content_hashes = false;
  o.deduplicate = true;
  auto w = OpenStoreWriter(store_, o);
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument) << w.status();
  EXPECT_NE(w.status().message().find("deduplicate needs StoreOptions.content_hashes"), std::string::npos);
}

TEST_F(DedupTest, ChangedEncodingWritesEveryChunkAnew) {
  StateDict sd;
  ASSERT_OK(sd.Add("w", PatternTensor(DType::kBF16, {128, 1024}, 51)));
  SaveStep(sd, 1);
  StoreOptions z = Options();
  z.compression = Compression::kZstd;
  SaveStep(sd, 2, z);
  EXPECT_TRUE(Metadata(2).entries.at(0).pieces.at(0).references.empty());
  EXPECT_GT(Info(2).stored_bytes, 0u);
  SaveStep(sd, 3, z);
  EXPECT_EQ(Info(3).stored_bytes, 0u);
  z.zstd_level = 3;
  SaveStep(sd, 4, z);
  EXPECT_GT(Info(4).stored_bytes, 0u);
}

// The writer's rule on its own: a chunk is shared only when its hash, raw
// length and encoding all equal the candidate's chunk at its index.
TEST(DedupWriter, AMatchingHashWithAnotherLengthOrEncodingIsWrittenAnew) {
  testing::TempDir dir;
  Tensor t = PatternTensor(DType::kU8, {3 * 4096 + 100}, 60);
  SaveContext ctx{1, 77, 0, 1, 0};
  WriteItem item;
  item.fqn = "t";
  item.dtype = DType::kU8;
  item.key = StorageKey{0, 0};
  item.data = t.data();
  item.nbytes = t.nbytes();
  ChunkWriteOptions o;
  o.chunk_bytes = 4096;
  ReuseCandidate c;
  c.key = item.key;
  c.step = 0;
  c.save_id = 5;
  c.piece.key = StorageKey{0, 3};
  c.piece.chunk_bytes = 4096;
  c.piece.nbytes = t.nbytes();
  c.piece.num_chunks = 4;
  c.piece.encoding = PieceEncoding(Compression::kNone, 1);
  c.piece.chunk_hashes.resize(4 * kChunkHashBytes);
  for (uint32_t k = 0; k < 4; ++k) {
    const uint64_t n = std::min<uint64_t>(4096, t.nbytes() - k * 4096);
    ChunkContentHash(static_cast<const char*>(t.data()) + k * 4096, n, &c.piece.chunk_hashes[k * kChunkHashBytes]);
  }
  auto write = [&](const std::string& sub) {
    item.reuse = &c;
    std::filesystem::create_directories(dir.Sub(sub));
    auto r = WriteItemsToSst(dir.Sub(sub), ctx, {item}, rocksdb::Options(), o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->items.at(0) : WrittenItem{};
  };
  WrittenItem all = write("a");
  ASSERT_EQ(all.references.size(), 1u);
  EXPECT_EQ(all.references[0], (ChunkReference{0, 4, 0, 5, StorageKey{0, 3}, 0}));
  EXPECT_EQ(all.stored_bytes, 0u);
  // The candidate's last chunk was shorter (same hash recorded): written.
  c.piece.nbytes = t.nbytes() - 1;
  WrittenItem last = write("b");
  ASSERT_EQ(last.references.size(), 1u);
  EXPECT_EQ(last.references[0].count, 3u);
  EXPECT_EQ(last.stored_bytes, 100u + 16u);
  c.piece.nbytes = t.nbytes();
  // Encoded otherwise (zstd): every chunk written.
  c.piece.encoding = PieceEncoding(Compression::kZstd, 1);
  WrittenItem other = write("c");
  EXPECT_TRUE(other.references.empty());
  EXPECT_EQ(other.stored_bytes, t.nbytes() + 4 * 16);
  // Another hash: that chunk written, the others shared.
  c.piece.encoding = PieceEncoding(Compression::kNone, 1);
  c.piece.chunk_hashes[kChunkHashBytes + 3] ^= 1;
  WrittenItem one = write("d");
  ASSERT_EQ(one.references.size(), 2u);
  EXPECT_EQ(one.references[0], (ChunkReference{0, 1, 0, 5, StorageKey{0, 3}, 0}));
  EXPECT_EQ(one.references[1], (ChunkReference{2, 2, 0, 5, StorageKey{0, 3}, 2}));
  EXPECT_EQ(one.stored_bytes, 4096u + 16u);
}

TEST_F(DedupTest, ADamagedSharedChunkIsReportedForEveryStepUsingIt) {
  std::vector<float> v(64 * 1024);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.25f;
  Tensor w = Tensor::Copy(DType::kF32, {64, 1024}, v.data(), v.size() * 4).value();
  StateDict sd;
  ASSERT_OK(sd.Add("w", w));
  SaveStep(sd, 1);
  SaveStep(sd, 2);
  StateDict other;
  ASSERT_OK(other.Add("w", PatternTensor(DType::kF32, {64, 1024}, 61)));
  SaveStep(other, 3);
  // Damage chunk 0, stored once for steps 1 and 2.
  ASSERT_TRUE(testing::FlipByteOf(store_ + "/db", ".sst", std::string(reinterpret_cast<char*>(&v[100]), 64)));
  testing::CommandResult r = testing::RunCommand(std::string(CKPTDB_CLI) + " verify " + store_ + " 2>&1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("step 1: DAMAGED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step 2: DAMAGED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(shared with another step)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step 3: ok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 of 3 steps damaged"), std::string::npos) << r.out;
  // Step 2 alone says where the bytes are.
  r = testing::RunCommand(std::string(CKPTDB_CLI) + " verify " + store_ + " 2 2>&1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("shared: stored with step 1"), std::string::npos) << r.out;
}

TEST_F(DedupTest, ASaveWhoseSharedStepWasDeletedMeanwhileIsRefused) {
  StateDict sd;
  Tensor w = PatternTensor(DType::kF32, {64, 1024}, 62);
  ASSERT_OK(sd.Add("w", w));
  SaveStep(sd, 1);
  auto writer = OpenStoreWriter(store_, Options());
  ASSERT_TRUE(writer.ok());
  testing::FaultyWriter faulty(writer->get());
  faulty.on_finish = [&] { return (*writer)->DeleteStep(1); };
  Status st = testing::SaveNoDist(sd, faulty, 2);
  EXPECT_TRUE(st.IsCheckpointError()) << st;
  EXPECT_NE(st.ToString().find("step 1, whose chunks step 2 shares, was deleted while the save ran"),
            std::string::npos)
      << st;
  auto swept = (*writer)->Sweep();
  ASSERT_TRUE(swept.ok());
  writer->reset();
  EXPECT_EQ(testing::CountDataKeys(store_), 0u);
  auto r = OpenStoreReader(store_);
  EXPECT_EQ((*r)->ListSteps()->size(), 0u);
}

}  // namespace
}  // namespace ckptdb

namespace ckptdb {
namespace {

// Reads or replaces one record of a store directly (no writer open).
std::string RawGet(const std::string& store, const std::string& key) {
  rocksdb::DB* db = nullptr;
  EXPECT_TRUE(rocksdb::DB::OpenForReadOnly(rocksdb::Options(), store + "/db", &db).ok());
  std::string v;
  EXPECT_TRUE(db->Get(rocksdb::ReadOptions(), key, &v).ok()) << "no such key";
  delete db;
  return v;
}
void RawPut(const std::string& store, const std::string& key, const std::string& value) {
  rocksdb::DB* db = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), store + "/db", &db).ok());
  rocksdb::WriteOptions wo;
  wo.sync = true;
  ASSERT_TRUE(db->Put(wo, key, value).ok());
  ASSERT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());
  delete db;
}

class DedupDamageTest : public DedupTest {
 protected:
  // Steps 2 and 3; step 3 shares every chunk of "frozen" with step 2.
  void SaveTwoSharingSteps() {
    for (int64_t step : {2, 3}) {
      StateDict sd;
      ASSERT_OK(sd.Add("frozen", frozen_));
      ASSERT_OK(sd.Add("adapter", PatternTensor(DType::kF32, {16, 1024}, 70 + static_cast<uint32_t>(step))));
      SaveStep(sd, step);
    }
    ASSERT_GT(Metadata(3).entries.at(0).pieces.at(0).referenced_chunks(), 0u);
  }
  Tensor frozen_ = PatternTensor(DType::kBF16, {128, 1024}, 71);
};

TEST_F(DedupDamageTest, VerifyChecksEveryRecordOfAStoreWithSharedChunks) {
  SaveTwoSharingSteps();
  {
    auto w = OpenStoreWriter(store_, Options());
    ASSERT_TRUE((*w)->Tag(2, "best").ok());
  }
  RawPut(store_, TagKey("best"), "not a tag value");
  RawPut(store_, ReferencesKey(3), "not a references record");
  testing::CommandResult r = testing::RunCommand(std::string(CKPTDB_CLI) + " verify " + store_ + " 2>&1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("tag 'best': DAMAGED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("references of step 3: DAMAGED"), std::string::npos) << r.out;
}

TEST_F(DedupDamageTest, ADeleteNeverDropsTheDataOfAStepWhoseRecordsAreDamaged) {
  SaveTwoSharingSteps();
  // Step 2's metadata and summary unreadable: it may own any save of its
  // number, so deleting step 3 (which refers to it) drops none of it.
  const std::string m2 = RawGet(store_, MetadataKey(2)), s2 = RawGet(store_, SummaryKey(2));
  RawPut(store_, MetadataKey(2), "damaged");
  RawPut(store_, SummaryKey(2), "damaged");
  {
    auto w = OpenStoreWriter(store_, Options());
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_OK((*w)->DeleteStep(3));
  }
  RawPut(store_, MetadataKey(2), m2);
  RawPut(store_, SummaryKey(2), s2);
  ExpectLoads(2, {{"frozen", frozen_}});
}

TEST_F(DedupDamageTest, UnreadableReferencesOfAKeptStepStopDeletesButNotCommits) {
  SaveTwoSharingSteps();
  RawPut(store_, ReferencesKey(3), "damaged");
  RawPut(store_, MetadataKey(3), "damaged");
  auto w = OpenStoreWriter(store_, Options());
  ASSERT_TRUE(w.ok());
  const uint64_t keys = testing::CountDataKeys(store_);
  Status st = (*w)->DeleteStep(2);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("delete step 3 first"), std::string::npos) << st;
  EXPECT_EQ(testing::CountDataKeys(store_), keys);
  ExpectLoads(2, {{"frozen", frozen_}});
  // A commit with retention still commits (step 3, tagged, is kept and
  // blocks dropping step 2); it prunes nothing this time.
  ASSERT_TRUE((*w)->Tag(3, "keep").ok());
  w->reset();
  StoreOptions o = Options();
  o.retention.keep_last = 1;
  StateDict sd;
  ASSERT_OK(sd.Add("frozen", frozen_));
  SaveStep(sd, 4, o);
  ExpectLoads(4, {{"frozen", frozen_}});
  ExpectLoads(2, {{"frozen", frozen_}});
  // Once the damaged step is gone, deletes work again.
  auto w2 = OpenStoreWriter(store_, Options());
  ASSERT_OK((*w2)->DeleteStep(3));
  ASSERT_OK((*w2)->DeleteStep(2));
  ExpectLoads(4, {{"frozen", frozen_}});
}

}  // namespace
}  // namespace ckptdb

namespace ckptdb {
namespace {

// A crash right after a delete's batch, before its files were dropped: the
// data is deleted but still on disk. The next sweep (every writer open, and
// `ckptdb gc`) gives the space back.
TEST_F(DedupTest, TheFilesOfADeleteInterruptedByACrashAreGivenBack) {
  StateDict sd;
  ASSERT_OK(sd.Add("w", PatternTensor(DType::kF32, {256, 1024}, 80)));  // 1 MiB
  SaveStep(sd, 1);
  StateDict other;
  ASSERT_OK(other.Add("w", PatternTensor(DType::kF32, {16, 1024}, 81)));
  SaveStep(other, 2);
  {
    // What the delete's batch writes, and nothing after it.
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), store_ + "/db", &db).ok());
    rocksdb::WriteBatch b;
    ASSERT_TRUE(b.Delete(MetadataKey(1)).ok());
    ASSERT_TRUE(b.Delete(SummaryKey(1)).ok());
    ASSERT_TRUE(b.DeleteRange(db->DefaultColumnFamily(), DataSaveBegin(1, 0), DataSaveEnd(1, UINT64_MAX)).ok());
    rocksdb::WriteOptions wo;
    wo.sync = true;
    ASSERT_TRUE(db->Write(wo, &b).ok());
    ASSERT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());
    delete db;
  }
  auto sst_bytes = [&] {
    auto r = OpenStoreReader(store_);
    auto st = (*r)->GetStoreStats();
    return st.ok() ? st->sst_bytes : 0;
  };
  EXPECT_GT(sst_bytes(), 1u << 20) << "the deleted step's file is still there";
  StoreOptions o = Options();
  o.sweep_on_open = false;
  auto w = OpenStoreWriter(store_, o);
  ASSERT_TRUE(w.ok());
  auto found = (*w)->FindLeftovers();
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->deleted_saves_reclaimed, 1u);
  auto swept = (*w)->Sweep();
  ASSERT_TRUE(swept.ok());
  EXPECT_EQ(swept->deleted_saves_reclaimed, 1u);
  EXPECT_EQ(swept->unaccounted_saves, 0u);
  w->reset();
  EXPECT_LT(sst_bytes(), 512u << 10);
  ExpectLoads(2, {{"w", std::get<Tensor>(*other.Find("w"))}});
}

}  // namespace
}  // namespace ckptdb

namespace ckptdb {
namespace {

// Giving back the space of unused chunks inside files that still hold
// shared ones (StoreWriter::ReclaimSpace, `ckptdb gc`).
class ReclaimTest : public DedupTest {
 protected:
  // A step of a fine-tuning-like run: "frozen" never changes, "trained"
  // changes every step (`trained_rows` rows of 4 KiB).
  StateDict Step(int64_t step, int64_t trained_rows) const {
    StateDict sd;
    (void)sd.Add("frozen", frozen_);
    (void)sd.Add("trained", Trained(step, trained_rows));
    return sd;
  }
  static Tensor Trained(int64_t step, int64_t rows) {
    return PatternTensor(DType::kF32, {rows, 1024}, 200 + static_cast<uint32_t>(step));
  }
  uint64_t SstBytes(const std::string& store) {
    auto r = OpenStoreReader(store);
    EXPECT_TRUE(r.ok()) << r.status();
    auto st = (*r)->GetStoreStats();
    EXPECT_TRUE(st.ok()) << st.status();
    return st.ok() ? st->sst_bytes : 0;
  }
  StatusOr<ReclaimStats> Reclaim(double fraction, bool dry_run = false) {
    auto w = OpenStoreWriter(store_, Options());
    if (!w.ok()) return w.status();
    ReclaimOptions o;
    o.min_unused_fraction = fraction;
    o.dry_run = dry_run;
    return (*w)->ReclaimSpace(o);
  }
  Tensor frozen_ = PatternTensor(DType::kF32, {1024, 1024}, 199);  // 4 MiB
};

// The demo's case: every step but the newest removed by `ckptdb gc`. The
// first step's file keeps the frozen chunks every later step shares; its
// trained chunks, half the file, are unused. gc rewrites it, and the store
// is then about the size of one that only ever held the kept step (it was
// 1.5x before gc rewrote files).
TEST_F(ReclaimTest, GcLeavesTheStoreTheSizeOfOneHoldingOnlyTheKeptStep) {
  for (int64_t step = 1; step <= 4; ++step) SaveStep(Step(step, 1024), step);
  const std::string alone = tmp_.Sub("alone");
  {
    auto w = OpenStoreWriter(alone, Options());
    ASSERT_TRUE(w.ok());
    ASSERT_OK(testing::SaveNoDist(Step(4, 1024), **w, 4));
  }
  testing::CommandResult gc = testing::RunCommand(std::string(CKPTDB_CLI) + " gc " + store_ + " --keep-last 1 2>&1");
  ASSERT_EQ(gc.code, 0) << gc.out;
  EXPECT_NE(gc.out.find("rewrote 1 file(s) holding chunks kept steps share, without their unused chunks: 8"),
            std::string::npos)
      << gc.out;
  const double ratio = static_cast<double>(SstBytes(store_)) / static_cast<double>(SstBytes(alone));
  EXPECT_LE(ratio, 1.05) << "the store holds " << ratio << "x a store of only the kept step";
  ExpectLoads(4, {{"frozen", frozen_}, {"trained", Trained(4, 1024)}});
  // Nothing is left to rewrite; the next step still shares the frozen
  // chunks of the rewritten file.
  testing::CommandResult again = testing::RunCommand(std::string(CKPTDB_CLI) + " gc " + store_ + " 2>&1");
  EXPECT_EQ(again.out.find("rewrote"), std::string::npos) << again.out;
  SaveStep(Step(5, 1024), 5);
  EXPECT_EQ(Info(5).stored_bytes, Info(4).stored_bytes);
  ExpectLoads(5, {{"frozen", frozen_}, {"trained", Trained(5, 1024)}});
  Delete({4, 5});
  EXPECT_EQ(testing::CountDataKeys(store_), 0u);
  EXPECT_LT(SstBytes(store_), 64u << 10) << "data files are left after every step was deleted";
}

// A file is rewritten only when its unused part reaches the fraction asked
// for; a dry run changes nothing; a rewritten file is not rewritten again.
TEST_F(ReclaimTest, OnlyFilesWhoseUnusedPartReachesTheFractionAreRewritten) {
  SaveStep(Step(1, 256), 1);  // 4 MiB frozen + 1 MiB trained
  SaveStep(Step(2, 256), 2);
  Delete({1});  // step 1's file: 1 MiB of its 5 unused
  const uint64_t before = SstBytes(store_);
  auto left = Reclaim(0.25);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(left->files_rewritten, 0u);
  EXPECT_EQ(left->files_left, 1u);
  // (An estimate from the file's index: the last unused range also counts
  // the index blocks after it.)
  EXPECT_NEAR(static_cast<double>(left->unused_bytes_left), 1 << 20, 128 << 10);
  auto dry = Reclaim(0.15, /*dry_run=*/true);
  ASSERT_TRUE(dry.ok()) << dry.status();
  EXPECT_EQ(dry->files_rewritten, 1u);
  EXPECT_EQ(SstBytes(store_), before) << "a dry run changed the store";
  auto done = Reclaim(0.15);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->files_rewritten, 1u);
  EXPECT_NEAR(static_cast<double>(done->bytes_before - done->bytes_after), 1 << 20, 64 << 10);
  EXPECT_NEAR(static_cast<double>(before - SstBytes(store_)), 1 << 20, 64 << 10);
  ExpectLoads(2, {{"frozen", frozen_}, {"trained", Trained(2, 256)}});
  auto again = Reclaim(0);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->files_rewritten, 0u);
  EXPECT_EQ(again->files_left, 0u);
  EXPECT_EQ(Reclaim(1.5).status().code(), StatusCode::kInvalidArgument);
}

// The chunks a step uses are never rewritten away, even when its records
// are damaged: with its metadata unreadable, the save it shares is left as
// it is; with its references unknown, nothing is rewritten (DataLoss).
TEST_F(ReclaimTest, FilesAStepWithDamagedRecordsSharesAreLeftWhole) {
  SaveStep(Step(1, 1024), 1);
  SaveStep(Step(2, 1024), 2);
  Delete({1});
  const std::string m2 = RawGet(store_, MetadataKey(2)), r2 = RawGet(store_, ReferencesKey(2));
  RawPut(store_, MetadataKey(2), "damaged");
  auto kept = Reclaim(0);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->files_rewritten, 0u);
  RawPut(store_, ReferencesKey(2), "damaged");
  auto refused = Reclaim(0);
  EXPECT_EQ(refused.status().code(), StatusCode::kDataLoss) << refused.status();
  RawPut(store_, MetadataKey(2), m2);
  RawPut(store_, ReferencesKey(2), r2);
  auto done = Reclaim(0);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->files_rewritten, 1u);
  ExpectLoads(2, {{"frozen", frozen_}, {"trained", Trained(2, 1024)}});
}

}  // namespace
}  // namespace ckptdb
