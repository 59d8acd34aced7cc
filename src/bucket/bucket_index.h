// The history of a bucket store, PREFIX/index (proto/FORMAT.md, "Bucket
// stores"): every committed step with its summary and the saves whose data
// objects it reads, and every tag. Every change to the history (a commit
// with its retention, a delete, a tag) is one conditional write of this one
// object (If-None-Match: * for the first, If-Match: ETAG after), so a
// reader that GETs it sees one consistent history and `ls` is one GET.
#ifndef CKPTDB_SRC_BUCKET_BUCKET_INDEX_H_
#define CKPTDB_SRC_BUCKET_BUCKET_INDEX_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/status.h"
#include "bucket/sst_object_source.h"
#include "format/step_records.h"
#include "s3/s3_client.h"

namespace ckptdb {
namespace bucket {

struct IndexStep {
  int64_t step = 0;
  StepSummary summary;        // save_id: the save whose record is the step's
  std::vector<SaveRef> uses;  // the saves whose data objects the step reads (its own included), sorted
};

// The objects that hold, since gc rewrote them (StoreWriter::ReclaimSpace),
// the chunks the steps of the index use of a save whose own step is gone:
// they replace every object of that save that a step record lists.
struct RewrittenSave {
  uint64_t rewrite_id = 0;  // their folder: data/<step>/<save id>/<rewrite id, 16 hex>/
  std::vector<SstObject> objects;
};

struct BucketIndex {
  std::map<int64_t, IndexStep> steps;
  std::map<std::string, int64_t> tags;
  // Version 2 (written only when a save was rewritten; version 1 otherwise,
  // so a store gc never rewrote stays readable by earlier writers).
  std::map<SaveRef, RewrittenSave> rewritten;
};

// The objects that hold now what `recorded` (a step record's list) held: the
// objects of a rewritten save replaced by its rewrite's, the others as they
// are, in order.
std::vector<SstObject> ObjectsNow(const BucketIndex& index, const std::string& prefix,
                                  std::vector<SstObject> recorded);

// Drops the rewrites of saves no step of `index` uses any more.
void ForgetUnusedRewrites(BucketIndex* index);

std::string EncodeBucketIndex(const BucketIndex& index);
// DataLoss saying what is wrong (the caller names the object).
StatusOr<BucketIndex> DecodeBucketIndex(std::string_view value);

// The index as read, with what a conditional write of its successor needs.
struct IndexSnapshot {
  BucketIndex index;
  bool exists = false;  // false: no index yet (an empty store, or none)
  std::string etag;     // when it exists
};

// GETs PREFIX/index (`prefix` "" or ending in '/'). A missing index is an
// empty snapshot (exists false); a damaged one DataLoss naming it.
StatusOr<IndexSnapshot> ReadIndex(s3::S3Client* client, const std::string& bucket, const std::string& prefix);

// Reads the index, lets `change` edit it, and writes it back conditionally;
// on a lost race (another writer changed it in between) reads it again and
// calls `change` anew, up to a bounded number of times with jittered
// backoff. `change` returns an error to give up without writing (returned
// as is), or OK. Returns the snapshot written. A write that fails without
// an answer is read back by the client (its own bytes there are success).
StatusOr<IndexSnapshot> UpdateIndex(s3::S3Client* client, const std::string& bucket, const std::string& prefix,
                                    const std::function<Status(BucketIndex*)>& change);

std::string IndexKey(const std::string& prefix);

}  // namespace bucket
}  // namespace ckptdb

#endif  // CKPTDB_SRC_BUCKET_BUCKET_INDEX_H_
