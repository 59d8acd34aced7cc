#include "ckptdb/metadata.h"

#include <algorithm>
#include <cmath>

#include "model/chunk_grid.h"

namespace ckptdb {

Status ValidateMetricName(const std::string& name) {
  if (name.empty() || name.size() > 128) {
    return Status::InvalidArgument("metric name '" + name + "' must be 1 to 128 characters");
  }
  for (unsigned char c : name) {
    if (c <= ' ' || c == 0x7f) {
      return Status::InvalidArgument("metric name '" + name + "' holds whitespace or a control character");
    }
  }
  return Status::OK();
}

Status ValidateMetricsAndNote(const std::map<std::string, double>& metrics, const std::string& note) {
  for (const auto& [name, value] : metrics) {
    if (Status st = ValidateMetricName(name); !st.ok()) return st;
    if (!std::isfinite(value)) {
      return Status::InvalidArgument("metric '" + name + "' is " + std::to_string(value) + "; it must be finite");
    }
  }
  if (note.size() > kMaxNoteBytes) {
    return Status::InvalidArgument("the step's note is " + std::to_string(note.size()) + " bytes; at most " +
                                   std::to_string(kMaxNoteBytes) + " are stored");
  }
  return Status::OK();
}

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

uint64_t StoredPiece::chunk_raw_bytes(uint32_t c) const {
  if (chunk_shape.empty()) {
    const uint64_t begin = uint64_t{c} * chunk_bytes;
    return nbytes - begin < chunk_bytes ? nbytes - begin : chunk_bytes;
  }
  uint64_t numel = 1;
  for (int64_t s : sizes) numel *= static_cast<uint64_t>(s);
  const uint64_t elem = numel == 0 ? 0 : nbytes / numel;
  return static_cast<uint64_t>(BoxNumel(ChunkGrid(Box{offsets, sizes}, chunk_shape).ChunkBox(c))) * elem;
}

void StoredPiece::chunk_region(uint32_t c, std::vector<int64_t>* region_offsets,
                               std::vector<int64_t>* region_sizes) const {
  Box b = ChunkGrid(Box{offsets, sizes}, chunk_shape).ChunkBox(c);
  *region_offsets = std::move(b.offsets);
  *region_sizes = std::move(b.sizes);
}

uint64_t StoredPiece::referenced_chunks() const {
  uint64_t n = 0;
  for (const ChunkReference& r : references) n += r.count;
  return n;
}

const char* BytesEncodingName(BytesEncoding encoding) {
  switch (encoding) {
    case BytesEncoding::kUnrecorded: return "unrecorded";
    case BytesEncoding::kRaw: return "raw";
    case BytesEncoding::kPickle: return "pickle";
    case BytesEncoding::kTorchSave: return "torch_save";
  }
  return "unknown";
}

uint64_t EntryMetadata::logical_bytes() const {
  if (pieces_omitted || pieces_partial) {
    const StatusOr<int64_t> numel = NumElements(shape);  // (validated with the record)
    return numel.ok() ? static_cast<uint64_t>(*numel) * DTypeSize(dtype) : 0;
  }
  uint64_t n = 0;
  for (const StoredPiece& p : pieces) n += p.nbytes;
  return n;
}

std::optional<PieceTotals> EntryMetadata::totals() const {
  if (pieces_omitted || pieces_partial) return recorded_totals;
  return PieceTotals{pieces.size(), stored_bytes()};
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
