// A step's metadata records in the RocksDB store (proto/FORMAT.md, "Keys"):
// the M value, and, for a step written in store format 6, one pieces record
// per entry (Q | step | entry), or for an entry of many pieces (format 7),
// one per page of them (Q | step | entry | page). The one place the writer and the reader read
// a step's metadata, whole or for some entries only, and write or delete its
// records.
#ifndef CKPTDB_SRC_STORE_METADATA_RECORDS_H_
#define CKPTDB_SRC_STORE_METADATA_RECORDS_H_

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/status.h"
#include "ckptdb/storage.h"
#include "format/metadata_codec.h"

namespace ckptdb {

// The whole metadata of `step`: its M value and, when the pieces are apart,
// every entry's pieces record, validated as one (ValidateStepMetadata).
// NotFound (message "step N not found") when the step has no M record;
// DataLoss naming the step (and the entry) when a record is unreadable,
// missing or inconsistent.
StatusOr<StepMetadata> ReadStepMetadata(rocksdb::DB* db, int64_t step);
// The same from the step's M value, read already (an iteration).
StatusOr<StepMetadata> CompleteStepMetadata(rocksdb::DB* db, int64_t step, std::string_view metadata_value);
// The step's metadata with the pieces of the entries `fqns` names only (names
// the step lacks are ignored): every other entry has pieces_omitted set. Each
// entry returned with its pieces is validated; only the named entries'
// pieces records are read (one MultiGet).
StatusOr<StepMetadata> CompleteStepMetadataOf(rocksdb::DB* db, int64_t step, std::string_view metadata_value,
                                              const std::vector<std::string>& fqns);
// As CompleteStepMetadataOf, reading of an entry kept in pages (store
// format 7) that `regions` names only the pages whose boxes meet one of its
// regions (one MultiGet for them all): such an entry gets those pages'
// pieces, with pieces_partial set unless that is every page. Each page read
// is validated (DataLoss naming it, the entry and the step).
StatusOr<StepMetadata> CompleteStepMetadataFor(rocksdb::DB* db, int64_t step, std::string_view metadata_value,
                                               const std::vector<std::string>& fqns,
                                               const std::vector<EntryRegion>& regions);
// Reads the pieces records of the entries of `md` (a format-6 step's, as
// read from its M value) at `indices` (increasing) into them, with one
// MultiGet; an entry kept in pages (store format 7), all its pages. DataLoss
// naming the first entry whose record (or page) is missing or unreadable (it
// keeps its pieces omitted).
Status ReadEntryPiecesRecords(rocksdb::DB* db, StepMetadata* md, const std::vector<uint32_t>& indices);
// Only what the M value says without the pieces (save id, metrics, entries'
// names and shapes): DataLoss when unreadable.
StatusOr<StepMetadata> DecodeStepHeader(int64_t step, std::string_view metadata_value);

// Adds the record that commits `m`, its M value (with `grids`, GridsOf(m):
// the entries on a grid record it), to `batch`.
Status AddStepRecordPut(const StepMetadata& m, const std::vector<std::optional<PiecesGrid>>& grids,
                        rocksdb::WriteBatch* batch);
// Calls `put` with the key and value of each pieces record of `m`, in key
// order: an entry's one record, or its pages, or, with a grid (grids[i]),
// its cells. Stops at the first error `put` returns.
Status ForEachPiecesRecord(const StepMetadata& m, const std::vector<std::optional<PiecesGrid>>& grids,
                           const std::function<Status(const std::string& key, const std::string& value)>& put);
// Writes every pieces record of `m` into a new SST file at `path` (synced
// when finished), to be ingested before the batch that puts its M value:
// what a write batch, the log and a memtable would each hold a copy of
// otherwise. Returns how many records it holds; with none, no file is
// written.
StatusOr<uint64_t> WritePiecesRecordsFile(const StepMetadata& m, const std::vector<std::optional<PiecesGrid>>& grids,
                                          const rocksdb::Options& options, const std::string& path);
// Adds the range delete of every pieces record of step `step` to `batch`.
Status AddPiecesRecordsDelete(rocksdb::DB* db, int64_t step, rocksdb::WriteBatch* batch);
// Adds the deletes of step `step`'s M value and of every pieces record of it
// (a range delete: none is left whatever the M value says) to `batch`.
Status AddStepMetadataDeletes(rocksdb::DB* db, int64_t step, rocksdb::WriteBatch* batch);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_STORE_METADATA_RECORDS_H_
