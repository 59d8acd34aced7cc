#include "model/region.h"
#include "model/box_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace ckptdb {
namespace {

// Element-by-element reference for CopyRegionWindow.
void NaiveCopy(const Box& src, const std::vector<int32_t>& s, const Box& dst, std::vector<int32_t>* d, const Box& r) {
  const size_t n = r.sizes.size();
  std::vector<int64_t> idx(r.offsets);
  if (BoxNumel(r) == 0) return;
  while (true) {
    int64_t si = 0, di = 0;
    for (size_t k = 0; k < n; ++k) {
      si = si * src.sizes[k] + (idx[k] - src.offsets[k]);
      di = di * dst.sizes[k] + (idx[k] - dst.offsets[k]);
    }
    (*d)[di] = s[si];
    size_t k = n;
    while (k > 0) {
      --k;
      if (++idx[k] < r.offsets[k] + r.sizes[k]) break;
      idx[k] = r.offsets[k];
      if (k == 0) return;
    }
    if (n == 0) return;
  }
}

Box RandomBox(std::mt19937& rng, const std::vector<int64_t>& shape) {
  Box b;
  for (int64_t d : shape) {
    int64_t lo = std::uniform_int_distribution<int64_t>(0, d - 1)(rng);
    int64_t hi = std::uniform_int_distribution<int64_t>(lo + 1, d)(rng);
    b.offsets.push_back(lo);
    b.sizes.push_back(hi - lo);
  }
  return b;
}

TEST(Region, WindowedCopiesMatchElementwiseCopyOnRandomBoxes) {
  std::mt19937 rng(42);
  for (int iter = 0; iter < 3000; ++iter) {
    int dims = 1 + iter % 4;
    std::vector<int64_t> shape;
    for (int i = 0; i < dims; ++i) shape.push_back(1 + rng() % 7);
    Box a = RandomBox(rng, shape), b = RandomBox(rng, shape), r;
    if (iter % 5 == 0) b = a;  // identical boxes fold into one run
    if (!Intersect(a, b, &r)) continue;
    std::vector<int32_t> src(BoxNumel(a));
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<int32_t>(i * 7 + 1);
    std::vector<int32_t> want(BoxNumel(b), -1), got(BoxNumel(b), -1);
    NaiveCopy(a, src, b, &want, r);
    // Only the byte span is read, cut into windows at random element
    // boundaries, as a load scatters chunk after chunk.
    uint64_t begin, end;
    ByteSpan(a, r, 4, &begin, &end);
    const char* bytes = reinterpret_cast<const char*>(src.data());
    for (uint64_t w = begin; w < end;) {
      uint64_t len = 4 * (1 + rng() % 9);
      len = std::min(len, end - w);
      std::vector<char> window(bytes + w, bytes + w + len);
      CopyRegionWindow(a, window.data(), w, len, DType::kI32, b, got.data(), DType::kI32, r);
      w += len;
    }
    ASSERT_EQ(got, want) << "src " << BoxToString(a) << " dst " << BoxToString(b) << " region " << BoxToString(r);
  }
}

// Where a box's rows lie in a larger box: runs at one stride, or false.
TEST(Region, RunsOfBoxSayWhereEachRowLies) {
  uint64_t begin = 0, run = 0, stride = 0;
  // A tile of a matrix: rows of the tile, a row of the matrix apart.
  ASSERT_TRUE(RunsOfBox(Box{{0, 0}, {8, 16}}, Box{{2, 4}, {3, 5}}, 4, &begin, &run, &stride));
  EXPECT_EQ(begin, (2u * 16 + 4) * 4);
  EXPECT_EQ(run, 5u * 4);
  EXPECT_EQ(stride, 16u * 4);
  // Whole rows: one run.
  ASSERT_TRUE(RunsOfBox(Box{{0, 0}, {8, 16}}, Box{{2, 0}, {3, 16}}, 4, &begin, &run, &stride));
  EXPECT_EQ(begin, 2u * 16 * 4);
  EXPECT_EQ(run, 3u * 16 * 4);
  EXPECT_EQ(stride, run);
  // 3-d: the last dimension whole, one step along the first.
  ASSERT_TRUE(RunsOfBox(Box{{0, 0, 0}, {2, 3, 4}}, Box{{0, 1, 0}, {2, 1, 4}}, 2, &begin, &run, &stride));
  EXPECT_EQ(begin, 4u * 2);
  EXPECT_EQ(run, 4u * 2);
  EXPECT_EQ(stride, 12u * 2);
  // 3-d: a one-element first dimension, steps along the second.
  ASSERT_TRUE(RunsOfBox(Box{{0, 0, 0}, {4, 4, 4}}, Box{{1, 1, 1}, {1, 2, 2}}, 1, &begin, &run, &stride));
  EXPECT_EQ(begin, 16u + 4 + 1);
  EXPECT_EQ(run, 2u);
  EXPECT_EQ(stride, 4u);
  // 3-d: the last two whole in the first's steps.
  ASSERT_TRUE(RunsOfBox(Box{{0, 0, 0}, {4, 4, 4}}, Box{{0, 1, 0}, {4, 3, 4}}, 1, &begin, &run, &stride));
  EXPECT_EQ(begin, 4u);
  EXPECT_EQ(run, 12u);
  EXPECT_EQ(stride, 16u);
  // Steps along two dimensions: no one stride.
  EXPECT_FALSE(RunsOfBox(Box{{0, 0, 0}, {4, 4, 4}}, Box{{0, 0, 0}, {2, 2, 2}}, 1, &begin, &run, &stride));
  EXPECT_FALSE(RunsOfBox(Box{{0, 0, 0}, {2, 3, 4}}, Box{{0, 0, 0}, {2, 3, 2}}, 1, &begin, &run, &stride));
  // Empty: false.
  EXPECT_FALSE(RunsOfBox(Box{{0, 0}, {8, 16}}, Box{{2, 4}, {0, 5}}, 4, &begin, &run, &stride));
}

TEST(Region, ByteSpanOfRowsIsContiguous) {
  Box shard{{0, 0}, {10, 20}};
  Box rows{{3, 0}, {2, 20}};
  uint64_t b, e;
  ByteSpan(shard, rows, 4, &b, &e);
  EXPECT_EQ(b, 3u * 20 * 4);
  EXPECT_EQ(e, 5u * 20 * 4);
  Box col{{0, 5}, {10, 1}};
  ByteSpan(shard, col, 4, &b, &e);
  EXPECT_EQ(b, 5u * 4);
  EXPECT_EQ(e, (9u * 20 + 6) * 4);
}

TEST(Region, ScalarBox) {
  Box s{{}, {}};
  Box r;
  ASSERT_TRUE(Intersect(s, s, &r));
  EXPECT_EQ(BoxNumel(r), 1);
  int32_t v = 5, out = 0;
  CopyRegionWindow(s, &v, 0, 4, DType::kI32, s, &out, DType::kI32, r);
  EXPECT_EQ(out, 5);
}

TEST(Region, CheckBoxWithin) {
  EXPECT_TRUE(CheckBoxWithin(Box{{0, 0}, {2, 3}}, {2, 3}).ok());
  EXPECT_FALSE(CheckBoxWithin(Box{{1, 0}, {2, 3}}, {2, 3}).ok());
  EXPECT_FALSE(CheckBoxWithin(Box{{0}, {2}}, {2, 3}).ok());
  EXPECT_FALSE(CheckBoxWithin(Box{{-1, 0}, {1, 3}}, {2, 3}).ok());
}

}  // namespace
// The index finds exactly the boxes a query meets, and the overlapping
// pair finder agrees with trying every pair, on random boxes.
TEST(BoxIndex, FindsWhatTryingEveryBoxFinds) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 400; ++iter) {
    const int dims = iter % 4;  // 0-d included
    std::vector<int64_t> shape;
    for (int i = 0; i < dims; ++i) shape.push_back(1 + rng() % 9);
    std::vector<Box> boxes;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) boxes.push_back(RandomBox(rng, shape));
    std::vector<const Box*> ptrs;
    for (const Box& b : boxes) ptrs.push_back(&b);
    BoxIndex index(ptrs);
    const Box query = RandomBox(rng, shape);
    std::vector<size_t> got, want;
    index.ForEachOverlap(query, [&](size_t i) { got.push_back(i); });
    for (size_t k = 0; k < boxes.size(); ++k) {
      if (BoxesOverlap(boxes[k], query)) want.push_back(k);
    }
    std::sort(got.begin(), got.end());
    ASSERT_EQ(got, want) << "query " << BoxToString(query);
    bool any = false;
    for (size_t a = 0; a < boxes.size() && !any; ++a) {
      for (size_t b = a + 1; b < boxes.size() && !any; ++b) any = BoxesOverlap(boxes[a], boxes[b]);
    }
    size_t a = 0, b = 0;
    ASSERT_EQ(FindOverlappingPair(ptrs, &a, &b), any);
    if (any) {
      EXPECT_LT(a, b);
      EXPECT_TRUE(BoxesOverlap(boxes[a], boxes[b]));
    }
  }
}

