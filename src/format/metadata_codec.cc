#include "format/metadata_codec.h"

#include <google/protobuf/arena.h>

#include <algorithm>
#include <optional>
#include <unordered_set>

#include "ckptdb/checkpoint.h"
#include "model/box_index.h"
#include "model/chunk_grid.h"
#include "format/chunk_codec.h"
#include "model/region.h"
#include "util/status_macros.h"

namespace ckptdb {

void ReferencesToProto(const std::vector<ChunkReference>& refs,
                       google::protobuf::RepeatedPtrField<proto::ChunkReference>* out) {
  out->Reserve(static_cast<int>(refs.size()));
  for (const ChunkReference& r : refs) {
    proto::ChunkReference* q = out->Add();
    q->set_first(r.first);
    q->set_count(r.count);
    q->set_step(r.step);
    q->set_save_id(r.save_id);
    q->mutable_key()->set_rank(r.key.rank);
    q->mutable_key()->set_item(r.key.item);
    q->set_chunk(r.chunk);
  }
}

std::vector<ChunkReference> ReferencesFromProto(
    const google::protobuf::RepeatedPtrField<proto::ChunkReference>& refs) {
  std::vector<ChunkReference> out;
  out.reserve(refs.size());
  for (const proto::ChunkReference& q : refs) {
    out.push_back(ChunkReference{q.first(), q.count(), q.step(), q.save_id(),
                                 StorageKey{q.key().rank(), q.key().item()}, q.chunk()});
  }
  return out;
}

// What a write records about a piece, the same fields in StoredPiece and
// WrittenItem (and in proto::Piece and proto::WrittenItem).
template <typename From, typename To>
void WrittenFieldsToProto(const From& w, To* q) {
  q->set_chunk_bytes(w.chunk_bytes);
  q->set_num_chunks(w.num_chunks);
  q->set_stored_bytes(w.stored_bytes);
  q->set_chunk_hashes(w.chunk_hashes);
  ReferencesToProto(w.references, q->mutable_references());
  q->set_encoding(w.encoding);
  for (int64_t s : w.chunk_shape) q->add_chunk_shape(s);
}

template <typename From, typename To>
void WrittenFieldsFromProto(const From& q, To* w) {
  w->chunk_bytes = q.chunk_bytes();
  w->num_chunks = q.num_chunks();
  w->stored_bytes = q.stored_bytes();
  w->chunk_hashes = q.chunk_hashes();
  w->references = ReferencesFromProto(q.references());
  w->encoding = q.encoding();
  w->chunk_shape.assign(q.chunk_shape().begin(), q.chunk_shape().end());
}

void ToProto(const StoredPiece& p, proto::Piece* q) {
  for (int64_t o : p.offsets) q->add_offsets(o);
  for (int64_t s : p.sizes) q->add_sizes(s);
  q->mutable_key()->set_rank(p.key.rank);
  q->mutable_key()->set_item(p.key.item);
  q->set_nbytes(p.nbytes);
  WrittenFieldsToProto(p, q);
}

StoredPiece FromProto(const proto::Piece& q) {
  StoredPiece p;
  p.offsets.assign(q.offsets().begin(), q.offsets().end());
  p.sizes.assign(q.sizes().begin(), q.sizes().end());
  p.key.rank = q.key().rank();
  p.key.item = q.key().item();
  p.nbytes = q.nbytes();
  WrittenFieldsFromProto(q, &p);
  return p;
}

void ToProto(const WrittenItem& w, proto::WrittenItem* q) {
  q->mutable_key()->set_rank(w.key.rank);
  q->mutable_key()->set_item(w.key.item);
  WrittenFieldsToProto(w, q);
}

void SetWrittenFields(const proto::WrittenItem& q, StoredPiece* p) { WrittenFieldsFromProto(q, p); }

void MoveWrittenFields(WrittenItem&& w, StoredPiece* p) {
  p->chunk_bytes = w.chunk_bytes;
  p->num_chunks = w.num_chunks;
  p->stored_bytes = w.stored_bytes;
  p->chunk_hashes = std::move(w.chunk_hashes);
  p->references = std::move(w.references);
  p->encoding = w.encoding;
  p->chunk_shape = std::move(w.chunk_shape);
}

void ToProto(const ReuseCandidate& c, proto::ReuseCandidate* q) {
  q->mutable_key()->set_rank(c.key.rank);
  q->mutable_key()->set_item(c.key.item);
  q->set_step(c.step);
  q->set_save_id(c.save_id);
  ToProto(c.piece, q->mutable_piece());
}

ReuseCandidate FromProto(const proto::ReuseCandidate& q) {
  return ReuseCandidate{StorageKey{q.key().rank(), q.key().item()}, q.step(), q.save_id(), FromProto(q.piece())};
}

namespace {

// An entry, with its pieces or without them (a format-6 M record).
void EntryToProto(const EntryMetadata& e, bool with_pieces, proto::Entry* out) {
  out->set_fqn(e.fqn);
  out->set_kind(static_cast<proto::EntryKind>(static_cast<int>(e.kind)));
  out->set_dtype(static_cast<proto::DType>(static_cast<int>(e.dtype)));
  for (int64_t d : e.shape) out->add_shape(d);
  if (with_pieces) {
    for (const StoredPiece& p : e.pieces) ToProto(p, out->add_pieces());
  } else if (const std::optional<PieceTotals> totals = e.totals()) {
    // What a listing shows of the pieces, so that it reads none of them.
    out->set_piece_count(totals->pieces);
    out->set_stored_bytes(totals->stored_bytes);
  }
  out->set_bytes_encoding(static_cast<proto::BytesEncoding>(static_cast<int>(e.bytes_encoding)));
}

void StepToProto(const StepMetadata& m, bool with_pieces, proto::Metadata* out) {
  out->set_format_version(m.format_version);
  out->set_step(m.step);
  out->set_created_unix_ms(m.created_unix_ms);
  out->set_world_size(m.world_size);
  out->set_save_id(m.save_id);
  out->set_coordinator_rank(m.coordinator_rank);
  for (const EntryMetadata& e : m.entries) EntryToProto(e, with_pieces, out->add_entries());
  for (const auto& [name, value] : m.metrics) (*out->mutable_metrics())[name] = value;
  out->set_note(m.note);
  for (const auto& [name, value] : m.annotations) (*out->mutable_annotations())[name] = value;
}

// A stored record: a raw chunk value (codec 0) of the serialized message.
std::string RecordValue(const google::protobuf::MessageLite& message) {
  std::string bytes;
  message.SerializeToString(&bytes);
  std::string value;
  EncodeChunk(bytes.data(), bytes.size(), Compression::kNone, 0, &value);
  return value;
}

}  // namespace

void ToProto(const EntryMetadata& e, proto::Entry* out) { EntryToProto(e, /*with_pieces=*/true, out); }

void ToProto(const StepMetadata& m, proto::Metadata* out) { StepToProto(m, /*with_pieces=*/true, out); }

StatusOr<EntryMetadata> FromProto(const proto::Entry& e) {
  EntryMetadata out;
  out.fqn = e.fqn();
  if (e.kind() < 1 || e.kind() > 3) {
    return Status::InvalidArgument("entry '" + e.fqn() + "' has unknown kind " + std::to_string(e.kind()));
  }
  out.kind = static_cast<EntryKind>(static_cast<int>(e.kind()));
  auto dt = DTypeFromNumber(e.dtype());
  if (!dt.ok()) return dt.status().WithContext("entry '" + e.fqn() + "'");
  out.dtype = *dt;
  out.shape.assign(e.shape().begin(), e.shape().end());
  out.pieces.reserve(static_cast<size_t>(e.pieces_size()));
  for (const proto::Piece& q : e.pieces()) out.pieces.push_back(FromProto(q));
  if (e.has_piece_count() && e.has_stored_bytes()) {
    out.recorded_totals = PieceTotals{e.piece_count(), e.stored_bytes()};
  }
  // A number this build does not know (a newer writer's) is kept: the bytes
  // still load, and the caller that decodes them says what it lacks.
  out.bytes_encoding = static_cast<BytesEncoding>(static_cast<int>(e.bytes_encoding()));
  return out;
}

StatusOr<StepMetadata> FromProto(const proto::Metadata& m) {
  StepMetadata out;
  out.format_version = m.format_version();
  out.step = m.step();
  out.created_unix_ms = m.created_unix_ms();
  out.world_size = m.world_size();
  out.save_id = m.save_id();
  out.coordinator_rank = m.coordinator_rank();
  out.entries.reserve(m.entries_size());
  for (const proto::Entry& e : m.entries()) {
    auto em = FromProto(e);
    if (!em.ok()) return em.status();
    out.entries.push_back(std::move(em).value());
  }
  out.metrics.insert(m.metrics().begin(), m.metrics().end());
  out.note = m.note();
  out.annotations.insert(m.annotations().begin(), m.annotations().end());
  return out;
}

namespace {

Status ValidatePiece(const EntryMetadata& e, size_t index, const StoredPiece& p, bool check_storage) {
  // (Messages are built only for a piece that fails: a step of thousands of
  // ranks validates millions.)
  const auto where = [&] { return "entry '" + e.fqn + "' piece " + std::to_string(index); };
  const auto box = [&] { return Box{p.offsets, p.sizes}; };
  // Within the shape, checked in place; what fails here is judged (and
  // described) by CheckBoxWithin.
  bool within = p.offsets.size() == e.shape.size() && p.sizes.size() == e.shape.size();
  for (size_t d = 0; within && d < e.shape.size(); ++d) {
    within = p.offsets[d] >= 0 && p.sizes[d] >= 0 && p.offsets[d] <= e.shape[d] &&
             p.sizes[d] <= e.shape[d] - p.offsets[d];
  }
  if (!within) {
    Status st = CheckBoxWithin(box(), e.shape);
    if (!st.ok()) return st.WithContext(where());
  }
  uint64_t numel = 1;
  for (int64_t z : p.sizes) numel *= static_cast<uint64_t>(z);
  uint64_t expect = numel * DTypeSize(e.dtype);
  if (p.nbytes != expect) {
    return Status::InvalidArgument(where() + " records " + std::to_string(p.nbytes) + " bytes, its region " +
                                   BoxToString(box()) + " holds " + std::to_string(expect));
  }
  if (!check_storage) return Status::OK();
  if (p.nbytes > 0) {
    if (p.chunk_bytes == 0 || p.chunk_bytes > kMaxChunkRawBytes) {
      return Status::InvalidArgument(where() + " has invalid chunk size " + std::to_string(p.chunk_bytes));
    }
    uint64_t chunks = (p.nbytes + p.chunk_bytes - 1) / p.chunk_bytes;
    if (!p.chunk_shape.empty()) {
      // Boxes: one extent per dimension, within it; chunk_bytes a whole box.
      uint64_t box_bytes = DTypeSize(e.dtype);
      bool fits = p.chunk_shape.size() == p.sizes.size();
      for (size_t d = 0; fits && d < p.chunk_shape.size(); ++d) {
        const int64_t s = p.chunk_shape[d];
        fits = s >= 1 && s <= p.sizes[d] && static_cast<uint64_t>(s) <= kMaxChunkRawBytes / box_bytes;
        if (fits) box_bytes *= static_cast<uint64_t>(s);
      }
      if (!fits || box_bytes != p.chunk_bytes) {
        return Status::InvalidArgument(where() + " has an invalid chunk shape " + ShapeToString(p.chunk_shape) +
                                       " for its region " + BoxToString(box()) + " (chunk size " +
                                       std::to_string(p.chunk_bytes) + ")");
      }
      chunks = ChunkGrid(box(), p.chunk_shape).num_chunks();
    }
    if (chunks != p.num_chunks) {
      return Status::InvalidArgument(where() + " records " + std::to_string(p.num_chunks) + " chunks, " +
                                     std::to_string(chunks) + " expected");
    }
  } else if (p.num_chunks != 0 || !p.chunk_shape.empty()) {
    return Status::InvalidArgument(where() + " is empty but records " + std::to_string(p.num_chunks) + " chunks");
  }
  if (!p.chunk_hashes.empty() && p.chunk_hashes.size() != uint64_t{p.num_chunks} * kChunkHashBytes) {
    return Status::InvalidArgument(where() + " records " + std::to_string(p.chunk_hashes.size()) +
                                   " bytes of chunk hashes for " + std::to_string(p.num_chunks) + " chunks");
  }
  uint64_t next = 0;  // references ordered, disjoint, within the piece
  for (const ChunkReference& r : p.references) {
    if (r.count == 0 || r.first < next || uint64_t{r.first} + r.count > p.num_chunks ||
        uint64_t{r.chunk} + r.count > UINT32_MAX || r.step < 0 || r.step > kMaxStep || r.save_id == 0) {
      return Status::InvalidArgument(where() + " has an invalid chunk reference (chunks " + std::to_string(r.first) +
                                     "+" + std::to_string(r.count) + " of " + std::to_string(p.num_chunks) +
                                     " to step " + std::to_string(r.step) + ")");
    }
    next = uint64_t{r.first} + r.count;
  }
  return Status::OK();
}

}  // namespace

Status ValidateStepHeader(const StepMetadata& m) {
  if (m.format_version != kFormatVersion) {
    return Status::InvalidArgument("unsupported format version " + std::to_string(m.format_version) +
                                   " (this build reads version " + std::to_string(kFormatVersion) + ")");
  }
  if (m.world_size < 1 || m.coordinator_rank < 0 || m.coordinator_rank >= m.world_size) {
    return Status::InvalidArgument("invalid world size " + std::to_string(m.world_size) + " or coordinator rank " +
                                   std::to_string(m.coordinator_rank));
  }
  if (Status st = ValidateMetricsAndNote(m.metrics, m.note); !st.ok()) return st;
  for (const auto& [name, value] : m.annotations) {
    if (name.empty()) return Status::InvalidArgument("an annotation with an empty name");
  }
  std::unordered_set<std::string> seen;
  for (const EntryMetadata& e : m.entries) {
    if (e.fqn.empty()) return Status::InvalidArgument("entry with an empty FQN");
    if (!seen.insert(e.fqn).second) return Status::InvalidArgument("duplicate FQN '" + e.fqn + "'");
    auto numel = NumElements(e.shape);
    if (!numel.ok()) return numel.status().WithContext("entry '" + e.fqn + "'");
    if (e.kind == EntryKind::kBytes && (e.shape.size() != 1 || e.dtype != DType::kU8)) {
      return Status::InvalidArgument("bytes entry '" + e.fqn + "' must be one u8 piece of shape [length]");
    }
    if (e.kind != EntryKind::kBytes && e.bytes_encoding != BytesEncoding::kUnrecorded) {
      return Status::InvalidArgument(std::string(EntryKindName(e.kind)) + " entry '" + e.fqn +
                                     "' records a bytes encoding (" + BytesEncodingName(e.bytes_encoding) + ")");
    }
  }
  return Status::OK();
}

Status ValidateEntryPieces(const StepMetadata& m, const EntryMetadata& e, bool check_storage) {
  if (e.pieces_omitted) {
    return Status::InvalidArgument("entry '" + e.fqn + "': its pieces were not read (metadata of some entries only)");
  }
  if (e.pieces_partial) {
    return Status::InvalidArgument("entry '" + e.fqn + "': only some of its pieces were read (those a load needs)");
  }
  auto numel = NumElements(e.shape);
  if (!numel.ok()) return numel.status().WithContext("entry '" + e.fqn + "'");
  if (e.kind == EntryKind::kBytes && e.pieces.size() != 1) {
    return Status::InvalidArgument("bytes entry '" + e.fqn + "' must be one u8 piece of shape [length]");
  }
  if (e.kind == EntryKind::kTensor && e.pieces.size() != 1) {
    return Status::InvalidArgument("tensor entry '" + e.fqn + "' has " + std::to_string(e.pieces.size()) +
                                   " pieces, expected 1");
  }
  int64_t covered = 0;
  std::vector<Box> boxes;
  boxes.reserve(e.pieces.size());
  for (size_t i = 0; i < e.pieces.size(); ++i) {
    Status st = ValidatePiece(e, i, e.pieces[i], check_storage);
    if (!st.ok()) return st;
    for (const ChunkReference& r : e.pieces[i].references) {
      if (r.step == m.step && r.save_id == m.save_id) {
        return Status::InvalidArgument("entry '" + e.fqn + "' piece " + std::to_string(i) +
                                       " refers to chunks of its own save");
      }
    }
    boxes.push_back(Box{e.pieces[i].offsets, e.pieces[i].sizes});
    covered += BoxNumel(boxes.back());
  }
  // Pairwise disjoint, found through an index (n log n), not by trying
  // every pair.
  std::vector<const Box*> ptrs;
  ptrs.reserve(boxes.size());
  for (const Box& b : boxes) ptrs.push_back(&b);
  size_t a = 0, b = 0;
  if (FindOverlappingPair(ptrs, &a, &b)) {
    return Status::InvalidArgument("entry '" + e.fqn + "': saved shards " + BoxToString(boxes[a]) + " and " +
                                   BoxToString(boxes[b]) + " overlap");
  }
  // Disjoint pieces within the shape cover it exactly when their element
  // counts add up to the shape's.
  if (covered != *numel) {
    return Status::InvalidArgument("entry '" + e.fqn + "' of shape " + ShapeToString(e.shape) + ": its shards hold " +
                                   std::to_string(covered) + " of " + std::to_string(*numel) + " elements");
  }
  return Status::OK();
}

Status ValidateStepMetadata(const StepMetadata& m, bool check_storage) {
  RETURN_IF_ERROR(ValidateStepHeader(m));
  for (const EntryMetadata& e : m.entries) RETURN_IF_ERROR(ValidateEntryPieces(m, e, check_storage));
  return Status::OK();
}

std::string EncodeMetadataValue(const StepMetadata& m) {
  proto::Metadata pm;
  ToProto(m, &pm);
  return RecordValue(pm);
}

StatusOr<StepMetadata> DecodeMetadataValue(std::string_view value) {
  ASSIGN_OR_RETURN(MetadataRecord rec, DecodeMetadataRecord(value));
  if (rec.pieces_apart) {
    return Status::DataLoss("metadata: the step's pieces are stored apart (format 6), not in this record");
  }
  return std::move(rec.metadata);
}

std::vector<PiecesPage> PagesOf(const EntryMetadata& e) {
  std::vector<PiecesPage> pages;
  if (e.pieces.size() <= kPiecesPerPage) return pages;
  for (size_t first = 0; first < e.pieces.size(); first += kPiecesPerPage) {
    const size_t end = std::min(e.pieces.size(), first + kPiecesPerPage);
    PiecesPage page;
    page.pieces = static_cast<uint32_t>(end - first);
    std::vector<int64_t> hi;
    for (size_t i = first; i < end; ++i) {
      const StoredPiece& p = e.pieces[i];
      if (i == first) {
        page.offsets = p.offsets;
        hi.resize(p.offsets.size());
        for (size_t d = 0; d < hi.size(); ++d) hi[d] = p.offsets[d] + p.sizes[d];
        continue;
      }
      for (size_t d = 0; d < hi.size() && d < p.offsets.size(); ++d) {
        page.offsets[d] = std::min(page.offsets[d], p.offsets[d]);
        hi[d] = std::max(hi[d], p.offsets[d] + p.sizes[d]);
      }
    }
    page.sizes.resize(hi.size());
    for (size_t d = 0; d < hi.size(); ++d) page.sizes[d] = hi[d] - page.offsets[d];
    pages.push_back(std::move(page));
  }
  return pages;
}

std::vector<uint32_t> PagesMeeting(const std::vector<PiecesPage>& pages, const std::vector<EntryRegion>& regions) {
  std::vector<uint32_t> out;
  for (uint32_t p = 0; p < pages.size(); ++p) {
    const Box page{pages[p].offsets, pages[p].sizes};
    for (const EntryRegion& r : regions) {
      Box meet;
      if (r.offsets.size() == page.offsets.size() && r.sizes.size() == page.sizes.size() &&
          Intersect(page, Box{r.offsets, r.sizes}, &meet) && BoxNumel(meet) > 0) {
        out.push_back(p);
        break;
      }
    }
  }
  return out;
}

uint64_t GridCells(const std::vector<int64_t>& shape, const std::vector<int64_t>& block) {
  if (shape.empty() || block.size() != shape.size()) return 0;
  uint64_t cells = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (block[d] < 1 || block[d] > shape[d]) return 0;
    cells *= static_cast<uint64_t>((shape[d] + block[d] - 1) / block[d]);
    if (cells > UINT32_MAX) return 0;
  }
  return cells;
}

