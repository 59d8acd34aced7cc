#include "model/box_index.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

namespace ckptdb {

bool BoxesMeet(const Box& a, const Box& b) {
  if (a.sizes.size() != b.sizes.size()) return false;
  for (size_t d = 0; d < a.sizes.size(); ++d) {
    const int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    const int64_t hi = std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]);
    if (hi <= lo) return false;
  }
  return true;
}

BoxIndex::BoxIndex(const std::vector<const Box*>& boxes) : boxes_(boxes) {
  const size_t rank = boxes_.empty() ? 0 : boxes_.front()->sizes.size();
  size_t best = 0;
  std::vector<int64_t> starts(boxes_.size());
  for (size_t d = 0; d < rank; ++d) {
    for (size_t i = 0; i < boxes_.size(); ++i) starts[i] = boxes_[i]->offsets[d];
    std::sort(starts.begin(), starts.end());
    const size_t distinct = static_cast<size_t>(std::unique(starts.begin(), starts.end()) - starts.begin());
    if (distinct > best) {
      best = distinct;
      dim_ = d;
    }
  }
  order_.resize(boxes_.size());
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
  if (rank == 0) return;
  std::sort(order_.begin(), order_.end(),
            [&](size_t a, size_t b) { return boxes_[a]->offsets[dim_] < boxes_[b]->offsets[dim_]; });
  starts_.reserve(order_.size());
  for (size_t i : order_) {
    starts_.push_back(boxes_[i]->offsets[dim_]);
    longest_ = std::max(longest_, boxes_[i]->sizes[dim_]);
  }
}

void BoxIndex::ForEachOverlap(const Box& query, const std::function<void(size_t)>& fn) const {
  if (query.sizes.empty()) {  // 0-d: every 0-d box meets it
    for (size_t i : order_) {
      if (boxes_[i]->sizes.empty()) fn(i);
    }
    return;
  }
  if (query.sizes.size() <= dim_) return;
  const int64_t lo = query.offsets[dim_], hi = lo + query.sizes[dim_];
  auto first = std::lower_bound(starts_.begin(), starts_.end(), lo - longest_);
  auto last = std::lower_bound(starts_.begin(), starts_.end(), hi);
  for (auto it = first; it != last; ++it) {
    const size_t i = order_[static_cast<size_t>(it - starts_.begin())];
    if (BoxesMeet(*boxes_[i], query)) fn(i);
  }
}

PieceBoxes::PieceBoxes(const EntryMetadata& saved) {
  boxes.reserve(saved.pieces.size());
  for (const StoredPiece& p : saved.pieces) boxes.push_back(Box{p.offsets, p.sizes});
  std::vector<const Box*> ptrs;
  ptrs.reserve(boxes.size());
  for (const Box& b : boxes) ptrs.push_back(&b);
  index = std::make_unique<BoxIndex>(ptrs);
}

namespace {

// Whether the boxes (all of one rank >= 1) are disjoint along dimension `d`
// alone: sorted by their start along it, each starts at or after the end of
// every box before it. Pieces cut along one dimension (rows of ranks,
// columns) are, and then no pair can overlap.
bool DisjointAlong(const std::vector<const Box*>& boxes, size_t d, std::vector<size_t>* order) {
  std::iota(order->begin(), order->end(), size_t{0});
  std::sort(order->begin(), order->end(),
            [&](size_t a, size_t b) { return boxes[a]->offsets[d] < boxes[b]->offsets[d]; });
  int64_t end = INT64_MIN;
  for (size_t i : *order) {
    const Box& b = *boxes[i];
    if (b.sizes[d] == 0) continue;  // holds no element
    if (b.offsets[d] < end) return false;
    end = b.offsets[d] + b.sizes[d];
  }
  return true;
}

}  // namespace

bool FindOverlappingPair(const std::vector<const Box*>& boxes, size_t* first, size_t* second) {
  const size_t rank = boxes.empty() ? 0 : boxes.front()->sizes.size();
  const bool one_rank = std::all_of(boxes.begin(), boxes.end(), [&](const Box* b) {
    return b->sizes.size() == rank && b->offsets.size() == rank;
  });
  if (one_rank && rank > 0) {
    std::vector<size_t> order(boxes.size());
    for (size_t d = 0; d < rank; ++d) {
      if (DisjointAlong(boxes, d, &order)) return false;
    }
  }
  BoxIndex index(boxes);
  for (size_t i = 0; i < boxes.size(); ++i) {
    bool found = false;
    size_t other = 0;
    index.ForEachOverlap(*boxes[i], [&](size_t j) {
      if (!found && j != i) {
        found = true;
        other = j;
      }
    });
    if (found) {
      *first = std::min(i, other);
      *second = std::max(i, other);
      return true;
    }
  }
  return false;
}

}  // namespace ckptdb
