#include "store/metadata_records.h"

#include <rocksdb/sst_file_writer.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "format/keys.h"
#include "format/metadata_codec.h"
#include "store/rocksdb_status.h"
#include "util/status_macros.h"

namespace ckptdb {

namespace {

StatusOr<MetadataRecord> DecodeRecordOf(int64_t step, std::string_view value) {
  StatusOr<MetadataRecord> rec = DecodeMetadataRecord(value);
  if (!rec.ok()) return rec.status().WithContext("step " + std::to_string(step));
  if (rec->metadata.step != step) {
    return Status::DataLoss("step " + std::to_string(step) + ": metadata records step " +
                            std::to_string(rec->metadata.step));
  }
  return rec;
}

}  // namespace

namespace {

// Each of `keys` (sorted) with one MultiGet: values[k] and statuses[k].
void MultiGetSorted(rocksdb::DB* db, const std::vector<std::string>& keys, std::vector<rocksdb::PinnableSlice>* values,
                    std::vector<rocksdb::Status>* statuses) {
  std::vector<rocksdb::Slice> slices(keys.begin(), keys.end());
  values->clear();
  values->resize(keys.size());
  statuses->assign(keys.size(), rocksdb::Status());
  db->MultiGet(rocksdb::ReadOptions(), db->DefaultColumnFamily(), keys.size(), slices.data(), values->data(),
               statuses->data(), /*sorted_input=*/true);
}

// Every page of entry `index` of `md` (store format 7), in order: read
// through an iterator over the entry's page keys, so that no count need be
// known first; a page missing among them, or after them, shows in the
// entry's validation (its pieces must cover it exactly, as many as the step
// records).
Status ReadAllPages(rocksdb::DB* db, StepMetadata* md, uint32_t index) {
  EntryMetadata& e = md->entries[index];
  const std::string what = "the pieces of entry '" + e.fqn + "' of step " + std::to_string(md->step);
  const std::string prefix = PiecesKey(md->step, index);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  std::vector<StoredPiece> pieces;
  // (As many as the step records, within reason: a damaged count is found
  // by the validation below.)
  if (e.recorded_totals.has_value()) pieces.reserve(std::min<uint64_t>(e.recorded_totals->pieces, 1u << 20));
  uint32_t next = 0;
  for (it->Seek(PiecesPageKey(md->step, index, 0)); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    int64_t step;
    uint32_t entry;
    std::optional<uint32_t> page;
    if (!ParsePiecesKey(it->key().ToStringView(), &step, &entry, &page) || !page.has_value()) break;
    if (*page != next) return Status::DataLoss(what + ": page " + std::to_string(next) + " is missing");
    RETURN_IF_ERROR(DecodeEntryPiecesPage(it->value().ToStringView(), *md, e, next, nullptr, &pieces));
    ++next;
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "reading " + what));
  if (next == 0) return Status::DataLoss("the pieces record of entry '" + e.fqn + "' of step " +
                                         std::to_string(md->step) + " is missing");
  return AdoptEntryPieces(std::move(pieces), *md, &e);
}

}  // namespace

Status ReadEntryPiecesRecords(rocksdb::DB* db, StepMetadata* md, const std::vector<uint32_t>& indices) {
  if (indices.empty()) return Status::OK();
  std::vector<std::string> keys;
  keys.reserve(indices.size());
  for (uint32_t i : indices) keys.push_back(PiecesKey(md->step, i));
  std::vector<rocksdb::PinnableSlice> values;
  std::vector<rocksdb::Status> statuses;
  MultiGetSorted(db, keys, &values, &statuses);
  for (size_t k = 0; k < indices.size(); ++k) {
    EntryMetadata& e = md->entries[indices[k]];
    const std::string what = "the pieces record of entry '" + e.fqn + "' of step " + std::to_string(md->step);
    if (statuses[k].IsNotFound()) {
      RETURN_IF_ERROR(ReadAllPages(db, md, indices[k]));  // (kept in pages, or missing)
      continue;
    }
    RETURN_IF_ERROR(FromRocks(statuses[k], "reading " + what));
    RETURN_IF_ERROR(DecodeEntryPiecesValue(values[k].ToStringView(), *md, &e));
  }
  return Status::OK();
}

StatusOr<StepMetadata> ReadStepMetadata(rocksdb::DB* db, int64_t step) {
  std::string value;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), MetadataKey(step), &value);
  if (s.IsNotFound()) return Status::NotFound("step " + std::to_string(step) + " not found");
  RETURN_IF_ERROR(FromRocks(s, "reading the metadata of step " + std::to_string(step)));
  return CompleteStepMetadata(db, step, value);
}

