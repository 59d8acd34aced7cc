// Store format 7: an entry of many pieces (what W ranks save of one tensor)
// keeps them in pages, each under a key of its own with its box in the
// step's record, and a load reads only the pages that meet what it loads:
// a rank's metadata read does not grow with the world size. Store format 8:
// pieces that tile the entry on a regular grid are recorded as the grid,
// each cell's piece a page of its own, so the step's record does not grow
// with them and a load reads just the cells it needs.
#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <algorithm>
#include <functional>
#include <random>

#include "ckptdb/ckptdb.h"
#include "format/chunk_codec.h"
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

// One row a piece; with `split_last`, the last row in two halves, so that
// the pieces are not a regular grid (kept in pages, not as a grid).
std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> OneRowEach(bool split_last = false) {
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> rows;
  for (int64_t r = 0; r < kRows; ++r) rows.push_back({{r, 0}, {1, kCols}});
  if (split_last) {
    rows.back().second[1] = kCols / 2;
    rows.push_back({{kRows - 1, kCols / 2}, {1, kCols - kCols / 2}});
  }
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

// Saves `sd` as step `step` of `store` (one process).
void SaveAs(const std::string& store, const StateDict& sd, int64_t step) {
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_OK(testing::SaveNoDist(sd, **w, step));
}

// Deletes step `step` of `store`: none of its pieces records is left.
void DeleteLeavesNoPiecesRecords(const std::string& store, int64_t step) {
  {
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_OK((*w)->DeleteStep(step));
  }
  EXPECT_TRUE(testing::KeysWithPrefix(store, kPiecesPrefix).empty());
}

// 301 pieces of "w" (a row each, the last row in two: not a grid) go into 5
// pages of 64 (the last 45), the 1-piece entry "s" into one record. A load of rows 130-139 reads page 2
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
    ASSERT_OK(sd.Add("w", ShardsOf(full, OneRowEach(/*split_last=*/true), false)));
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
    ASSERT_EQ(whole->Find("w")->pieces.size(), static_cast<size_t>(kRows + 1));
    for (int64_t i = 0; i < kRows; ++i) EXPECT_EQ(whole->Find("w")->pieces[i].offsets[0], i);  // saved order
    auto some = r->ReadMetadataFor(1, {"w", "s"}, {EntryRegion{"w", {130, 2}, {10, 3}}});
    ASSERT_TRUE(some.ok()) << some.status();
    const EntryMetadata& w = *some->Find("w");
    EXPECT_TRUE(w.pieces_partial);
    ASSERT_EQ(w.pieces.size(), kPiecesPerPage);
    EXPECT_EQ(w.pieces.front().offsets[0], 128);
    EXPECT_EQ(w.totals()->pieces, static_cast<uint64_t>(kRows + 1));  // the recorded totals
    EXPECT_FALSE(some->Find("s")->pieces_partial);
    EXPECT_EQ(some->Find("s")->pieces.size(), 1u);
    EXPECT_EQ(ValidateStepMetadata(*some).code(), StatusCode::kInvalidArgument);
    // Regions over two pages read both.
    auto two = r->ReadMetadataFor(1, {"w"}, {EntryRegion{"w", {10, 0}, {1, kCols}}, EntryRegion{"w", {299, 0}, {1, kCols}}});
    ASSERT_TRUE(two.ok()) << two.status();
    EXPECT_EQ(two->Find("w")->pieces.size(), kPiecesPerPage + (kRows + 1 - 4 * kPiecesPerPage));
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
  DeleteLeavesNoPiecesRecords(store, 1);
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

// The boxes of a regular grid of `block` over `shape` (2-d), shuffled.
std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> GridBoxes(const std::vector<int64_t>& shape,
                                                                            const std::vector<int64_t>& block,
                                                                            std::mt19937* rng) {
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> boxes;
  for (int64_t r = 0; r < shape[0]; r += block[0]) {
    for (int64_t c = 0; c < shape[1]; c += block[1]) {
      boxes.push_back({{r, c}, {std::min(block[0], shape[0] - r), std::min(block[1], shape[1] - c)}});
    }
  }
  std::shuffle(boxes.begin(), boxes.end(), *rng);
  return boxes;
}

std::string MetadataValueOf(const std::string& store, int64_t step) {
  std::string v;
  WithRawDb(store, [&](rocksdb::DB* db) { ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), MetadataKey(step), &v).ok()); });
  return v;
}

