// Chunks as n-d boxes: the shapes chosen for typical tensors, and the grid's
// arithmetic against brute force.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "model/chunk_grid.h"

namespace ckptdb {
namespace {

using Shape = std::vector<int64_t>;

TEST(ChooseChunkShape, BoxesWhereRowsWouldMakeColumnReadsReadEverything) {
  constexpr uint64_t k4MiB = 4u << 20;
  // A square f32 matrix: 1024 x 1024 boxes (4 MiB), runs of 4 KiB.
  EXPECT_EQ(ChooseChunkShape({8192, 8192}, 4, k4MiB), (Shape{1024, 1024}));
  // bf16: the innermost extent doubled first (longer runs), within 2x.
  EXPECT_EQ(ChooseChunkShape({4096, 4096}, 2, k4MiB), (Shape{1024, 2048}));
  // Extents need not divide the dimension: the last boxes are clipped.
  EXPECT_EQ(ChooseChunkShape({11008, 4096}, 4, k4MiB), (Shape{1024, 1024}));
  // 3-d: balanced over the dimensions the budget cuts.
  EXPECT_EQ(ChooseChunkShape({64, 512, 512}, 4, k4MiB), (Shape{32, 64, 512}));
  // The innermost extent keeps chunk_bytes / 2048 bytes (2 KiB): a narrow
  // box would copy in short runs.
  EXPECT_EQ(ChooseChunkShape({1 << 20, 8192}, 1, k4MiB), (Shape{2048, 2048}));
}

TEST(ChooseChunkShape, RowsWhereBoxesWouldBeWholeRowsOrThereIsOneChunk) {
  constexpr uint64_t k4MiB = 4u << 20;
  EXPECT_TRUE(ChooseChunkShape({1 << 24}, 4, k4MiB).empty());         // 1-d
  EXPECT_TRUE(ChooseChunkShape({}, 4, k4MiB).empty());                // 0-d
  EXPECT_TRUE(ChooseChunkShape({1024, 1024}, 4, k4MiB).empty());      // one chunk
  EXPECT_TRUE(ChooseChunkShape({4 << 20, 16}, 4, k4MiB).empty());     // narrow rows
  EXPECT_TRUE(ChooseChunkShape({50000, 768}, 4, k4MiB).empty());      // rows of 3 KiB
  EXPECT_TRUE(ChooseChunkShape({0, 8192}, 4, k4MiB).empty());         // empty
  EXPECT_TRUE(ChooseChunkShape({1 << 20, 4096}, 4, k4MiB).size() == 2);
}

TEST(ChooseChunkShape, EveryBoxFitsTheBudgetAndExtentsStayWithinTwice) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const size_t n = 2 + rng() % 3;
    Shape sizes(n);
    for (int64_t& s : sizes) s = 1 + static_cast<int64_t>(rng() % 3000);
    const size_t es = size_t{1} << (rng() % 4);
    const uint64_t chunk_bytes = uint64_t{16} << (rng() % 16);
    const Shape b = ChooseChunkShape(sizes, es, chunk_bytes);
    if (b.empty()) continue;
    SCOPED_TRACE(ShapeToString(sizes) + " es " + std::to_string(es) + " chunk " + std::to_string(chunk_bytes));
    ASSERT_EQ(b.size(), n);
    uint64_t numel = 1;
    bool cut_below_row = false;
    for (size_t d = 0; d < n; ++d) {
      ASSERT_GE(b[d], 1);
      ASSERT_LE(b[d], sizes[d]);
      numel *= static_cast<uint64_t>(b[d]);
      if (d > 0 && b[d] < sizes[d]) cut_below_row = true;
    }
    EXPECT_LE(numel * es, std::max<uint64_t>(chunk_bytes, es));
    EXPECT_TRUE(cut_below_row);
    // Dimensions cut by the budget (not by their own size) differ by at
    // most 2x, except the innermost, which may be held at its minimum run.
    int64_t lo = INT64_MAX, hi = 0;
    for (size_t d = 0; d + 1 < n; ++d) {
      if (b[d] < sizes[d]) {
        lo = std::min(lo, b[d]);
        hi = std::max(hi, b[d]);
      }
    }
    if (hi > 0) {
      EXPECT_LE(hi, 2 * lo);
    }
  }
}

// Every element of the piece lies in exactly one chunk; ForEachChunkMeeting
// names exactly the chunks that hold an element of the region, in order.
TEST(ChunkGrid, BoxesTileThePieceAndMeetingMatchesBruteForce) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = 1 + rng() % 3;
    Box piece{Shape(n), Shape(n)};
    Shape shape(n);
    for (size_t d = 0; d < n; ++d) {
      piece.offsets[d] = static_cast<int64_t>(rng() % 5);
      piece.sizes[d] = 1 + static_cast<int64_t>(rng() % 9);
      shape[d] = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(piece.sizes[d]));
    }
    const ChunkGrid grid(piece, shape);
    int64_t covered = 0;
    for (uint64_t c = 0; c < grid.num_chunks(); ++c) {
      const Box b = grid.ChunkBox(c);
      Box inside;
      ASSERT_TRUE(Intersect(b, piece, &inside));
      ASSERT_EQ(BoxNumel(inside), BoxNumel(b));
      for (uint64_t e = c + 1; e < grid.num_chunks(); ++e) ASSERT_FALSE(BoxesOverlap(b, grid.ChunkBox(e)));
      covered += BoxNumel(b);
    }
    ASSERT_EQ(covered, BoxNumel(piece));
    for (int q = 0; q < 10; ++q) {
      Box region{Shape(n), Shape(n)};
      for (size_t d = 0; d < n; ++d) {
        region.offsets[d] = piece.offsets[d] + static_cast<int64_t>(rng() % static_cast<uint64_t>(piece.sizes[d]));
        region.sizes[d] =
            1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(piece.offsets[d] + piece.sizes[d] - region.offsets[d]));
      }
      std::vector<uint64_t> want, got;
      for (uint64_t c = 0; c < grid.num_chunks(); ++c) {
        if (BoxesOverlap(grid.ChunkBox(c), region)) want.push_back(c);
      }
      grid.ForEachChunkMeeting(region, [&](uint64_t c) { got.push_back(c); });
      ASSERT_EQ(got, want) << BoxToString(region) << " in " << BoxToString(piece);
    }
  }
}

}  // namespace
}  // namespace ckptdb
