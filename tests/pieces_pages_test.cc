// Store format 7: an entry of many pieces (what W ranks save of one tensor)
// keeps them in pages, each under a key of its own with its box in the
// step's record, and a load reads only the pages that meet what it loads:
// a rank's metadata read does not grow with the world size.
#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <algorithm>
#include <random>

#include "ckptdb/ckptdb.h"
#include "format/keys.h"
#include "format/metadata_codec.h"
#include "test_util.h"

namespace ckptdb {
namespace {

using testing::PatternTensor;
using testing::TempDir;

constexpr int64_t kRows = 300, kCols = 8;

// Copies box (offsets, sizes) of the 2-d row-major `full` tensor.
Tensor Slice2(const Tensor& full, const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes) {
  Tensor out = Tensor::Zeros(full.dtype(), sizes).value();
  const size_t es = DTypeSize(full.dtype());
  for (int64_t r = 0; r < sizes[0]; ++r) {
    std::memcpy(static_cast<char*>(out.data()) + r * sizes[1] * es,
                static_cast<const char*>(full.data()) + ((offsets[0] + r) * full.shape()[1] + offsets[1]) * es,
                sizes[1] * es);
  }
  return out;
}

// `boxes` of `full` as the local shards of one sharded tensor (zeros when
// `zero`: a load target).
ShardedTensor ShardsOf(const Tensor& full, const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>& boxes,
                       bool zero) {
  std::vector<Shard> shards;
  for (const auto& [o, s] : boxes) {
    Tensor t = Slice2(full, o, s);
    shards.push_back(Shard{o, zero ? testing::ZerosLike(t) : t});
  }
  return ShardedTensor::Create(full.dtype(), full.shape(), std::move(shards)).value();
}

std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> OneRowEach() {
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> rows;
  for (int64_t r = 0; r < kRows; ++r) rows.push_back({{r, 0}, {1, kCols}});
  return rows;
}

using testing::WithRawDb;

Status LoadRows(const Tensor& full, StoreReader& r, int64_t begin, int64_t end) {
  StateDict sd;
  const ShardedTensor target = ShardsOf(full, {{{begin, 0}, {end - begin, kCols}}}, true);
  (void)sd.Add("w", target);
  Status st = testing::LoadNoDist(sd, r, 1);
  if (!st.ok()) return st;
  const Shard& got = std::get<ShardedTensor>(*sd.Find("w")).local_shards()[0];
  EXPECT_TRUE(got.tensor.BitwiseEquals(Slice2(full, {begin, 0}, {end - begin, kCols})))
      << "rows " << begin << "-" << end;
  return Status::OK();
}

// 300 one-row pieces of "w" go into 5 pages of 64 (the last 44), the
// 1-piece entry "s" into one record. A load of rows 130-139 reads page 2
// only (ReadMetadataFor returns its 64 pieces, pieces_partial), so it works
// with pages 0 and 4 damaged or gone, while a whole read fails DataLoss
// naming the page; a page record that is another page's is refused.
TEST(PiecesPages, AnEntryOfManyPiecesIsKeptInPagesAndALoadReadsOnlyThoseItNeeds) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  const Tensor full = PatternTensor(DType::kF32, {kRows, kCols}, 5);
  const Tensor small = PatternTensor(DType::kI32, {4}, 6);
  {
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok()) << w.status();
    StateDict sd;
    ASSERT_OK(sd.Add("w", ShardsOf(full, OneRowEach(), false)));
    ASSERT_OK(sd.Add("s", small));
    ASSERT_OK(testing::SaveNoDist(sd, **w, 1));
  }
  std::vector<std::pair<uint32_t, std::optional<uint32_t>>> keys;
  for (const std::string& k : testing::KeysWithPrefix(store, kPiecesPrefix)) {
    int64_t step;
    uint32_t entry;
    std::optional<uint32_t> page;
    ASSERT_TRUE(ParsePiecesKey(k, &step, &entry, &page));
    keys.push_back({entry, page});
  }
  const std::vector<std::pair<uint32_t, std::optional<uint32_t>>> want = {
      {0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}, {1, std::nullopt}};
  EXPECT_EQ(keys, want);
  {
    auto r = testing::Reader(store);
    auto whole = r->ReadMetadata(1);
    ASSERT_TRUE(whole.ok()) << whole.status();
    ASSERT_EQ(whole->Find("w")->pieces.size(), static_cast<size_t>(kRows));
    for (int64_t i = 0; i < kRows; ++i) EXPECT_EQ(whole->Find("w")->pieces[i].offsets[0], i);  // saved order
    auto some = r->ReadMetadataFor(1, {"w", "s"}, {EntryRegion{"w", {130, 2}, {10, 3}}});
    ASSERT_TRUE(some.ok()) << some.status();
    const EntryMetadata& w = *some->Find("w");
    EXPECT_TRUE(w.pieces_partial);
    ASSERT_EQ(w.pieces.size(), kPiecesPerPage);
    EXPECT_EQ(w.pieces.front().offsets[0], 128);
    EXPECT_EQ(w.totals()->pieces, static_cast<uint64_t>(kRows));  // the recorded totals
    EXPECT_FALSE(some->Find("s")->pieces_partial);
    EXPECT_EQ(some->Find("s")->pieces.size(), 1u);
    EXPECT_EQ(ValidateStepMetadata(*some).code(), StatusCode::kInvalidArgument);
    // Regions over two pages read both.
    auto two = r->ReadMetadataFor(1, {"w"}, {EntryRegion{"w", {10, 0}, {1, kCols}}, EntryRegion{"w", {299, 0}, {1, kCols}}});
    ASSERT_TRUE(two.ok()) << two.status();
    EXPECT_EQ(two->Find("w")->pieces.size(), kPiecesPerPage + (kRows - 4 * kPiecesPerPage));
    ASSERT_OK(LoadRows(full, *r, 0, kRows));
  }
  WithRawDb(store, [&](rocksdb::DB* db) {
    std::string v;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), PiecesPageKey(1, 0, 0), &v).ok());
    v[v.size() / 2] ^= 0x01;
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), PiecesPageKey(1, 0, 0), v).ok());
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), PiecesPageKey(1, 0, 4)).ok());
  });
  {
    auto r = testing::Reader(store);
    ASSERT_OK(LoadRows(full, *r, 130, 140));
    ASSERT_OK(LoadRows(full, *r, 64, 256));  // pages 1-3
    Status st = LoadRows(full, *r, 0, 10);
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
    EXPECT_NE(st.ToString().find("page 0 of the pieces of entry 'w' of step 1"), std::string::npos) << st;
    st = LoadRows(full, *r, 290, 300);
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
    EXPECT_NE(st.ToString().find("page 4 of the pieces of entry 'w' of step 1 is missing"), std::string::npos) << st;
    st = r->ReadMetadata(1).status();
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
    EXPECT_NE(st.ToString().find("entry 'w' of step 1"), std::string::npos) << st;
    auto damage = r->FindDamagedRecords();
    ASSERT_TRUE(damage.ok()) << damage.status();
    ASSERT_EQ(damage->size(), 1u);
    EXPECT_EQ((*damage)[0].record, "metadata of step 1");
    testing::CommandResult v = testing::RunCommand(std::string(CKPTDB_CLI) + " verify " + store + " 2>&1");
    EXPECT_NE(v.code, 0) << v.out;
    EXPECT_NE(v.out.find("entry 'w'"), std::string::npos) << v.out;
  }
  // Page 3's record put where page 2's belongs: refused, not taken for it.
  WithRawDb(store, [&](rocksdb::DB* db) {
    std::string v;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), PiecesPageKey(1, 0, 3), &v).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), PiecesPageKey(1, 0, 2), v).ok());
  });
  auto r = testing::Reader(store);
  Status st = LoadRows(full, *r, 130, 140);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
  EXPECT_NE(st.ToString().find("page 2 of the pieces of entry 'w' of step 1 is page 3"), std::string::npos) << st;
  // Deleting the step deletes its pages.
  {
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok());
    ASSERT_OK((*w)->DeleteStep(1));
  }
  EXPECT_TRUE(testing::KeysWithPrefix(store, kPiecesPrefix).empty());
}

