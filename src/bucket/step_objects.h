// A bucket step's SST objects as chunk places (store/chunk_places.h), for a
// load through OpenSharedStoreReader: the coordinator reads the step's
// record and names each rank the objects its chunks lie in
// (StepObjectPlaces); the rank opens those objects alone (StepObjectReader)
// and never GETs the store's index or the step's record. The record's head
// lists every object of the step (one per rank and file, and those of
// earlier saves it shares chunks with): W ranks each reading it at a
// restart fetch W heads of O(W) bytes.
#ifndef CKPTDB_SRC_BUCKET_STEP_OBJECTS_H_
#define CKPTDB_SRC_BUCKET_STEP_OBJECTS_H_

#include <memory>
#include <string>
#include <vector>

#include "bucket/sst_object_source.h"
#include "ckptdb/rocksdb_store.h"
#include "ckptdb/status.h"
#include "store/chunk_places.h"
#include "util/le_bytes.h"

namespace ckptdb {
namespace bucket {

// The objects of a step's record as places, by key range: an object whose
// range is known holds the chunks of its range only; one whose range is
// unknown (both keys empty) may hold any chunk, and is named for every
// piece. AppendPlaces writes: u32 n | n times: string key | u64 size |
// string smallest key | string largest key.
std::unique_ptr<ChunkPlaceIndex> StepObjectPlaces(std::vector<SstObject> objects);

// Reads what StepObjectPlaces wrote. False when it is malformed, or names an
// object outside `data_prefix` (the store's PREFIX/data/).
bool ConsumeStepObjects(LECursor* in, const std::string& data_prefix, std::vector<SstObject>* objects);

// A rank's reads from the named objects of the store at `url`
// (s3://BUCKET/PREFIX): its S3 client is made from the environment's
// settings at the first Read (with options.s3_stall_timeout_seconds), and
// each Read opens the named objects as its chunks need them
// (SstObjectSource::OpenLazily) on ReadThreads(options) threads, as a bucket
// reader's. InvalidArgument when `url` is not a
// bucket URL.
StatusOr<std::unique_ptr<PlacedChunkReader>> NewStepObjectReader(const std::string& url,
                                                                 const ReaderOptions& options);

}  // namespace bucket
}  // namespace ckptdb

#endif  // CKPTDB_SRC_BUCKET_STEP_OBJECTS_H_
