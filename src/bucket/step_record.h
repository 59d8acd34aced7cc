// A bucket step's record: the object (steps/STEP/SAVE_ID) that holds a
// committed step's metadata and the SST objects its chunks lie in
// (proto/FORMAT.md, "Bucket stores"). Written once, before the index names
// the step; never changed.
//
// Version 2 (written now) lets a reader fetch what it needs by ranged GETs:
//   [0, 18)       "ckptdb-bucket-step"
//   [18]          2
//   [19, 27)      H, u64 little-endian: the head's size
//   [27, 27 + H)  the head: one chunk value (checksummed) of the step's
//                 metadata record with the pieces apart (EncodeMetadataRecord:
//                 entries, kinds, dtypes, shapes, totals), the objects, and
//                 where each entry's pieces value lies in the record
//   then          each entry's pieces value (EncodeEntryPiecesValue: a chunk
//                 value of its own, checksummed), in entry order.
// A load of some entries reads the head (one GET of the first 64 KiB, a
// second when the head is longer) and their pieces (one GET per run of
// adjacent ones): what it reads does not grow with the entries it skips or
// with the pieces of the ranks it does not load.
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

// Version 2 of `m` (whole, validated by the caller) and its objects.
std::string EncodeStepRecordV2(const StepMetadata& m, const std::vector<SstObject>& objects);

// Bytes a reader fetches first: the whole head of most steps.
inline constexpr uint64_t kStepRecordFirstRead = 64 << 10;

// Where the head of a record ends, from at least its first 27 bytes (fewer
// only when the record is that short): 0 for a version-1 record (read it
// whole). DataLoss when the bytes are neither version's.
StatusOr<uint64_t> StepRecordHeadEnd(std::string_view first);

struct ByteRange {
  uint64_t offset = 0;
  uint64_t size = 0;
};

// A version-2 record's head.
struct StepRecordHead {
  StepMetadata summary;  // every entry with pieces_omitted (header validated)
  std::vector<SstObject> objects;
  std::vector<ByteRange> pieces;  // entry i's pieces value in the record
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