// "w": 300 one-row pieces (a grid of [1, 8] blocks); "g": [40, 30] in
// shuffled [3, 7] blocks (14 x 5 cells, the last row and column of cells
// smaller). The step's record holds each grid and no pages; cell c's piece
// is page c; a load of rows 130-139 reads those 10 cells' records and no
// other, random regions of "g" load exactly, and a cell that is missing or
// holds another cell's piece fails the loads that need it (DataLoss naming
// it) and no other.
TEST(PiecesGrid, ARegularShardingIsRecordedAsAGridAndALoadReadsOnlyItsCells) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  std::mt19937 rng(8);
  const Tensor full = PatternTensor(DType::kF32, {kRows, kCols}, 11);
  const Tensor g = PatternTensor(DType::kF32, {40, 30}, 12);
  {
    StateDict sd;
    ASSERT_OK(sd.Add("w", ShardsOf(full, OneRowEach(), false)));
    ASSERT_OK(sd.Add("g", ShardsOf(g, GridBoxes({40, 30}, {3, 7}, &rng), false)));
    SaveAs(store, sd, 1);
  }
  auto rec = DecodeMetadataRecord(MetadataValueOf(store, 1));
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(rec->grids[0], (std::vector<int64_t>{1, kCols}));
  EXPECT_EQ(rec->grids[1], (std::vector<int64_t>{3, 7}));
  EXPECT_TRUE(rec->pages[0].empty());
  EXPECT_TRUE(rec->pages[1].empty());
  std::vector<uint32_t> cells_of[2];
  for (const std::string& k : testing::KeysWithPrefix(store, kPiecesPrefix)) {
    int64_t step;
    uint32_t entry;
    std::optional<uint32_t> page;
    ASSERT_TRUE(ParsePiecesKey(k, &step, &entry, &page));
    ASSERT_TRUE(page.has_value());
    cells_of[entry].push_back(*page);
  }
  EXPECT_EQ(cells_of[0].size(), static_cast<size_t>(kRows));
  EXPECT_EQ(cells_of[1].size(), 70u);
  {
    auto r = testing::Reader(store);
    auto some = r->ReadMetadataFor(1, {"w"}, {EntryRegion{"w", {130, 2}, {10, 3}}});
    ASSERT_TRUE(some.ok()) << some.status();
    const EntryMetadata& e = *some->Find("w");
    EXPECT_TRUE(e.pieces_partial);
    ASSERT_EQ(e.pieces.size(), 10u);
    for (size_t i = 0; i < 10; ++i) EXPECT_EQ(e.pieces[i].offsets[0], 130 + static_cast<int64_t>(i));
    auto whole = r->ReadMetadata(1);
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_EQ(whole->Find("w")->pieces.size(), static_cast<size_t>(kRows));
    EXPECT_EQ(whole->Find("g")->pieces.size(), 70u);
    for (int trial = 0; trial < 30; ++trial) {
      const int64_t r0 = std::uniform_int_distribution<int64_t>(0, 39)(rng);
      const int64_t c0 = std::uniform_int_distribution<int64_t>(0, 29)(rng);
      const int64_t rn = std::uniform_int_distribution<int64_t>(1, 40 - r0)(rng);
      const int64_t cn = std::uniform_int_distribution<int64_t>(1, 30 - c0)(rng);
      StateDict sd;
      ASSERT_OK(sd.Add("g", ShardsOf(g, {{{r0, c0}, {rn, cn}}}, true)));
      ASSERT_OK(testing::LoadNoDist(sd, *r, 1));
      const Shard& got = std::get<ShardedTensor>(*sd.Find("g")).local_shards()[0];
      EXPECT_TRUE(got.tensor.BitwiseEquals(Slice2(g, {r0, c0}, {rn, cn}))) << "trial " << trial;
    }
    ASSERT_OK(LoadRows(full, *r, 0, kRows));
  }
  StepMetadata md;
  {
    auto r = testing::Reader(store);
    auto read = r->ReadMetadataOf(1, {"w"});
    ASSERT_TRUE(read.ok()) << read.status();
    md = *read;
  }
  // Cell 135 gone; then cell 6 given cell 5's piece (as page 6).
  WithRawDb(store, [&](rocksdb::DB* db) {
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), PiecesPageKey(1, 0, 135)).ok());
  });
  {
    auto r = testing::Reader(store);
    auto whole = r->ReadMetadata(1);
    EXPECT_EQ(whole.status().code(), StatusCode::kDataLoss) << whole.status();
    ASSERT_OK(LoadRows(full, *r, 0, 130));
    Status st = LoadRows(full, *r, 130, 140);
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
    EXPECT_NE(st.ToString().find("page 135 of the pieces of entry 'w' of step 1 is missing"), std::string::npos) << st;
  }
  WithRawDb(store, [&](rocksdb::DB* db) {
    std::optional<PiecesGrid> grid = GridOf(*md.Find("w"));
    ASSERT_TRUE(grid.has_value());
    std::swap(grid->piece_of_cell[5], grid->piece_of_cell[6]);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), PiecesPageKey(1, 0, 6), EncodeEntryPiecesCell(md, 0, *grid, 6)).ok());
    // Cell 7's piece made half of it (a valid piece inside the cell).
    StoredPiece& seven = md.entries[0].pieces[grid->piece_of_cell[7]];
    seven.sizes[1] = kCols / 2;
    seven.nbytes /= 2;
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), PiecesPageKey(1, 0, 7), EncodeEntryPiecesCell(md, 0, *grid, 7)).ok());
  });
  {
    auto r = testing::Reader(store);
    ASSERT_OK(LoadRows(full, *r, 0, 6));
    Status st = LoadRows(full, *r, 6, 7);
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
    EXPECT_NE(st.ToString().find("page 6 of the pieces of entry 'w' of step 1: piece 6 [5:6, 0:8] lies outside"),
              std::string::npos)
        << st;
    st = LoadRows(full, *r, 7, 8);
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
    EXPECT_NE(st.ToString().find("page 7 of the pieces of entry 'w' of step 1: piece 7 [7:8, 0:4] is not its grid "
                                 "cell [7:8, 0:8]"),
              std::string::npos)
        << st;
  }
  DeleteLeavesNoPiecesRecords(store, 1);
}

