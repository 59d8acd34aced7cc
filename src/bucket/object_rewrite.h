// gc's rewrite of a bucket save's objects (StoreWriter::ReclaimSpace on
// s3://, proto/FORMAT.md §9 "Rewriting partly used objects"): when a save's
// own step is deleted, the chunks that kept steps still share stay in its
// objects beside chunks no step uses any more. Each object whose unused
// share reaches a threshold is written again, holding the used chunks
// alone, into a folder of its own under the save's data prefix; the stored
// values and their keys are copied as they are (a chunk's key names the
// save that wrote it, so no metadata changes: only the objects that hold
// the keys do, and the index names them, bucket_index.h RewrittenSave).
//
// This file makes the new objects; committing them (one conditional index
// write) and deleting the old ones (gc, once no reader can still hold them)
// are bucket_store.cc's.
#ifndef CKPTDB_SRC_BUCKET_OBJECT_REWRITE_H_
#define CKPTDB_SRC_BUCKET_OBJECT_REWRITE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "bucket/sst_object_source.h"
#include "ckptdb/status.h"
#include "s3/s3_client.h"
#include "store/shared_chunks.h"

namespace ckptdb {
namespace bucket {

struct SaveRewrite {
  // The save's objects after the rewrite: those kept as they were, in their
  // places, and the rewritten ones; an object with no used chunk is gone.
  std::vector<SstObject> objects;
  bool changed = false;           // some object was rewritten or dropped
  uint64_t files_rewritten = 0;   // (and dropped)
  uint64_t bytes_before = 0;      // their sizes
  uint64_t bytes_after = 0;       // the new objects' (a dry run: their used blocks')
  uint64_t files_left = 0;        // kept with unused chunks below the threshold
  uint64_t unused_bytes_left = 0;
  uint64_t files_unknown = 0;     // kept: no block-starts property, so their unused bytes are unknown
};

struct RewriteOptions {
  double min_unused_fraction = 0.05;  // as ReclaimOptions
  bool dry_run = false;
  int threads = 8;                    // GETs of one object's chunks in flight
  // Objects decided and rewritten at once; memory: about 3 upload parts and
  // 2 x threads runs of chunks each.
  int objects_at_once = 4;
  s3::S3Client* cleanup_client = nullptr;  // deletes what a failed rewrite uploaded (null: the client)
};

// Rewrites the objects of one save (`objects`, every object the steps read
// of it) that hold chunks outside `used` (the data key ranges kept steps
// use of it, sorted and merged: UsedRangesOfSharedSaves) into
// `folder` (RewriteDataPrefix, a new rewrite id), each new object named as
// the one it replaces. Unused bytes are the blocks of the keys outside
// `used` (the objects' block-starts property); an object without it is kept.
// Every chunk value is fetched by ranged GETs (blocks checked by RocksDB)
// and written with SstObjectWriteOptions(). On failure what was uploaded is
// deleted (best effort; gc deletes the rest) and the error names the object.
StatusOr<SaveRewrite> RewriteSaveObjects(s3::S3Client* client, const std::string& bucket,
                                         const std::vector<SstObject>& objects, const std::vector<KeyRange>& used,
                                         const std::string& folder, const RewriteOptions& options);

}  // namespace bucket
}  // namespace ckptdb

#endif  // CKPTDB_SRC_BUCKET_OBJECT_REWRITE_H_
