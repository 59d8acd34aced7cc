// A checkpoint store in an S3 bucket, s3://BUCKET/PREFIX: the StoreWriter
// and StoreReader that the public OpenStoreWriter / OpenStoreReader return
// for such a URL (open/open_store.cc). Every rank uploads its own SST files
// straight into the bucket; the coordinator commits the step with one
// conditional write of the store's index.
//
// Layout under PREFIX (proto/FORMAT.md, "Bucket stores"):
//   PREFIX/index
//       the history (bucket/bucket_index.h): every committed step with its
//       summary and the saves whose objects it reads, and every tag. Each
//       change to the history (commit + retention, delete, tag) is one
//       conditional write of it: the commit point.
//   PREFIX/steps/<step, 20 digits>/<save id, 16 hex>
//       the step record of one save: a chunk value (format/chunk_codec.h,
//       checksummed) holding the step's metadata value (EncodeMetadataValue)
//       and the list of the data objects it reads with their sizes and key
//       ranges (its own, and those of earlier saves it shares chunks with).
//   PREFIX/data/<step>/<save id>/rank-<R>-<N>.sst
//       a rank's SST files of one save attempt, written with
//       SstObjectWriteOptions() (one chunk per data block)
//   PREFIX/data/<step>/<save id>/<rewrite id>/rank-<R>-<N>.sst
//       gc's rewrite of such an object with only the chunks kept steps still
//       use (ReclaimSpace, bucket/object_rewrite.h), once the save's own step
//       is gone; the index names the save's objects from then on
//       (RewrittenSave), and a record's list of them is read through it
//   PREFIX/rewrites/<step>-<save id>-<rewrite id>
//       an empty marker: a rewrite is running (refreshed as a save's), or
//       committed lately; gc deletes the objects it replaced once the marker
//       is older than abandoned_save_seconds
//   PREFIX/pending/<step>-<save id>-<unix ms>
//       an empty marker: the save is running (written by Prepare, before any
//       rank uploads, and again every quarter of abandoned_save_seconds
//       while it runs (bucket/save_marker.h); deleted when the save ends).
//       gc keeps the objects of a save whose marker is younger than
//       StoreOptions.abandoned_save_seconds by the server's clock (its
//       LastModified against the listing's Date); the commit refuses a save
//       whose marker went unrefreshed for half of that.
//   PREFIX/probe/<random>
//       a moment's object: the check, before a writer's first write of the
//       history, that the server enforces conditional writes
//       (bucket/conditional_probe.h); writing is refused where it does not.
//
// A step is visible exactly when the index names it. Readers find steps
// only through the index and objects only through a record the index
// names, so before the commit no reader sees any part of the step, after it
// all of it. Two saves of one step: exactly one index write names the step
// first; the other save gets AlreadyExists and its objects (under its own
// save id) are deleted by its Abort (or by gc, when it died first).
//
// Each rank's SST files (of at most BucketWriteOptions.upload_file_bytes)
// stream into the bucket while SstFileWriter writes them
// (bucket/object_upload_env.h): multipart, parts in parallel, bounded
// memory, no local copy; gc also aborts the multipart uploads a killed rank
// left open.
#ifndef CKPTDB_SRC_BUCKET_BUCKET_STORE_H_
#define CKPTDB_SRC_BUCKET_BUCKET_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bucket/object_keys.h"
#include "bucket/sst_object_source.h"
#include "bucket/step_record.h"
#include "ckptdb/rocksdb_store.h"
#include "ckptdb/status.h"
#include "ckptdb/storage.h"
#include "s3/s3_client.h"

namespace ckptdb {
namespace bucket {

struct BucketWriteOptions {
  // Bytes per part of a multipart upload (a file smaller than one part is
  // one PutObject). S3 and SeaweedFS want at least 5 MiB for every part but
  // the last.
  uint64_t part_bytes = 8u << 20;
  // Parts of a file uploading at once; a file holds about
  // (upload_threads + 1) x part_bytes in memory.
  int upload_threads = 4;
  // A rank's share is cut into objects of at most this many bytes (or
  // StoreOptions.max_sst_file_bytes, when smaller).
  uint64_t upload_file_bytes = 64u << 20;
  // Added to this host's clock where the writer reads it (the time in a
  // pending marker's name), to test hosts whose clocks differ: nothing the
  // store decides rests on it (gc judges by the server's clock).
  int64_t host_clock_offset_ms = 0;
};

// `prefix` as the store's keys begin with it: "" or ending in '/'.
std::string StorePrefix(const std::string& prefix);



// A writer into s3://bucket/prefix. `prefix` may be empty; a '/' is added
// when it lacks one. Every rank of a save opens its own. delivery() is
// kShared: every rank reaches the bucket. `client` is shared by the
// writer. InvalidArgument for bad StoreOptions (as OpenStoreWriter).
// Nothing is read or written until the first call.
StatusOr<std::unique_ptr<StoreWriter>> OpenBucketStoreWriter(std::shared_ptr<s3::S3Client> client,
                                                             const std::string& bucket, const std::string& prefix,
                                                             const StoreOptions& options = {},
                                                             const BucketWriteOptions& write_options = {});

// A reader of s3://bucket/prefix as of its index now (Refresh re-reads it).
// NotFound naming the bucket when it does not exist, and naming the store
// when it has no index (no step was ever committed there); DataLoss naming
// the index when it is damaged. ReadMetadata GETs the step's record whole;
// ReadMetadataOf, ReadStepSummary and ReadEntryPieces GET its head and the
// named entries' pieces only (bucket/step_record.h); DataLoss naming the
// record, and the entry, when a checksum or the layout is wrong. Read opens
// an object the record lists when it first needs a chunk of it (sizes known:
// no HEAD; DataLoss naming a missing one) and fetches only the chunks the
// items need, verifying each.
StatusOr<std::unique_ptr<StoreReader>> OpenBucketStoreReader(std::shared_ptr<s3::S3Client> client,
                                                             const std::string& bucket, const std::string& prefix,
                                                             int read_threads = 8);

// A client made from the environment's settings and limits
// (s3::S3Settings::FromEnvironment: AWS's variables and files); a positive
// stall_timeout_seconds (StoreOptions, ReaderOptions) wins over
// CKPTDB_S3_STALL_TIMEOUT.
StatusOr<std::shared_ptr<s3::S3Client>> ClientFromEnvironment(int64_t stall_timeout_seconds);

// Threads a bucket reader of `options` fetches on: options.threads, else
// at least 8 (a GET waits on the network more than on a core).
int ReadThreads(const ReaderOptions& options);

// The same for a store URL s3://BUCKET/PREFIX, with a client made from the
// environment's settings (s3::S3Settings::FromEnvironment: AWS's variables
// and files).
StatusOr<std::unique_ptr<StoreWriter>> OpenBucketStoreWriterAt(const std::string& url, const StoreOptions& options);
StatusOr<std::unique_ptr<StoreReader>> OpenBucketStoreReaderAt(const std::string& url, const ReaderOptions& options);

}  // namespace bucket
}  // namespace ckptdb

#endif  // CKPTDB_SRC_BUCKET_BUCKET_STORE_H_
