// The keys of a bucket store's objects under its prefix (proto/FORMAT.md,
// "Bucket stores"), made and parsed in one place. `prefix` is "" or ends in
// '/'.
//   steps/<step>/<save id>              a save's step record
//   data/<step>/<save id>/NAME          a rank's SST object of the save
//   data/<step>/<save id>/<rewrite id>/NAME
//                                       an object gc rewrote from one of
//                                       those (bucket/object_rewrite.h)
//   pending/<step>-<save id>-<unix ms>  a running save's marker
//   rewrites/<step>-<save id>-<rewrite id>
//                                       a running or recent rewrite's marker
// <step> is 20 decimal digits (listings come in step order), ids 16
// lowercase hex digits.
#ifndef CKPTDB_SRC_BUCKET_OBJECT_KEYS_H_
#define CKPTDB_SRC_BUCKET_OBJECT_KEYS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "format/step_records.h"

namespace ckptdb {
namespace bucket {

std::string Step20(int64_t step);
std::string Hex16(uint64_t v);
bool ParseHex16(std::string_view s, uint64_t* v);

// "<step20>/<id16>..." or "<step20>-<id16>..." (what follows is the caller's).
bool ParseSaveRef(std::string_view s, char sep, SaveRef* ref);

std::string StepRecordKey(const std::string& prefix, int64_t step, uint64_t save_id);
std::string SaveDataPrefix(const std::string& prefix, int64_t step, uint64_t save_id);
std::string PendingKey(const std::string& prefix, int64_t step, uint64_t save_id, int64_t unix_ms);
// The folder of one rewrite of a save's objects, and its marker.
std::string RewriteDataPrefix(const std::string& prefix, const SaveRef& save, uint64_t rewrite_id);
std::string RewriteMarkerKey(const std::string& prefix, const SaveRef& save, uint64_t rewrite_id);

// The save a data object (`key`, under prefix + "data/") belongs to; false
// for any other key.
bool SaveOfDataObject(const std::string& prefix, std::string_view key, SaveRef* save);

}  // namespace bucket
}  // namespace ckptdb

#endif  // CKPTDB_SRC_BUCKET_OBJECT_KEYS_H_
