// diff: what changed between two steps, entry by entry.
#include <cmath>
#include <unordered_map>
#include <cstring>
#include <set>

#include "ckptdb/checkpoint.h"
#include "cli_commands.h"
#include "cli_entries.h"
#include "cli_output.h"
#include "cli_slice.h"
#include "value_format.h"

namespace ckptdb::cli {

namespace {

struct Change {
  std::string fqn;
  std::string what;  // "kind", "dtype", "shape", "dtype,shape", "values", "bytes"
  const EntryMetadata* a = nullptr;
  const EntryMetadata* b = nullptr;
  uint64_t differing = 0;  // elements (or bytes) that differ
  uint64_t total = 0;
  double max_abs_diff = 0;  // over differing elements whose difference is a number
  bool has_nan_diff = false;  // a NaN on one side only, or inf - inf
};

std::string Describe(const EntryMetadata& e) {
  if (e.kind == EntryKind::kBytes) return "bytes, " + std::to_string(e.logical_bytes()) + " bytes";
  return std::string(EntryKindName(e.kind)) + " " + DTypeName(e.dtype) + " " + ShapeToString(e.shape);
}

std::string JsonEntry(const EntryMetadata& e) {
  return "{\"fqn\": " + JsonString(e.fqn) + ", \"kind\": " + JsonString(EntryKindName(e.kind)) +
         ", \"dtype\": " + JsonString(DTypeName(e.dtype)) + ", \"shape\": " + JsonShape(e.shape) + "}";
}

// Compares the values of an entry whose kind, dtype and shape are equal in
// both steps. Tensors are read in blocks of rows, the same block of both
// steps at a time, so memory stays bounded whatever their size.
Status CompareValues(StoreReader& reader, const StepMetadata& ma, const StepMetadata& mb, Change* c) {
  if (c->a->kind == EntryKind::kBytes) {
    auto sa = ReadBytesEntry(reader, ma, *c->a);
    if (!sa.ok()) return sa.status();
    auto sb = ReadBytesEntry(reader, mb, *c->b);
    if (!sb.ok()) return sb.status();
    const Bytes& ba = *sa;
    const Bytes& bb = *sb;
    c->what = "bytes";
    c->total = std::max(ba.data.size(), bb.data.size());
    for (size_t i = 0; i < c->total; ++i) {
      if (i >= ba.data.size() || i >= bb.data.size() || ba.data[i] != bb.data[i]) c->differing++;
    }
    return Status::OK();
  }
  c->what = "values";
  c->total = static_cast<uint64_t>(NumElements(c->a->shape).value());
  constexpr uint64_t kBlockBytes = uint64_t{32} << 20;  // of each step
  return ForEachRowRange(*c->a, kBlockBytes, [&](const std::vector<SliceRange>& ranges) -> Status {
    auto ta = ReadSlice(reader, ma, *c->a, ranges);
    if (!ta.ok()) return ta.status();
    auto tb = ReadSlice(reader, mb, *c->b, ranges);
    if (!tb.ok()) return tb.status();
    const size_t es = DTypeSize(ta->dtype());
    const char* pa = static_cast<const char*>(ta->data());
    const char* pb = static_cast<const char*>(tb->data());
    for (int64_t i = 0; i < ta->numel(); ++i) {
      if (std::memcmp(pa + i * static_cast<int64_t>(es), pb + i * static_cast<int64_t>(es), es) == 0) continue;
      c->differing++;
      const double d = std::fabs(ElementAsDouble(*ta, i) - ElementAsDouble(*tb, i));
      if (std::isnan(d)) {
        c->has_nan_diff = true;
      } else if (d > c->max_abs_diff) {
        c->max_abs_diff = d;
      }
    }
    return Status::OK();
  });
}

// True when both entries were stored in the same pieces and chunks and every
// chunk's content hash is equal: the values are equal, nothing needs to be
// read (a differing or missing hash says nothing: the values are compared).
bool SameByHash(const EntryMetadata& a, const EntryMetadata& b) {
  if (a.pieces.size() != b.pieces.size()) return false;
  for (size_t i = 0; i < a.pieces.size(); ++i) {
    const StoredPiece& pa = a.pieces[i];
    const StoredPiece& pb = b.pieces[i];
    if (pa.offsets != pb.offsets || pa.sizes != pb.sizes || pa.nbytes != pb.nbytes ||
        pa.chunk_bytes != pb.chunk_bytes || pa.num_chunks != pb.num_chunks || pa.chunk_shape != pb.chunk_shape) {
      return false;
    }
    if (pa.nbytes > 0 && (pa.chunk_hashes.empty() || pa.chunk_hashes != pb.chunk_hashes)) return false;
  }
  return true;
}

}  // namespace

Status Diff(StoreReader& reader, int64_t a, int64_t b, bool json, std::ostream& out) {
  // The steps' summaries say what was added, removed or changed in kind,
  // dtype or shape; the pieces of an entry in both are read (and dropped
  // again) only to compare it, one entry at a time.
  auto ma = reader.ReadStepSummary(a);
  if (!ma.ok()) return ma.status();
  auto mb = reader.ReadStepSummary(b);
  if (!mb.ok()) return mb.status();
  std::vector<const EntryMetadata*> added, removed;
  std::vector<Change> changed;
  uint64_t unchanged = 0;
  uint64_t unchanged_by_hash = 0;  // of them, found equal by their chunks' hashes, not read
  // One index per step: a lookup per entry, not a scan.
  std::unordered_map<std::string, size_t> in_a, in_b;
  for (size_t i = 0; i < ma->entries.size(); ++i) in_a.emplace(ma->entries[i].fqn, i);
  for (size_t i = 0; i < mb->entries.size(); ++i) in_b.emplace(mb->entries[i].fqn, i);
  for (const EntryMetadata& e : ma->entries) {
    if (in_b.count(e.fqn) == 0) removed.push_back(&e);
  }
  for (size_t ib = 0; ib < mb->entries.size(); ++ib) {
    const EntryMetadata& eb = mb->entries[ib];
    auto found = in_a.find(eb.fqn);
    if (found == in_a.end()) {
      added.push_back(&eb);
      continue;
    }
    const size_t ia = found->second;
    const EntryMetadata* ea = &ma->entries[ia];
    Change c;
    c.fqn = eb.fqn;
    c.a = ea;
    c.b = &eb;
    const bool a_bytes = ea->kind == EntryKind::kBytes, b_bytes = eb.kind == EntryKind::kBytes;
    if (a_bytes != b_bytes) {
      c.what = "kind";
    } else if (ea->dtype != eb.dtype || ea->shape != eb.shape) {
      c.what = ea->dtype != eb.dtype && ea->shape != eb.shape ? "dtype,shape"
               : ea->dtype != eb.dtype                         ? "dtype"
                                                               : "shape";
      if (a_bytes) c.what = "bytes";  // a bytes entry's shape is its length
    } else {
      bool same_by_hash = false;
      Status st = WithPieces(reader, &*ma, ia, [&](const EntryMetadata& pa) {
        return WithPieces(reader, &*mb, ib, [&](const EntryMetadata& pb) {
          same_by_hash = SameByHash(pa, pb);
          return same_by_hash ? Status::OK() : CompareValues(reader, *ma, *mb, &c);
        });
      });
      if (!st.ok()) return st;
      if (same_by_hash || c.differing == 0) {
        unchanged++;
        unchanged_by_hash += same_by_hash ? 1 : 0;
        continue;
      }
    }
    changed.push_back(c);
  }
  if (json) {
    out << "{\"a\": " << a << ", \"b\": " << b << ", \"added\": [";
    for (size_t i = 0; i < added.size(); ++i) out << (i ? ", " : "") << JsonEntry(*added[i]);
    out << "], \"removed\": [";
    for (size_t i = 0; i < removed.size(); ++i) out << (i ? ", " : "") << JsonEntry(*removed[i]);
    out << "], \"changed\": [";
    for (size_t i = 0; i < changed.size(); ++i) {
      const Change& c = changed[i];
      out << (i ? ",\n " : "\n ") << "{\"fqn\": " << JsonString(c.fqn) << ", \"what\": " << JsonString(c.what)
          << ", \"a\": " << JsonEntry(*c.a) << ", \"b\": " << JsonEntry(*c.b);
      if ((c.what == "values" || c.what == "bytes") && c.total > 0) {
        out << ", \"differing\": " << c.differing << ", \"total\": " << c.total;
      }
      if (c.what == "values") {
        out << ", \"max_abs_diff\": " << (c.has_nan_diff ? "NaN" : FormatDouble(c.max_abs_diff));
      }
      out << "}";
    }
    out << (changed.empty() ? "]" : "\n]") << ", \"unchanged\": " << unchanged
        << ", \"unchanged_by_hash\": " << unchanged_by_hash << "}\n";
    return Status::OK();
  }
  out << "step " << a << " -> step " << b << ": " << added.size() << " added, " << removed.size() << " removed, "
      << changed.size() << " changed, " << unchanged << " unchanged\n";
  std::vector<std::vector<std::string>> rows;
  for (const EntryMetadata* e : added) rows.push_back({"+", e->fqn, Describe(*e)});
  for (const EntryMetadata* e : removed) rows.push_back({"-", e->fqn, Describe(*e)});
  for (const Change& c : changed) {
    std::string d;
    if (c.what == "values") {
      d = std::to_string(c.differing) + " of " + std::to_string(c.total) + " elements differ, max abs diff " +
          (c.has_nan_diff ? "nan" : FormatDouble(c.max_abs_diff));
    } else if (c.what == "bytes") {
      d = c.a->logical_bytes() == c.b->logical_bytes()
              ? std::to_string(c.differing) + " of " + std::to_string(c.total) + " bytes differ"
              : "bytes differ (" + std::to_string(c.a->logical_bytes()) + " -> " +
                    std::to_string(c.b->logical_bytes()) + " bytes)";
    } else {
      d = Describe(*c.a) + " -> " + Describe(*c.b);
    }
    rows.push_back({"~", c.fqn, d});
  }
  PrintTable(rows, out);
  return Status::OK();
}

}  // namespace ckptdb::cli