// A step of many pieces written as store format 6 wrote it (one pieces
// record for the entry, no pages in the M record: rewritten here from the
// format-7 step with the codec's format-6 encoders) loads whole and by
// region, every piece read.
TEST(PiecesPages, AFormatSixStepOfManyPiecesStillLoads) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  const Tensor full = PatternTensor(DType::kF32, {kRows, kCols}, 7);
  {
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok());
    StateDict sd;
    ASSERT_OK(sd.Add("w", ShardsOf(full, OneRowEach(), false)));
    ASSERT_OK(testing::SaveNoDist(sd, **w, 1));
  }
  StepMetadata md;
  {
    auto r = testing::Reader(store);
    auto read = r->ReadMetadata(1);
    ASSERT_TRUE(read.ok()) << read.status();
    md = *read;
  }
  WithRawDb(store, [&](rocksdb::DB* db) {
    rocksdb::WriteBatch b;
    ASSERT_TRUE(b.DeleteRange(db->DefaultColumnFamily(), PiecesStepBegin(1), PiecesStepEnd(1)).ok());
    ASSERT_TRUE(b.Put(MetadataKey(1), EncodeMetadataRecord(md, /*paged=*/false)).ok());
    ASSERT_TRUE(b.Put(PiecesKey(1, 0), EncodeEntryPiecesValue(md, 0)).ok());
    ASSERT_TRUE(db->Write(rocksdb::WriteOptions(), &b).ok());
  });
  ASSERT_EQ(testing::KeysWithPrefix(store, kPiecesPrefix).size(), 1u);
  auto r = testing::Reader(store);
  auto some = r->ReadMetadataFor(1, {"w"}, {EntryRegion{"w", {130, 0}, {1, kCols}}});
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_FALSE(some->Find("w")->pieces_partial);
  EXPECT_EQ(some->Find("w")->pieces.size(), static_cast<size_t>(kRows));
  ASSERT_OK(LoadRows(full, *r, 130, 140));
  ASSERT_OK(LoadRows(full, *r, 0, kRows));
}