// A one-row-a-rank tensor saved by 100 and by 1,000 ranks: the step's
// record (what every load reads first) is the same size; in pages (store
// format 7) it held a box per 64 pieces.
TEST(PiecesGrid, TheStepRecordOfAGridDoesNotGrowWithItsPieces) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto save = [&](int64_t rows, int64_t step) {
    const Tensor full = PatternTensor(DType::kF32, {rows, 2}, 3);
    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> boxes;
    for (int64_t r = 0; r < rows; ++r) boxes.push_back({{r, 0}, {1, 2}});
    StateDict sd;
    ASSERT_OK(sd.Add("w", ShardsOf(full, boxes, false)));
    SaveAs(store, sd, step);
  };
  save(100, 1);
  save(1000, 2);
  const size_t small = MetadataValueOf(store, 1).size(), large = MetadataValueOf(store, 2).size();
  EXPECT_LE(large, small + 8) << small << " bytes at 100 pieces, " << large << " at 1000";
  auto r = testing::Reader(store);
  auto some = r->ReadMetadataFor(2, {"w"}, {EntryRegion{"w", {999, 0}, {1, 2}}});
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_EQ(some->Find("w")->pieces.size(), 1u);
}

// Pieces records are ingested before the record that commits the step:
// records of the same step left by a save that never committed (here 500
// cells of another save) are deleted when the step is saved, so a step of
// 300 cells reads back whole and never takes another save's for its own.
TEST(PiecesGrid, RecordsAnUncommittedSaveLeftAreReplacedWhenTheStepIsSaved) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  const Tensor full = PatternTensor(DType::kF32, {kRows, kCols}, 13);
  {
    StateDict sd;
    ASSERT_OK(sd.Add("other", PatternTensor(DType::kI32, {4}, 1)));
    SaveAs(store, sd, 2);
  }
  WithRawDb(store, [&](rocksdb::DB* db) {
    for (uint32_t c = 0; c < 500; ++c) {
      ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), PiecesPageKey(1, 0, c), "left by a save that never committed").ok());
    }
  });
  {
    StateDict sd;
    ASSERT_OK(sd.Add("w", ShardsOf(full, OneRowEach(), false)));
    SaveAs(store, sd, 1);
  }
  EXPECT_EQ(testing::KeysWithPrefix(store, kPiecesPrefix).size(), static_cast<size_t>(kRows) + 1);  // (+ step 2's)
  auto r = testing::Reader(store);
  auto whole = r->ReadMetadata(1);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->Find("w")->pieces.size(), static_cast<size_t>(kRows));
  ASSERT_OK(LoadRows(full, *r, 0, kRows));
}

