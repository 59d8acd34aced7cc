#include "model/box_index.h"

#include <algorithm>
#include <set>

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
  for (size_t d = 0; d < rank; ++d) {
    std::set<int64_t> starts;
    for (const Box* b : boxes_) starts.insert(b->offsets[d]);
    if (starts.size() > best) {
      best = starts.size();
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

bool FindOverlappingPair(const std::vector<const Box*>& boxes, size_t* first, size_t* second) {
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