// Resharding through pages: a [97, 13] tensor saved as about 150 irregular
// pieces in a shuffled order (so that pages' boxes overlap one another)
// loads into random boxes exactly as the saved bytes, whatever pages each
// box meets.
TEST(PiecesPages, RandomRegionsLoadExactlyWhateverPagesTheyMeet) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  std::mt19937 rng(33);
  const int64_t rows = 97, cols = 13;
  const Tensor full = PatternTensor(DType::kF32, {rows, cols}, 9);
  auto cuts = [&](int64_t n, int k) {
    std::vector<int64_t> c = {0, n};
    while (static_cast<int>(c.size()) < k + 2) {
      const int64_t x = std::uniform_int_distribution<int64_t>(1, n - 1)(rng);
      if (std::find(c.begin(), c.end(), x) == c.end()) c.push_back(x);
    }
    std::sort(c.begin(), c.end());
    return c;
  };
  const std::vector<int64_t> rc = cuts(rows, 29), cc = cuts(cols, 4);
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> boxes;
  for (size_t i = 0; i + 1 < rc.size(); ++i) {
    for (size_t j = 0; j + 1 < cc.size(); ++j) boxes.push_back({{rc[i], cc[j]}, {rc[i + 1] - rc[i], cc[j + 1] - cc[j]}});
  }
  std::shuffle(boxes.begin(), boxes.end(), rng);
  ASSERT_GT(boxes.size(), 2 * kPiecesPerPage);
  {
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok());
    StateDict sd;
    ASSERT_OK(sd.Add("w", ShardsOf(full, boxes, false)));
    ASSERT_OK(testing::SaveNoDist(sd, **w, 1));
  }
  auto r = testing::Reader(store);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> want;
    const int n = std::uniform_int_distribution<int>(1, 3)(rng);
    for (int k = 0; k < n; ++k) {
      // (Box k within rows [32k, 32k + 32): the boxes of one target are disjoint.)
      const int64_t r0 = std::uniform_int_distribution<int64_t>(32 * k, 32 * k + 31)(rng);
      const int64_t c0 = std::uniform_int_distribution<int64_t>(0, cols - 1)(rng);
      const int64_t rn = std::uniform_int_distribution<int64_t>(1, 32 * k + 32 - r0)(rng);
      const int64_t cn = std::uniform_int_distribution<int64_t>(1, cols - c0)(rng);
      want.push_back({{r0, c0}, {rn, cn}});
    }
    StateDict sd;
    ASSERT_OK(sd.Add("w", ShardsOf(full, want, true)));
    SCOPED_TRACE("trial " + std::to_string(trial));
    ASSERT_OK(testing::LoadNoDist(sd, *r, 1));
    const std::vector<Shard>& got = std::get<ShardedTensor>(*sd.Find("w")).local_shards();
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_TRUE(got[k].tensor.BitwiseEquals(Slice2(full, got[k].offsets, got[k].tensor.shape())))
          << "trial " << trial << " box " << k;
    }
  }
}

}  // namespace
}  // namespace ckptdb