PiecesPage GridCellPage(const std::vector<int64_t>& shape, const std::vector<int64_t>& block, uint64_t cell) {
  PiecesPage page;
  page.pieces = 1;
  page.exact = true;
  page.offsets.resize(shape.size());
  page.sizes.resize(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t n = (shape[d] + block[d] - 1) / block[d];
    const int64_t c = static_cast<int64_t>(cell % static_cast<uint64_t>(n));
    cell /= static_cast<uint64_t>(n);
    page.offsets[d] = c * block[d];
    page.sizes[d] = std::min(block[d], shape[d] - page.offsets[d]);
  }
  return page;
}

std::optional<PiecesGrid> GridOf(const EntryMetadata& e) {
  if (e.pieces.size() < kGridMinPieces || e.shape.empty()) return std::nullopt;
  PiecesGrid grid;
  grid.block.assign(e.shape.size(), 0);
  for (const StoredPiece& p : e.pieces) {
    if (p.offsets.size() != e.shape.size() || p.sizes.size() != e.shape.size()) return std::nullopt;
    for (size_t d = 0; d < e.shape.size(); ++d) grid.block[d] = std::max(grid.block[d], p.sizes[d]);
  }
  const uint64_t cells = GridCells(e.shape, grid.block);
  if (cells != e.pieces.size()) return std::nullopt;
  // Each piece must be a cell, and no cell taken twice.
  constexpr uint32_t kFree = UINT32_MAX;
  grid.piece_of_cell.assign(cells, kFree);
  for (size_t i = 0; i < e.pieces.size(); ++i) {
    const StoredPiece& p = e.pieces[i];
    uint64_t cell = 0;
    for (size_t d = 0; d < e.shape.size(); ++d) {
      const int64_t b = grid.block[d];
      const int64_t n = (e.shape[d] + b - 1) / b;
      if (p.offsets[d] < 0 || p.offsets[d] % b != 0 || p.offsets[d] >= e.shape[d] ||
          p.sizes[d] != std::min(b, e.shape[d] - p.offsets[d])) {
        return std::nullopt;
      }
      cell = cell * static_cast<uint64_t>(n) + static_cast<uint64_t>(p.offsets[d] / b);
    }
    if (grid.piece_of_cell[cell] != kFree) return std::nullopt;
    grid.piece_of_cell[cell] = static_cast<uint32_t>(i);
  }
  return grid;
}

