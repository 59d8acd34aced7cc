#include "store/metadata_records.h"

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

Status ReadEntryPiecesRecords(rocksdb::DB* db, StepMetadata* md, const std::vector<uint32_t>& indices) {
  if (indices.empty()) return Status::OK();
  std::vector<std::string> keys;
  keys.reserve(indices.size());
  for (uint32_t i : indices) keys.push_back(PiecesKey(md->step, i));
  std::vector<rocksdb::Slice> slices(keys.begin(), keys.end());
  std::vector<rocksdb::PinnableSlice> values(keys.size());
  std::vector<rocksdb::Status> statuses(keys.size());
  rocksdb::ReadOptions ro;
  db->MultiGet(ro, db->DefaultColumnFamily(), keys.size(), slices.data(), values.data(), statuses.data(),
               /*sorted_input=*/true);
  for (size_t k = 0; k < indices.size(); ++k) {
    EntryMetadata& e = md->entries[indices[k]];
    const std::string what = "the pieces record of entry '" + e.fqn + "' of step " + std::to_string(md->step);
    if (statuses[k].IsNotFound()) return Status::DataLoss(what + " is missing");
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

StatusOr<StepMetadata> DecodeStepHeader(int64_t step, std::string_view metadata_value) {
  ASSIGN_OR_RETURN(MetadataRecord rec, DecodeRecordOf(step, metadata_value));
  return std::move(rec.metadata);
}

Status AddStepMetadataPuts(const StepMetadata& m, rocksdb::WriteBatch* batch) {
  if (m.entries.size() > UINT32_MAX) return Status::InvalidArgument("too many entries in one step");
  RETURN_IF_ERROR(FromRocks(batch->Put(MetadataKey(m.step), EncodeMetadataRecord(m)), "metadata batch"));
  for (size_t i = 0; i < m.entries.size(); ++i) {
    RETURN_IF_ERROR(FromRocks(batch->Put(PiecesKey(m.step, static_cast<uint32_t>(i)), EncodeEntryPiecesValue(m, i)),
                              "metadata batch"));
  }
  return Status::OK();
}

Status AddStepMetadataDeletes(rocksdb::DB* db, int64_t step, rocksdb::WriteBatch* batch) {
  RETURN_IF_ERROR(FromRocks(batch->Delete(MetadataKey(step)), "delete batch"));
  return FromRocks(batch->DeleteRange(db->DefaultColumnFamily(), PiecesStepBegin(step), PiecesStepEnd(step)),
                   "delete batch");
}

}  // namespace ckptdb
