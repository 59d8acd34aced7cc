#include "model/chunk_grid.h"

#include <algorithm>

namespace ckptdb {

namespace {

uint64_t Numel(const std::vector<int64_t>& b) {
  uint64_t n = 1;
  for (int64_t s : b) n *= static_cast<uint64_t>(s);
  return n;
}

}  // namespace

std::vector<int64_t> ChooseChunkShape(const std::vector<int64_t>& sizes, size_t elem_size, uint64_t chunk_bytes) {
  const size_t n = sizes.size();
  if (n < 2 || elem_size == 0) return {};
  for (int64_t s : sizes) {
    if (s <= 0) return {};
  }
  const uint64_t budget = std::max<uint64_t>(1, chunk_bytes / elem_size);
  if (Numel(sizes) <= budget) return {};
  const int64_t min_inner = static_cast<int64_t>(std::max<uint64_t>(1, chunk_bytes / 2048 / elem_size));
  const int64_t largest = *std::max_element(sizes.begin(), sizes.end());
  // Every extent t (capped by its dimension), the innermost at least
  // min_inner: the largest power of two t whose box fits the budget.
  auto box_for = [&](int64_t t) {
    std::vector<int64_t> b(n);
    for (size_t d = 0; d < n; ++d) b[d] = std::min(sizes[d], t);
    b[n - 1] = std::min(sizes[n - 1], std::max(t, min_inner));
    return b;
  };
  int64_t t = 1;
  while (t < largest && Numel(box_for(t * 2)) <= budget) t *= 2;
  std::vector<int64_t> b = box_for(t);
  // What the budget still allows: double extents once, innermost first
  // (longer runs of memory).
  for (size_t d = n; d-- > 0;) {
    if (b[d] >= sizes[d]) continue;
    const int64_t was = b[d];
    b[d] = std::min(sizes[d], was * 2);
    if (Numel(b) > budget) b[d] = was;
  }
  for (size_t d = 1; d < n; ++d) {
    if (b[d] < sizes[d]) return b;
  }
  return {};  // whole rows: a 1-d chunk is the same run
}

ChunkGrid::ChunkGrid(const Box& piece, const std::vector<int64_t>& chunk_shape) : piece_(piece), shape_(chunk_shape) {
  counts_.resize(shape_.size());
  for (size_t d = 0; d < shape_.size(); ++d) {
    counts_[d] = (piece_.sizes[d] + shape_[d] - 1) / shape_[d];
    num_chunks_ *= static_cast<uint64_t>(counts_[d]);
  }
}

Box ChunkGrid::ChunkBox(uint64_t c) const {
  const size_t n = shape_.size();
  Box b{std::vector<int64_t>(n), std::vector<int64_t>(n)};
  for (size_t d = n; d-- > 0;) {
    const int64_t i = static_cast<int64_t>(c % static_cast<uint64_t>(counts_[d]));
    c /= static_cast<uint64_t>(counts_[d]);
    b.offsets[d] = piece_.offsets[d] + i * shape_[d];
    b.sizes[d] = std::min(shape_[d], piece_.sizes[d] - i * shape_[d]);
  }
  return b;
}

void ChunkGrid::ForEachChunkMeeting(const Box& region, const std::function<void(uint64_t)>& fn) const {
  Box r;
  if (num_chunks_ == 0 || !Intersect(region, piece_, &r)) return;
  const size_t n = shape_.size();
  std::vector<int64_t> lo(n), hi(n);
  for (size_t d = 0; d < n; ++d) {
    lo[d] = (r.offsets[d] - piece_.offsets[d]) / shape_[d];
    hi[d] = (r.offsets[d] + r.sizes[d] - 1 - piece_.offsets[d]) / shape_[d];
  }
  std::vector<int64_t> idx(lo);
  while (true) {
    uint64_t c = 0;
    for (size_t d = 0; d < n; ++d) c = c * static_cast<uint64_t>(counts_[d]) + static_cast<uint64_t>(idx[d]);
    fn(c);
    size_t d = n;
    while (d > 0) {
      --d;
      if (++idx[d] <= hi[d]) break;
      idx[d] = lo[d];
      if (d == 0) return;
    }
    if (n == 0) return;
  }
}

}  // namespace ckptdb
