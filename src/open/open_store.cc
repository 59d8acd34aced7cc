// The public openers of include/ckptdb/rocksdb_store.h: a store URL
// s3://BUCKET/PREFIX is a bucket store (bucket/bucket_store.h), every other
// path a directory store (store/); and, for OpenSharedStoreReader's ranks,
// the readers of either's chunk places (store/chunk_places.h).
#include "bucket/bucket_store.h"
#include "bucket/step_objects.h"
#include "ckptdb/rocksdb_store.h"
#include "s3/s3_config.h"
#include "store/chunk_places.h"
#include "store/data_files.h"
#include "store/rocksdb_store_internal.h"

namespace ckptdb {

StatusOr<std::unique_ptr<StoreWriter>> OpenStoreWriter(const std::string& path, const StoreOptions& options) {
  if (s3::IsS3Url(path)) return bucket::OpenBucketStoreWriterAt(path, options);
  return OpenDirectoryStoreWriter(path, options);
}

StatusOr<std::unique_ptr<StoreReader>> OpenStoreReader(const std::string& path, const ReaderOptions& options) {
  if (s3::IsS3Url(path)) return bucket::OpenBucketStoreReaderAt(path, options);
  return OpenDirectoryStoreReader(path, options);
}

StatusOr<std::unique_ptr<PlacedChunkReader>> OpenPlacedChunkReader(const std::string& path,
                                                                   const ReaderOptions& options) {
  if (s3::IsS3Url(path)) return bucket::NewStepObjectReader(path, options);
  return NewTableFileReader(path, options);
}

}  // namespace ckptdb