StatusOr<StepMetadata> CompleteStepMetadata(rocksdb::DB* db, int64_t step, std::string_view metadata_value) {
  ASSIGN_OR_RETURN(MetadataRecord rec, DecodeRecordOf(step, metadata_value));
  if (!rec.pieces_apart) return std::move(rec.metadata);
  std::vector<uint32_t> all(rec.metadata.entries.size());
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  RETURN_IF_ERROR(ReadEntryPiecesRecords(db, &rec.metadata, all));
  return std::move(rec.metadata);
}

StatusOr<StepMetadata> CompleteStepMetadataOf(rocksdb::DB* db, int64_t step, std::string_view metadata_value,
                                              const std::vector<std::string>& fqns) {
  ASSIGN_OR_RETURN(MetadataRecord rec, DecodeRecordOf(step, metadata_value));
  const std::unordered_set<std::string> wanted(fqns.begin(), fqns.end());
  if (!rec.pieces_apart) {
    // Pieces inline (older stores): read whole anyway; the others are
    // marked as for a format-6 step, so callers see one contract.
    for (EntryMetadata& e : rec.metadata.entries) {
      if (wanted.count(e.fqn) == 0) {
        e.pieces.clear();
        e.pieces_omitted = true;
      }
    }
    return std::move(rec.metadata);
  }
  std::vector<uint32_t> indices;
  for (uint32_t i = 0; i < rec.metadata.entries.size(); ++i) {
    if (wanted.count(rec.metadata.entries[i].fqn) > 0) indices.push_back(i);
  }
  RETURN_IF_ERROR(ReadEntryPiecesRecords(db, &rec.metadata, indices));
  return std::move(rec.metadata);
}

StatusOr<StepMetadata> CompleteStepMetadataFor(rocksdb::DB* db, int64_t step, std::string_view metadata_value,
                                               const std::vector<std::string>& fqns,
                                               const std::vector<EntryRegion>& regions) {
  ASSIGN_OR_RETURN(MetadataRecord rec, DecodeRecordOf(step, metadata_value));
  if (!rec.pieces_apart) return CompleteStepMetadataOf(db, step, metadata_value, fqns);
  std::unordered_map<std::string, std::vector<EntryRegion>> named;
  for (const EntryRegion& r : regions) named[r.fqn].push_back(r);
  const std::unordered_set<std::string> wanted(fqns.begin(), fqns.end());
  StepMetadata& md = rec.metadata;
  // Entries read whole (one record, or no regions named), and the pages
  // that meet a region of the others.
  std::vector<uint32_t> whole;
  std::vector<std::pair<uint32_t, uint32_t>> pages;  // (entry, page), sorted as their keys
  for (uint32_t i = 0; i < md.entries.size(); ++i) {
    const std::string& fqn = md.entries[i].fqn;
    if (wanted.count(fqn) == 0) continue;
    auto found = named.find(fqn);
    const std::vector<int64_t>& grid = rec.grids[i];
    if ((rec.pages[i].empty() && grid.empty()) || found == named.end()) {
      whole.push_back(i);
      continue;
    }
    const std::vector<uint32_t> meeting = grid.empty() ? PagesMeeting(rec.pages[i], found->second)
                                                       : GridCellsMeeting(md.entries[i].shape, grid, found->second);
    for (uint32_t p : meeting) pages.push_back({i, p});
    // (Regions that meet no page, empty ones: none of its pieces is needed.)
    if (meeting.empty()) RETURN_IF_ERROR(AdoptPartialEntryPieces({}, md, &md.entries[i]));
  }
  RETURN_IF_ERROR(ReadEntryPiecesRecords(db, &md, whole));
  std::vector<std::string> keys;
  keys.reserve(pages.size());
  for (const auto& [i, p] : pages) keys.push_back(PiecesPageKey(step, i, p));
  std::vector<rocksdb::PinnableSlice> values;
  std::vector<rocksdb::Status> statuses;
  MultiGetSorted(db, keys, &values, &statuses);
  for (size_t k = 0; k < pages.size();) {
    const uint32_t i = pages[k].first;
    EntryMetadata& e = md.entries[i];
    const std::vector<int64_t>& grid = rec.grids[i];
    const uint64_t total = grid.empty() ? rec.pages[i].size() : GridCells(e.shape, grid);
    std::vector<StoredPiece> pieces;
    size_t read = 0;
    for (; k < pages.size() && pages[k].first == i; ++k, ++read) {
      const uint32_t p = pages[k].second;
      const std::string what = "page " + std::to_string(p) + " of the pieces of entry '" + e.fqn + "' of step " +
                               std::to_string(step);
      if (statuses[k].IsNotFound()) return Status::DataLoss(what + " is missing");
      RETURN_IF_ERROR(FromRocks(statuses[k], "reading " + what));
      if (grid.empty()) {
        RETURN_IF_ERROR(DecodeEntryPiecesPage(values[k].ToStringView(), md, e, p, &rec.pages[i][p], &pieces));
      } else {
        const PiecesPage cell = GridCellPage(e.shape, grid, p);
        RETURN_IF_ERROR(DecodeEntryPiecesPage(values[k].ToStringView(), md, e, p, &cell, &pieces, /*per_page=*/1));
      }
    }
    if (read == total) {
      RETURN_IF_ERROR(AdoptEntryPieces(std::move(pieces), md, &e));
    } else {
      RETURN_IF_ERROR(AdoptPartialEntryPieces(std::move(pieces), md, &e));
    }
  }
  return std::move(md);
}

