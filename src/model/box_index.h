// Finding which of many boxes meet a given box without trying every one: a
// step may hold tens of thousands of shards of one entry, and pairing every
// shard with every other (validation) or every target region with every
// shard (load planning) grew quadratically.
#ifndef CKPTDB_SRC_BOX_INDEX_H_
#define CKPTDB_SRC_BOX_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ckptdb/metadata.h"
#include "model/region.h"

namespace ckptdb {

// An index over boxes of one rank (the boxes are not copied: they must
// outlive the index). It sorts the boxes by their start along the dimension
// where they start at the most distinct places and keeps the longest extent
// there, so a query looks only at the boxes whose start lies within
// [query start - longest extent, query end) along it: for shards that split
// a tensor along some dimension, a handful per query.
class BoxIndex {
 public:
  explicit BoxIndex(const std::vector<const Box*>& boxes);

  // Calls fn(i) for every box i (an index into the constructor's vector)
  // that holds at least one element of `query`, in increasing order of
  // start along the index's dimension. Empty boxes meet nothing.
  void ForEachOverlap(const Box& query, const std::function<void(size_t)>& fn) const;

 private:
  const std::vector<const Box*> boxes_;
  size_t dim_ = 0;                 // the dimension sorted along
  std::vector<size_t> order_;      // box indices by start along dim_
  std::vector<int64_t> starts_;    // their starts, for binary search
  int64_t longest_ = 0;            // the largest size along dim_
};

// The boxes of a saved entry's pieces (copied out: a piece keeps its
// offsets and sizes apart) with an index over them: which pieces a region
// meets, for load planning and for the pieces a rank's load is sent.
struct PieceBoxes {
  explicit PieceBoxes(const EntryMetadata& saved);
  std::vector<Box> boxes;  // boxes[i]: piece i's
  std::unique_ptr<BoxIndex> index;
};

// Whether two boxes hold a common element, without allocating (same rank).
bool BoxesMeet(const Box& a, const Box& b);

// Two of `boxes` (same rank) that overlap, as indices first < second, or
// false when they are pairwise disjoint. O(n log n) plus the candidates the
// index yields.
bool FindOverlappingPair(const std::vector<const Box*>& boxes, size_t* first, size_t* second);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_BOX_INDEX_H_