// A save that failed after ingesting its step's pieces records (a crash
// before its commit) and wrote no data of its own (every chunk shared)
// leaves a pending record and those records: the sweep on the next open
// deletes them with the pending record. A pending record of a committed
// step leaves that step's records alone.
TEST(PiecesGrid, TheSweepDeletesThePiecesRecordsOfAStepThatNeverCommitted) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  {
    StateDict sd;
    ASSERT_OK(sd.Add("other", PatternTensor(DType::kI32, {4}, 1)));
    SaveAs(store, sd, 2);
  }
  WithRawDb(store, [&](rocksdb::DB* db) {
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), PendingKey(5, 77), "").ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), PendingKey(2, 78), "").ok());
    for (uint32_t c = 0; c < 20; ++c) {
      ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), PiecesPageKey(5, 0, c), "left by a save of step 5").ok());
    }
  });
  ASSERT_EQ(testing::KeysWithPrefix(store, kPiecesPrefix).size(), 21u);
  {
    StateDict sd;
    ASSERT_OK(sd.Add("more", PatternTensor(DType::kI32, {4}, 2)));
    SaveAs(store, sd, 3);  // (its writer sweeps on open)
  }
  const std::vector<std::string> left = testing::KeysWithPrefix(store, kPiecesPrefix);
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0], PiecesKey(2, 0));
  EXPECT_EQ(left[1], PiecesKey(3, 0));
  EXPECT_TRUE(testing::KeysWithPrefix(store, kPendingPrefix).empty());
  auto r = testing::Reader(store);
  ASSERT_TRUE(r->ReadMetadata(2).ok());
}

EntryMetadata RowsEntry(int64_t rows, int64_t cols, const std::vector<std::pair<int64_t, int64_t>>& row_runs) {
  EntryMetadata e;
  e.fqn = "e";
  e.kind = EntryKind::kShardedTensor;
  e.dtype = DType::kU8;
  e.shape = {rows, cols};
  for (const auto& [first, n] : row_runs) {
    StoredPiece p;
    p.offsets = {first, 0};
    p.sizes = {n, cols};
    p.nbytes = static_cast<uint64_t>(n * cols);
    e.pieces.push_back(p);
  }
  return e;
}

