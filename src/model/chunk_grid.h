// Chunks as n-dimensional boxes (store format 4): how a piece is cut so that
// a load along any dimension reads about what it needs, and the arithmetic
// of the grid of boxes that results.
//
// A piece with 1-d chunks (StoredPiece::chunk_shape empty) is cut into runs
// of chunk_bytes of its row-major bytes; a column shard of such a piece reads
// every chunk. A piece with a chunk shape is cut into the boxes of a grid:
// chunk c is the box at position c of the grid (row-major over
// ceil(sizes[d] / chunk_shape[d]) boxes along each dimension d), clipped to
// the piece, and its raw bytes are that box's elements in row-major order.
#ifndef CKPTDB_SRC_CHUNK_GRID_H_
#define CKPTDB_SRC_CHUNK_GRID_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "model/region.h"

namespace ckptdb {

// The chunk shape for a piece of `sizes` with elements of elem_size bytes
// and chunks of at most chunk_bytes raw bytes; empty when 1-d chunks serve
// as well: a piece of fewer than 2 dimensions, one that fits one chunk, or
// one whose boxes would be whole rows anyway (a run of whole rows is what a
// 1-d chunk is). Otherwise every extent is a power of two (or the whole
// dimension), the extents differ by at most 2x where the piece allows it
// (a load along any dimension reads at most about twice what it needs once
// its shards are as wide as a box), and the innermost extent holds at least
// chunk_bytes / 2048 bytes (2 KiB for 4 MiB chunks), so that copies stay
// runs of memory.
std::vector<int64_t> ChooseChunkShape(const std::vector<int64_t>& sizes, size_t elem_size, uint64_t chunk_bytes);

// The grid of boxes of a piece cut by `chunk_shape`; boxes in the piece's
// (global) coordinates.
class ChunkGrid {
 public:
  // REQUIRES: chunk_shape has piece's rank, every extent >= 1.
  ChunkGrid(const Box& piece, const std::vector<int64_t>& chunk_shape);

  uint64_t num_chunks() const { return num_chunks_; }
  // The box of chunk c. REQUIRES: c < num_chunks().
  Box ChunkBox(uint64_t c) const;
  // Calls fn(c) for every chunk that holds an element of `region` (global
  // coordinates), in increasing c.
  void ForEachChunkMeeting(const Box& region, const std::function<void(uint64_t)>& fn) const;

 private:
  Box piece_;
  std::vector<int64_t> shape_;
  std::vector<int64_t> counts_;  // boxes along each dimension
  uint64_t num_chunks_ = 1;
};

}  // namespace ckptdb

#endif  // CKPTDB_SRC_CHUNK_GRID_H_