std::vector<std::optional<PiecesGrid>> GridsOf(const StepMetadata& m) {
  std::vector<std::optional<PiecesGrid>> grids;
  grids.reserve(m.entries.size());
  for (const EntryMetadata& e : m.entries) grids.push_back(GridOf(e));
  return grids;
}

std::vector<uint32_t> GridCellsMeeting(const std::vector<int64_t>& shape, const std::vector<int64_t>& block,
                                       const std::vector<EntryRegion>& regions) {
  std::vector<uint32_t> out;
  const size_t dims = shape.size();
  for (const EntryRegion& r : regions) {
    if (r.offsets.size() != dims || r.sizes.size() != dims) continue;
    // The range of cells [lo, hi] the region meets along each dimension.
    std::vector<int64_t> lo(dims), hi(dims), n(dims);
    bool empty = false;
    for (size_t d = 0; d < dims; ++d) {
      n[d] = (shape[d] + block[d] - 1) / block[d];
      const int64_t a = std::max<int64_t>(r.offsets[d], 0);
      const int64_t z = std::min<int64_t>(r.offsets[d] + r.sizes[d], shape[d]);  // exclusive
      if (r.sizes[d] <= 0 || a >= z) {
        empty = true;
        break;
      }
      lo[d] = a / block[d];
      hi[d] = (z - 1) / block[d];
    }
    if (empty) continue;
    std::vector<int64_t> at = lo;
    while (true) {
      uint64_t cell = 0;
      for (size_t d = 0; d < dims; ++d) cell = cell * static_cast<uint64_t>(n[d]) + static_cast<uint64_t>(at[d]);
      out.push_back(static_cast<uint32_t>(cell));
      size_t d = dims;
      while (d > 0 && at[d - 1] == hi[d - 1]) {
        at[d - 1] = lo[d - 1];
        --d;
      }
      if (d == 0) break;
      ++at[d - 1];
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string EncodeMetadataRecord(const StepMetadata& m, bool paged,
                                 const std::vector<std::optional<PiecesGrid>>* grids) {
  // (The pieces go into the entries' own records: never converted here.)
  proto::Metadata pm;
  StepToProto(m, /*with_pieces=*/false, &pm);
  pm.set_format_version(kMetadataRecordPiecesApart);
  if (paged) {
    for (size_t i = 0; i < m.entries.size(); ++i) {
      if (grids != nullptr && grids->at(i).has_value()) {
        for (int64_t b : grids->at(i)->block) pm.mutable_entries(static_cast<int>(i))->add_grid(b);
        continue;
      }
      for (const PiecesPage& page : PagesOf(m.entries[i])) {
        proto::PiecesPage* q = pm.mutable_entries(static_cast<int>(i))->add_pages();
        for (int64_t o : page.offsets) q->add_offsets(o);
        for (int64_t z : page.sizes) q->add_sizes(z);
        q->set_pieces(page.pieces);
      }
    }
  }
  return RecordValue(pm);
}

namespace {

// An entry's pages (Entry.pages) as its record states them: within its
// shape, none empty, and as many pieces in all as the record says it has
// (store format 7 records always say).
Status ValidatePages(const EntryMetadata& e, const std::vector<PiecesPage>& pages) {
  if (pages.empty()) return Status::OK();
  uint64_t pieces = 0;
  for (size_t i = 0; i < pages.size(); ++i) {
    const std::string where = "entry '" + e.fqn + "' page " + std::to_string(i);
    const PiecesPage& page = pages[i];
    if (page.pieces == 0 || page.pieces > kPiecesPerPage) {
      return Status::InvalidArgument(where + " holds " + std::to_string(page.pieces) + " pieces");
    }
    if (i + 1 < pages.size() && page.pieces != kPiecesPerPage) {
      return Status::InvalidArgument(where + " holds " + std::to_string(page.pieces) + " pieces, not " +
                                     std::to_string(kPiecesPerPage));
    }
    if (Status st = CheckBoxWithin(Box{page.offsets, page.sizes}, e.shape); !st.ok()) return st.WithContext(where);
    pieces += page.pieces;
  }
  if (!e.recorded_totals.has_value() || e.recorded_totals->pieces != pieces) {
    return Status::InvalidArgument("entry '" + e.fqn + "': its pages hold " + std::to_string(pieces) +
                                   " pieces; the record says " +
                                   (e.recorded_totals ? std::to_string(e.recorded_totals->pieces) : "nothing"));
  }
  return Status::OK();
}

// An entry's grid (Entry.grid) as its record states it: a block size per
// dimension, each within the shape, making as many cells as the record says
// it has pieces.
Status ValidateGrid(const EntryMetadata& e, const std::vector<int64_t>& block) {
  if (block.empty()) return Status::OK();
  std::string sizes;
  for (int64_t b : block) sizes += (sizes.empty() ? "" : ", ") + std::to_string(b);
  const std::string where = "entry '" + e.fqn + "' grid [" + sizes + "]";
  const uint64_t cells = GridCells(e.shape, block);
  if (cells == 0) {
    return Status::InvalidArgument(where + " does not fit its shape " + ShapeToString(e.shape));
  }
  if (!e.recorded_totals.has_value() || e.recorded_totals->pieces != cells) {
    return Status::InvalidArgument(where + " has " + std::to_string(cells) + " cells; the record says " +
                                   (e.recorded_totals ? std::to_string(e.recorded_totals->pieces) : "nothing") +
                                   " pieces");
  }
  return Status::OK();
}

}  // namespace

StatusOr<MetadataRecord> DecodeMetadataRecord(std::string_view value) {
  auto bytes = DecodeChunkToString(value);
  if (!bytes.ok()) return bytes.status().WithContext("metadata");
  proto::Metadata pm;
  if (!pm.ParseFromString(*bytes)) return Status::DataLoss("metadata does not parse as ckptdb.proto.Metadata");
  MetadataRecord rec;
  if (pm.format_version() == kMetadataRecordPiecesApart) {
    rec.pages.resize(pm.entries_size());
    rec.grids.resize(pm.entries_size());
    for (int i = 0; i < pm.entries_size(); ++i) {
      const proto::Entry& e = pm.entries(i);
      if (e.pieces_size() != 0) {
        return Status::DataLoss("metadata: entry '" + e.fqn() + "' has pieces in a record whose pieces are apart");
      }
      if (e.grid_size() != 0 && e.pages_size() != 0) {
        return Status::DataLoss("metadata: entry '" + e.fqn() + "' has both a grid and pages of pieces");
      }
      rec.grids[i].assign(e.grid().begin(), e.grid().end());
      for (const proto::PiecesPage& q : e.pages()) {
        rec.pages[i].push_back(PiecesPage{{q.offsets().begin(), q.offsets().end()},
                                          {q.sizes().begin(), q.sizes().end()},
                                          q.pieces()});
      }
    }
    rec.pieces_apart = true;
    pm.set_format_version(kFormatVersion);
  }
  auto m = FromProto(pm);
  if (!m.ok()) return Status::DataLoss("metadata: " + m.status().message());
  Status st = rec.pieces_apart ? ValidateStepHeader(*m) : ValidateStepMetadata(*m);
  if (!st.ok()) return Status::DataLoss("metadata: " + st.message());
  rec.metadata = std::move(m).value();
  if (rec.pieces_apart) {
    for (EntryMetadata& e : rec.metadata.entries) e.pieces_omitted = true;
    for (size_t i = 0; i < rec.pages.size(); ++i) {
      if (Status bad = ValidatePages(rec.metadata.entries[i], rec.pages[i]); !bad.ok()) {
        return Status::DataLoss("metadata: " + bad.message());
      }
      if (Status bad = ValidateGrid(rec.metadata.entries[i], rec.grids[i]); !bad.ok()) {
        return Status::DataLoss("metadata: " + bad.message());
      }
    }
  } else {
    for (const proto::Entry& e : pm.entries()) {
      if (e.pages_size() != 0 || e.grid_size() != 0) {
        return Status::DataLoss("metadata: entry '" + e.fqn() + "' has pages of pieces in a record that holds its pieces");
      }
    }
  }
  return rec;
}

namespace {

// A pieces record of entry `index` of `m` (its entry, step and save), its
// pieces yet to be added, on `arena`: a commit encodes a record per grid
// cell (a piece of each rank, per entry), each message with parts of its
// own, freed whole with the arena.
proto::EntryPieces& PiecesRecordOn(const StepMetadata& m, size_t index, google::protobuf::Arena* arena) {
  proto::EntryPieces& pe = *google::protobuf::Arena::CreateMessage<proto::EntryPieces>(arena);
  pe.set_fqn(m.entries.at(index).fqn);
  pe.set_step(m.step);
  pe.set_save_id(m.save_id);
  return pe;
}

}  // namespace

std::string EncodeEntryPiecesValue(const StepMetadata& m, size_t index) {
  const EntryMetadata& e = m.entries.at(index);
  google::protobuf::Arena arena;
  proto::EntryPieces& pe = PiecesRecordOn(m, index, &arena);
  pe.mutable_pieces()->Reserve(static_cast<int>(e.pieces.size()));
  for (const StoredPiece& p : e.pieces) ToProto(p, pe.add_pieces());
  return RecordValue(pe);
}

namespace {

// The EntryPieces message of `value`, checked to be entry e's of this save
// (and, with `page`, that page's record; without, the whole entry's),
// parsed on `arena`: a record holds up to thousands of pieces, each with
// repeated fields, and every rank of a job decodes the pages it loads; on
// an arena their memory is taken in blocks and given back at once instead
// of by a malloc and a free per field.
// (`what` names the record: called only to describe an error, so that a
// read of a million one-piece records builds no message.)
template <typename What>
StatusOr<proto::EntryPieces*> ParsePiecesRecord(std::string_view value, const StepMetadata& m, const EntryMetadata& e,
                                                std::optional<uint32_t> page, const What& what,
                                                google::protobuf::Arena* arena) {
  auto bytes = DecodeChunkToString(value);
  if (!bytes.ok()) return Status::DataLoss(what() + ": " + bytes.status().message());
  auto* pe = google::protobuf::Arena::CreateMessage<proto::EntryPieces>(arena);
  if (!pe->ParseFromString(*bytes)) return Status::DataLoss(what() + " does not parse as ckptdb.proto.EntryPieces");
  if (pe->fqn() != e.fqn || pe->step() != m.step || pe->save_id() != m.save_id) {
    return Status::DataLoss(what() + " belongs to entry '" + pe->fqn() + "' of step " + std::to_string(pe->step()) +
                            " (save " + std::to_string(pe->save_id()) + ")");
  }
  if (pe->has_page() != page.has_value() || (page.has_value() && pe->page() != *page)) {
    return Status::DataLoss(what() + " is " +
                            (pe->has_page() ? "page " + std::to_string(pe->page()) : "a whole entry's") + " record");
  }
  return pe;
}

// An arena whose first block is `block` (on the caller's stack): a record of
// a few pieces is parsed without a heap allocation.
google::protobuf::ArenaOptions StackArena(char* block, size_t size) {
  google::protobuf::ArenaOptions o;
  o.initial_block = block;
  o.initial_block_size = size;
  return o;
}

// Whether box (offsets, sizes) lies within (lo, extent), both of `dims`
// dimensions.
bool BoxWithin(const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes, const std::vector<int64_t>& lo,
               const std::vector<int64_t>& extent) {
  if (offsets.size() != lo.size() || sizes.size() != lo.size() || extent.size() != lo.size()) return false;
  for (size_t d = 0; d < lo.size(); ++d) {
    if (offsets[d] < lo[d] || offsets[d] + sizes[d] > lo[d] + extent[d]) return false;
  }
  return true;
}

Status AdoptPieces(std::vector<StoredPiece> pieces, const StepMetadata& m, EntryMetadata* e, const std::string& what) {
  e->pieces = std::move(pieces);
  e->pieces_omitted = false;
  e->pieces_partial = false;
  Status st = ValidateEntryPieces(m, *e);
  if (st.ok() && e->recorded_totals.has_value()) {
    const PieceTotals read = *e->totals(), recorded = *e->recorded_totals;
    if (read.pieces != recorded.pieces || read.stored_bytes != recorded.stored_bytes) {
      st = Status::DataLoss("it holds " + std::to_string(read.pieces) + " pieces of " +
                            std::to_string(read.stored_bytes) + " stored bytes; the step's record says " +
                            std::to_string(recorded.pieces) + " of " + std::to_string(recorded.stored_bytes));
    }
  }
  if (!st.ok()) {
    e->pieces.clear();
    e->pieces_omitted = true;
    return Status::DataLoss(what + ": " + st.message());
  }
  return Status::OK();
}

}  // namespace

std::string EncodeEntryPiecesPage(const StepMetadata& m, size_t index, uint32_t page) {
  const EntryMetadata& e = m.entries.at(index);
  google::protobuf::Arena arena;
  proto::EntryPieces& pe = PiecesRecordOn(m, index, &arena);
  pe.set_page(page);
  const size_t first = static_cast<size_t>(page) * kPiecesPerPage;
  const size_t end = std::min(e.pieces.size(), first + kPiecesPerPage);
  for (size_t i = first; i < end; ++i) ToProto(e.pieces[i], pe.add_pieces());
  return RecordValue(pe);
}

std::string EncodeEntryPiecesCell(const StepMetadata& m, size_t index, const PiecesGrid& grid, uint32_t cell) {
  alignas(16) char block[4096];
  google::protobuf::Arena arena(StackArena(block, sizeof block));
  proto::EntryPieces& pe = PiecesRecordOn(m, index, &arena);
  pe.set_page(cell);
  ToProto(m.entries.at(index).pieces.at(grid.piece_of_cell.at(cell)), pe.add_pieces());
  return RecordValue(pe);
}

Status DecodeEntryPiecesPage(std::string_view value, const StepMetadata& m, const EntryMetadata& e, uint32_t page,
                             const PiecesPage* expected, std::vector<StoredPiece>* out, size_t per_page) {
  const auto what = [&] {
    return "page " + std::to_string(page) + " of the pieces of entry '" + e.fqn + "' of step " + std::to_string(m.step);
  };
  alignas(16) char block[4096];
  google::protobuf::Arena arena(StackArena(block, sizeof block));
  ASSIGN_OR_RETURN(proto::EntryPieces * parsed, ParsePiecesRecord(value, m, e, page, what, &arena));
  const proto::EntryPieces& pe = *parsed;
  if (expected != nullptr && static_cast<uint64_t>(pe.pieces_size()) != expected->pieces) {
    return Status::DataLoss(what() + " holds " + std::to_string(pe.pieces_size()) + " pieces; the step's record says " +
                            std::to_string(expected->pieces));
  }
  const size_t first = static_cast<size_t>(page) * per_page;
  for (int i = 0; i < pe.pieces_size(); ++i) {
    StoredPiece p = FromProto(pe.pieces(i));
    // (Within the entry's shape: ValidatePiece; within the page's box, or
    // its grid cell exactly: here.)
    Status st = ValidatePiece(e, first + static_cast<size_t>(i), p, /*check_storage=*/true);
    if (st.ok() && expected != nullptr && !BoxWithin(p.offsets, p.sizes, expected->offsets, expected->sizes)) {
      st = Status::InvalidArgument("piece " + std::to_string(first + i) + " " + BoxToString(Box{p.offsets, p.sizes}) +
                                   " lies outside the page's box " +
                                   BoxToString(Box{expected->offsets, expected->sizes}));
    }
    if (st.ok() && expected != nullptr && expected->exact &&
        (p.offsets != expected->offsets || p.sizes != expected->sizes)) {
      st = Status::InvalidArgument("piece " + std::to_string(first + i) + " " + BoxToString(Box{p.offsets, p.sizes}) +
                                   " is not its grid cell " + BoxToString(Box{expected->offsets, expected->sizes}));
    }
    if (!st.ok()) return Status::DataLoss(what() + ": " + st.message());
    out->push_back(std::move(p));
  }
  return Status::OK();
}

std::string EncodePiecesSubset(const StepMetadata& m, size_t index, const std::vector<size_t>& which) {
  const EntryMetadata& e = m.entries.at(index);
  google::protobuf::Arena arena;
  proto::EntryPieces& pe = PiecesRecordOn(m, index, &arena);
  for (size_t i : which) ToProto(e.pieces.at(i), pe.add_pieces());
  return RecordValue(pe);
}

Status DecodePiecesSubset(std::string_view value, const StepMetadata& m, EntryMetadata* e) {
  const std::string what = "the pieces of entry '" + e->fqn + "' of step " + std::to_string(m.step);
  google::protobuf::Arena arena;
  ASSIGN_OR_RETURN(proto::EntryPieces * parsed,
                   ParsePiecesRecord(value, m, *e, std::nullopt, [&what] { return what; }, &arena));
  const proto::EntryPieces& pe = *parsed;
  std::vector<StoredPiece> pieces;
  pieces.reserve(pe.pieces_size());
  for (int i = 0; i < pe.pieces_size(); ++i) {
    StoredPiece p = FromProto(pe.pieces(i));
    if (Status st = ValidatePiece(*e, static_cast<size_t>(i), p, /*check_storage=*/true); !st.ok()) {
      return Status::DataLoss(what + ": " + st.message());
    }
    pieces.push_back(std::move(p));
  }
  return AdoptPartialEntryPieces(std::move(pieces), m, e);
}

Status AdoptPartialEntryPieces(std::vector<StoredPiece> pieces, const StepMetadata& m, EntryMetadata* e) {
  std::vector<Box> boxes;
  boxes.reserve(pieces.size());
  for (const StoredPiece& p : pieces) boxes.push_back(Box{p.offsets, p.sizes});
  std::vector<const Box*> ptrs;
  for (const Box& b : boxes) ptrs.push_back(&b);
  size_t a = 0, b = 0;
  if (FindOverlappingPair(ptrs, &a, &b)) {
    return Status::DataLoss("the pieces of entry '" + e->fqn + "' of step " + std::to_string(m.step) + ": shards " +
                            BoxToString(boxes[a]) + " and " + BoxToString(boxes[b]) + " overlap");
  }
  e->pieces = std::move(pieces);
  e->pieces_omitted = false;
  e->pieces_partial = true;
  return Status::OK();
}

Status AdoptEntryPieces(std::vector<StoredPiece> pieces, const StepMetadata& m, EntryMetadata* e) {
  return AdoptPieces(std::move(pieces), m, e, "the pieces of entry '" + e->fqn + "' of step " + std::to_string(m.step));
}

Status DecodeEntryPiecesValue(std::string_view value, const StepMetadata& m, EntryMetadata* e) {
  const std::string what = "the pieces record of entry '" + e->fqn + "' of step " + std::to_string(m.step);
  google::protobuf::Arena arena;
  ASSIGN_OR_RETURN(proto::EntryPieces * parsed,
                   ParsePiecesRecord(value, m, *e, std::nullopt, [&what] { return what; }, &arena));
  const proto::EntryPieces& pe = *parsed;
  std::vector<StoredPiece> pieces;
  pieces.reserve(pe.pieces_size());
  for (const proto::Piece& q : pe.pieces()) pieces.push_back(FromProto(q));
  return AdoptPieces(std::move(pieces), m, e, what);
}

}  // namespace ckptdb
