// The small records kept beside each step's metadata (proto/FORMAT.md,
// "Summary records" and "Tags"): a fixed-size summary per step, so that
// listing thousands of steps does not decode every Metadata, and the value of
// a tag. Both are stored as chunk values (chunk_codec.h), so they carry a
// checksum like every other value. Pure encoding: no I/O.
#ifndef CKPTDB_SRC_STEP_RECORDS_H_
#define CKPTDB_SRC_STEP_RECORDS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/rocksdb_store.h"
#include "ckptdb/status.h"

namespace ckptdb {

// Version 1: the fixed fields (kSummaryRawSize bytes). Version 2 (written
// only for steps with metrics or a note): the same, then the metrics and
// the note.
inline constexpr uint8_t kSummaryVersion = 1;
inline constexpr uint8_t kSummaryVersionWithMetrics = 2;
inline constexpr size_t kSummaryRawSize = 45;

// The summary record of a step: what `ListSteps` reports, plus the save id
// (so that a summary can be matched with its metadata).
struct StepSummary {
  int64_t created_unix_ms = 0;
  int32_t world_size = 1;
  uint64_t entries = 0;
  uint64_t logical_bytes = 0;
  uint64_t stored_bytes = 0;
  uint64_t save_id = 0;
  std::map<std::string, double> metrics;
  std::string note;
};

StepSummary SummarizeStep(const StepMetadata& m);
std::string EncodeSummaryValue(const StepSummary& s);
// DataLoss when the value is corrupt or of an unknown version.
StatusOr<StepSummary> DecodeSummaryValue(std::string_view value);

// A save attempt whose data keys a step's chunk references point into.
struct SaveRef {
  int64_t step = 0;
  uint64_t save_id = 0;
  friend bool operator<(const SaveRef& a, const SaveRef& b) {
    return a.step != b.step ? a.step < b.step : a.save_id < b.save_id;
  }
  friend bool operator==(const SaveRef& a, const SaveRef& b) { return a.step == b.step && a.save_id == b.save_id; }
};

// The distinct save attempts a step's references point into, sorted.
std::vector<SaveRef> ReferencedSaves(const StepMetadata& m);
// The value under R|step: version 1, then a u32 count and (step, save id)
// per referenced save, little-endian, as a chunk value (codec 0).
std::string EncodeReferencesValue(const std::vector<SaveRef>& saves);
// DataLoss when the value is corrupt or of an unknown version.
StatusOr<std::vector<SaveRef>> DecodeReferencesValue(std::string_view value);

// The value under a tag key: the step it names.
std::string EncodeTagValue(int64_t step);
StatusOr<int64_t> DecodeTagValue(std::string_view value);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_STEP_RECORDS_H_