// GridOf takes only pieces that are each one cell of a regular grid, all of
// them, over kGridMinPieces cells or more; GridCellsMeeting gives the cells
// a region meets.
TEST(PiecesGrid, OnlyARegularTilingIsAGrid) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t r = 0; r < 301; r += 4) runs.push_back({r, std::min<int64_t>(4, 301 - r)});  // 76 cells, the last of 1 row
  std::mt19937 rng(1);
  std::shuffle(runs.begin(), runs.end(), rng);
  const EntryMetadata e = RowsEntry(301, 5, runs);
  std::optional<PiecesGrid> grid = GridOf(e);
  ASSERT_TRUE(grid.has_value());
  EXPECT_EQ(grid->block, (std::vector<int64_t>{4, 5}));
  ASSERT_EQ(grid->piece_of_cell.size(), 76u);
  for (uint32_t c = 0; c < 76; ++c) EXPECT_EQ(e.pieces[grid->piece_of_cell[c]].offsets[0], 4 * c);
  EXPECT_EQ(GridCells({301, 5}, {4, 5}), 76u);
  EXPECT_EQ(GridCells({301, 5}, {0, 5}), 0u);
  EXPECT_EQ(GridCells({301, 5}, {4, 6}), 0u);
  const PiecesPage last = GridCellPage({301, 5}, {4, 5}, 75);
  EXPECT_EQ(last.offsets, (std::vector<int64_t>{300, 0}));
  EXPECT_EQ(last.sizes, (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(GridCellsMeeting({301, 5}, {4, 5}, {EntryRegion{"e", {5, 1}, {4, 2}}}), (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(GridCellsMeeting({301, 5}, {4, 5}, {EntryRegion{"e", {5, 1}, {0, 2}}}), (std::vector<uint32_t>{}));
  EXPECT_EQ(GridCellsMeeting({9, 9}, {2, 3}, {EntryRegion{"e", {3, 2}, {2, 2}}}),
            (std::vector<uint32_t>{3, 4, 6, 7}));  // rows of cells 1-2, columns 0-1 (3 cells a row)

  // Not grids: a piece in the middle of two rows (and the one after it
  // shifted), a cell missing, fewer than kGridMinPieces pieces.
  std::vector<std::pair<int64_t, int64_t>> odd;
  for (int64_t r = 0; r < 100; ++r) odd.push_back({r, 1});
  odd[50] = {50, 2};
  odd.erase(odd.begin() + 51);
  EXPECT_FALSE(GridOf(RowsEntry(100, 5, odd)).has_value());
  std::vector<std::pair<int64_t, int64_t>> gap;
  for (int64_t r = 0; r < 100; ++r) {
    if (r != 40) gap.push_back({r, 1});
  }
  EXPECT_FALSE(GridOf(RowsEntry(100, 5, gap)).has_value());
  std::vector<std::pair<int64_t, int64_t>> few;
  for (int64_t r = 0; r < 8; ++r) few.push_back({r, 1});
  EXPECT_FALSE(GridOf(RowsEntry(8, 5, few)).has_value());
  few.push_back({8, 1});
  EXPECT_TRUE(GridOf(RowsEntry(9, 5, few)).has_value());
}

// A step record whose grid does not fit the entry's shape, has another
// number of cells than the record's piece count, or comes with pages too is
// DataLoss naming the entry.
TEST(PiecesGrid, ARecordWithABadGridIsRefused) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t r = 0; r < 100; ++r) runs.push_back({r, 1});
  StepMetadata m;
  m.step = 3;
  m.world_size = 1;
  m.save_id = 9;
  m.entries.push_back(RowsEntry(100, 5, runs));
  const std::vector<std::optional<PiecesGrid>> grids = GridsOf(m);
  const std::string good = EncodeMetadataRecord(m, /*paged=*/true, &grids);
  ASSERT_TRUE(DecodeMetadataRecord(good).ok()) << DecodeMetadataRecord(good).status();
  auto with = [&](const std::function<void(proto::Entry*)>& change) {
    proto::Metadata pm;
    EXPECT_TRUE(pm.ParseFromString(DecodeChunkToString(good).value()));
    EXPECT_EQ(pm.entries(0).grid_size(), 2);
    change(pm.mutable_entries(0));
    const std::string raw = pm.SerializeAsString();
    std::string value;
    EncodeChunk(raw.data(), raw.size(), Compression::kNone, 1, &value);
    return DecodeMetadataRecord(value).status();
  };
  Status st = with([](proto::Entry* e) { e->set_grid(1, 6); });
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("entry 'e' grid [1, 6] does not fit its shape"), std::string::npos) << st;
  st = with([](proto::Entry* e) { e->set_grid(0, 2); });
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("entry 'e' grid [2, 5] has 50 cells; the record says 100 pieces"), std::string::npos)
      << st;
  st = with([](proto::Entry* e) { e->add_pages()->set_pieces(64); });
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("entry 'e' has both a grid and pages"), std::string::npos) << st;
}

}  // namespace
}  // namespace ckptdb