// Pieces cut along one dimension (rows of ranks, columns, with empty pieces
// among them) are found disjoint, and one piece moved by one element onto
// its neighbour is found as the overlapping pair, in any order of pieces.
TEST(BoxIndex, FindsTheOneOverlapAmongPiecesCutAlongADimension) {
  std::mt19937 rng(11);
  for (int iter = 0; iter < 200; ++iter) {
    const size_t dim = iter % 3;
    const int n = 2 + static_cast<int>(rng() % 40);
    std::vector<Box> boxes;
    int64_t at = 0;
    for (int k = 0; k < n; ++k) {
      const int64_t len = static_cast<int64_t>(rng() % 4);  // 0: an empty piece
      Box b{{0, 0, 0}, {5, 6, 7}};
      b.offsets[dim] = at;
      b.sizes[dim] = len;
      boxes.push_back(b);
      at += len;
    }
    std::shuffle(boxes.begin(), boxes.end(), rng);
    std::vector<const Box*> ptrs;
    for (const Box& b : boxes) ptrs.push_back(&b);
    size_t a = 0, b = 0;
    ASSERT_FALSE(FindOverlappingPair(ptrs, &a, &b)) << iter;
    // Move one non-empty piece that has a non-empty piece before it back by one.
    std::vector<size_t> movable;
    for (size_t k = 0; k < boxes.size(); ++k) {
      if (boxes[k].sizes[dim] == 0 || boxes[k].offsets[dim] == 0) continue;
      for (const Box& other : boxes) {
        if (other.sizes[dim] > 0 && other.offsets[dim] + other.sizes[dim] == boxes[k].offsets[dim]) movable.push_back(k);
      }
    }
    if (movable.empty()) continue;
    const size_t moved = movable[rng() % movable.size()];
    boxes[moved].offsets[dim] -= 1;
    ASSERT_TRUE(FindOverlappingPair(ptrs, &a, &b)) << iter;
    EXPECT_LT(a, b);
    EXPECT_TRUE(BoxesOverlap(boxes[a], boxes[b]));
    EXPECT_TRUE(a == moved || b == moved);
  }
}

}  // namespace ckptdb
