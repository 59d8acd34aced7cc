// A bucket step's record: the object (steps/STEP/SAVE_ID) that holds a
// committed step's metadata and the SST objects its chunks lie in
// (proto/FORMAT.md, "Bucket stores"). Written once, before the index names
// the step; never changed.
//
// Version 3 (written now) lets a reader fetch what it needs by ranged GETs:
//   [0, 18)       "ckptdb-bucket-step"
//   [18]          3
//   [19, 27)      H, u64 little-endian: the head's size
//   [27, 27 + H)  the head: one chunk value (checksummed) of the step's
//                 metadata record with the pieces apart (EncodeMetadataRecord:
//                 entries, kinds, dtypes, shapes, totals, and the pages of
//                 an entry of many pieces with their boxes: PagesOf), the
//                 objects, and where each entry's pieces values lie in the
//                 record
//   then          each entry's pieces value (EncodeEntryPiecesValue: a chunk
//                 value of its own, checksummed), or, for an entry kept in
//                 pages, each page's (EncodeEntryPiecesPage), in entry order.
// A load of some entries reads the head (one GET of the first 64 KiB, a
// second when the head is longer) and their pieces, of an entry in pages
// only the pages that meet what it loads (one GET per run of adjacent
// values): what it reads does not grow with the entries it skips or with
// the pieces of the ranks it does not load.
//
// Version 2 (written before pages): the same with one pieces value per
// entry (the head's table: one range per entry, no count).
//
// Version 1 (stores written before): one chunk value of the metadata with
// every entry's pieces inline and the objects; read whole.
#ifndef CKPTDB_SRC_BUCKET_STEP_RECORD_H_
#define CKPTDB_SRC_BUCKET_STEP_RECORD_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bucket/sst_object_source.h"
#include "ckptdb/metadata.h"
#include "ckptdb/status.h"
#include "format/metadata_codec.h"

namespace ckptdb {
namespace bucket {

// Version 1's contents.
struct StepRecord {
  std::string metadata_value;  // EncodeMetadataValue of the step's metadata
  std::vector<SstObject> objects;
};
std::string EncodeStepRecord(const StepRecord& record);
// DataLoss describing what is wrong (the caller names the object).
StatusOr<StepRecord> DecodeStepRecord(std::string_view value);

// Version 3 of `m` (whole, validated by the caller) and its objects;
// `version` 2 writes what writers before pages wrote (tests).
std::string EncodeHeadedStepRecord(const StepMetadata& m, const std::vector<SstObject>& objects, int version = 3);

// Bytes a reader fetches first: the whole head of most steps.
inline constexpr uint64_t kStepRecordFirstRead = 64 << 10;

// Where the head of a record ends, from at least its first 27 bytes (fewer
// only when the record is that short): 0 for a version-1 record (read it
// whole). Versions 2 and 3 have heads. DataLoss when the bytes are neither version's.
StatusOr<uint64_t> StepRecordHeadEnd(std::string_view first);

struct ByteRange {
  uint64_t offset = 0;
  uint64_t size = 0;
};

// A version-2 or 3 record's head.
struct StepRecordHead {
  StepMetadata summary;  // every entry with pieces_omitted (header validated)
  std::vector<SstObject> objects;
  // Entry i's pieces values in the record: one, or one per page (pages[i]).
  std::vector<std::vector<ByteRange>> pieces;
  std::vector<std::vector<PiecesPage>> pages;  // (empty per entry in version 2)
};
// From the record's bytes [0, StepRecordHeadEnd). DataLoss when damaged.
StatusOr<StepRecordHead> DecodeStepRecordHead(std::string_view region);

// A record of either version, read whole: the metadata with every entry's
// pieces, validated, and the objects. DataLoss naming what is wrong.
struct WholeStepRecord {
  StepMetadata metadata;
  std::vector<SstObject> objects;
};
StatusOr<WholeStepRecord> DecodeWholeStepRecord(std::string_view value);

}  // namespace bucket
}  // namespace ckptdb

#endif  // CKPTDB_SRC_BUCKET_STEP_RECORD_H_