StatusOr<StepMetadata> DecodeStepHeader(int64_t step, std::string_view metadata_value) {
  ASSIGN_OR_RETURN(MetadataRecord rec, DecodeRecordOf(step, metadata_value));
  return std::move(rec.metadata);
}

Status AddStepRecordPut(const StepMetadata& m, const std::vector<std::optional<PiecesGrid>>& grids,
                        rocksdb::WriteBatch* batch) {
  if (m.entries.size() > UINT32_MAX) return Status::InvalidArgument("too many entries in one step");
  return FromRocks(batch->Put(MetadataKey(m.step), EncodeMetadataRecord(m, /*paged=*/true, &grids)), "metadata batch");
}

Status ForEachPiecesRecord(const StepMetadata& m, const std::vector<std::optional<PiecesGrid>>& grids,
                           const std::function<Status(const std::string& key, const std::string& value)>& put) {
  if (m.entries.size() > UINT32_MAX) return Status::InvalidArgument("too many entries in one step");
  for (size_t i = 0; i < m.entries.size(); ++i) {
    const uint32_t entry = static_cast<uint32_t>(i);
    if (const std::optional<PiecesGrid>& grid = grids.at(i)) {
      for (uint32_t c = 0; c < grid->piece_of_cell.size(); ++c) {
        RETURN_IF_ERROR(put(PiecesPageKey(m.step, entry, c), EncodeEntryPiecesCell(m, i, *grid, c)));
      }
      continue;
    }
    const size_t n = m.entries[i].pieces.size();
    if (n <= kPiecesPerPage) {
      RETURN_IF_ERROR(put(PiecesKey(m.step, entry), EncodeEntryPiecesValue(m, i)));
      continue;
    }
    const uint32_t pages = static_cast<uint32_t>((n + kPiecesPerPage - 1) / kPiecesPerPage);
    for (uint32_t p = 0; p < pages; ++p) {
      RETURN_IF_ERROR(put(PiecesPageKey(m.step, entry, p), EncodeEntryPiecesPage(m, i, p)));
    }
  }
  return Status::OK();
}

StatusOr<uint64_t> WritePiecesRecordsFile(const StepMetadata& m, const std::vector<std::optional<PiecesGrid>>& grids,
                                          const rocksdb::Options& options, const std::string& path) {
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), options);
  bool opened = false;
  uint64_t records = 0;
  Status written = ForEachPiecesRecord(m, grids, [&](const std::string& key, const std::string& value) -> Status {
    if (!opened) {
      RETURN_IF_ERROR(FromRocks(writer.Open(path), "opening " + path));
      opened = true;
    }
    ++records;
    return FromRocks(writer.Put(key, value), "writing the pieces records of step " + std::to_string(m.step));
  });
  RETURN_IF_ERROR(written);
  if (opened) RETURN_IF_ERROR(FromRocks(writer.Finish(), "writing " + path));
  return records;
}

Status AddPiecesRecordsDelete(rocksdb::DB* db, int64_t step, rocksdb::WriteBatch* batch) {
  return FromRocks(batch->DeleteRange(db->DefaultColumnFamily(), PiecesStepBegin(step), PiecesStepEnd(step)),
                   "deleting the pieces records of step " + std::to_string(step));
}

Status AddStepMetadataDeletes(rocksdb::DB* db, int64_t step, rocksdb::WriteBatch* batch) {
  RETURN_IF_ERROR(FromRocks(batch->Delete(MetadataKey(step)), "delete batch"));
  return AddPiecesRecordsDelete(db, step, batch);
}

}  // namespace ckptdb
