// A checkpoint store in an S3 bucket, behind the StorageWriter and
// StorageReader seams (ckptdb/storage.h): every rank uploads its own SST
// files straight into the bucket, the coordinator commits the step with one
// conditional put. Internal for now: not reachable from the public API, the
// Python package or the CLI (no s3:// URLs yet).
//
// Layout under PREFIX (proto/FORMAT.md, "Bucket stores"):
//   PREFIX/data/<step, 20 digits>/<save id, 16 hex>/rank-<R>-<N>.sst
//       a rank's SST files of one save attempt, written with
//       SstObjectWriteOptions() (one chunk per data block)
//   PREFIX/steps/<step, 20 digits>
//       the step record: a chunk value (format/chunk_codec.h, checksummed)
//       holding the step's metadata value (EncodeMetadataValue) and the
//       list of its data objects with their sizes and key ranges.
//
// Commit point: the coordinator's Finish writes the step record with
// If-None-Match: *. Before it no reader sees the step; after it, all of it.
// Two saves of one step: exactly one put succeeds, the other save gets
// AlreadyExists, and its data objects (under its own save id, referenced by
// no record) are deleted by its Abort (best effort). A record put that fails
// without an answer (the client's retries spent) may have landed: Finish
// reads the record back and succeeds when it is this save's; Abort deletes
// the save's objects only when the step's record is read back and is not
// this save's (absent or another save's), and otherwise leaves them.
//
// Not done in this first version: no deduplication (FindReusable returns no
// candidates, every chunk is uploaded), no retention, no tags, no step
// deletion and no gc of the leftovers of saves that died before their Abort.
#ifndef CKPTDB_SRC_BUCKET_BUCKET_STORE_H_
#define CKPTDB_SRC_BUCKET_BUCKET_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bucket/sst_object_source.h"
#include "ckptdb/rocksdb_store.h"
#include "ckptdb/status.h"
#include "ckptdb/storage.h"
#include "s3/s3_client.h"

namespace ckptdb {
namespace bucket {

struct BucketWriteOptions {
  // Where a rank writes its SST files before uploading them (each is removed
  // once uploaded, or when the Write fails). Empty: the system's temporary
  // directory.
  std::string local_dir;
  // Files of at least this many bytes are uploaded in parts (multipart
  // upload), smaller ones with one PutObject.
  uint64_t multipart_threshold = 16u << 20;
  // Bytes per part. S3 wants at least 5 MiB for every part but the last;
  // SeaweedFS accepts smaller parts (the tests use them).
  uint64_t part_bytes = 8u << 20;
  // Parts uploaded at once per file; each holds one part in memory.
  int upload_threads = 4;
};

// The step record's object key and the prefix of the data objects of one
// save attempt, both under `prefix` ("" or ending in '/').
std::string StepRecordKey(const std::string& prefix, int64_t step);
std::string SaveDataPrefix(const std::string& prefix, int64_t step, uint64_t save_id);

// What a step record holds.
struct StepRecord {
  std::string metadata_value;  // EncodeMetadataValue of the step's metadata
  std::vector<SstObject> objects;
};
std::string EncodeStepRecord(const StepRecord& record);
// DataLoss describing what is wrong (the caller names the object).
StatusOr<StepRecord> DecodeStepRecord(std::string_view value);

// A writer into s3://bucket/prefix. `prefix` may be empty; a '/' is added
// when it lacks one. Every rank of a save opens its own. delivery() is
// kShared: every rank reaches the bucket. `client` must outlive the writer.
// InvalidArgument for bad StoreOptions (as OpenStoreWriter).
StatusOr<std::unique_ptr<StorageWriter>> OpenBucketStoreWriter(s3::S3Client* client, const std::string& bucket,
                                                               const std::string& prefix,
                                                               const StoreOptions& options = {},
                                                               const BucketWriteOptions& write_options = {});

class BucketStoreReader : public StorageReader {
 public:
  // Committed steps in increasing order, from one listing of PREFIX/steps/
  // (no GET per step).
  virtual StatusOr<std::vector<int64_t>> ListSteps() = 0;
};

// A reader of s3://bucket/prefix: ReadMetadata GETs the step record
// (NotFound naming the step when it is not committed, DataLoss naming the
// record when its checksum or layout is wrong); Read opens the step's data
// objects (sizes known from the record: no HEAD; NotFound naming an object
// that is missing) and fetches only the chunks the items need, verifying
// each. `client` must outlive the reader.
StatusOr<std::unique_ptr<BucketStoreReader>> OpenBucketStoreReader(s3::S3Client* client, const std::string& bucket,
                                                                   const std::string& prefix, int read_threads = 8);

}  // namespace bucket
}  // namespace ckptdb

#endif  // CKPTDB_SRC_BUCKET_BUCKET_STORE_H_
