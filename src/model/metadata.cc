#include "ckptdb/metadata.h"

#include <algorithm>

namespace ckptdb {

ChunkLocation StoredPiece::LocateChunk(int64_t step, uint64_t save_id, uint32_t c) const {
  // The last reference starting at or before c, if it covers c.
  auto it = std::upper_bound(references.begin(), references.end(), c,
                             [](uint32_t v, const ChunkReference& r) { return v < r.first; });
  if (it != references.begin()) {
    const ChunkReference& r = *std::prev(it);
    if (c - r.first < r.count) return ChunkLocation{r.step, r.save_id, r.key, r.chunk + (c - r.first)};
  }
  return ChunkLocation{step, save_id, key, c};
}

uint64_t StoredPiece::referenced_chunks() const {
  uint64_t n = 0;
  for (const ChunkReference& r : references) n += r.count;
  return n;
}

uint64_t EntryMetadata::logical_bytes() const {
  uint64_t n = 0;
  for (const StoredPiece& p : pieces) n += p.nbytes;
  return n;
}

uint64_t EntryMetadata::stored_bytes() const {
  uint64_t n = 0;
  for (const StoredPiece& p : pieces) n += p.stored_bytes;
  return n;
}

const EntryMetadata* StepMetadata::Find(const std::string& fqn) const {
  for (const EntryMetadata& e : entries) {
    if (e.fqn == fqn) return &e;
  }
  return nullptr;
}

uint64_t StepMetadata::logical_bytes() const {
  uint64_t n = 0;
  for (const EntryMetadata& e : entries) n += e.logical_bytes();
  return n;
}

uint64_t StepMetadata::stored_bytes() const {
  uint64_t n = 0;
  for (const EntryMetadata& e : entries) n += e.stored_bytes();
  return n;
}

}  // namespace ckptdb
