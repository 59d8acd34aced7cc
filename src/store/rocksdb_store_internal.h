// Seams of the RocksDB store that tests use and the public API does not
// expose: a writer over a caller-supplied rocksdb::Env, so that a
// fault-injecting file system (tests/fault_injection_fs.h) can fail or
// "crash" at a chosen operation.
#ifndef CKPTDB_SRC_ROCKSDB_STORE_INTERNAL_H_
#define CKPTDB_SRC_ROCKSDB_STORE_INTERNAL_H_

#include <rocksdb/env.h>
#include <rocksdb/slice.h>

#include <memory>
#include <string>

#include "ckptdb/rocksdb_store.h"
#include "format/keys.h"

namespace ckptdb {

// A fresh random save id (never 0), for a save attempt of any store.
// Thread safety: may be called from any thread.
uint64_t NewSaveId();

// InvalidArgument naming the StoreOptions field that is out of its range
// (see StoreOptions), for any store that takes them.
Status ValidateStoreOptions(const StoreOptions& o);
// The same for the ReaderOptions fields every opener checks
// (s3_stall_timeout_seconds).
Status ValidateReaderOptions(const ReaderOptions& o);

// The directory store behind the public OpenStoreWriter / OpenStoreReader
// (open/open_store.cc sends s3:// URLs to the bucket store and every other
// path here), with the contracts stated there.
StatusOr<std::unique_ptr<StoreWriter>> OpenDirectoryStoreWriter(const std::string& path,
                                                                const StoreOptions& options = {});
StatusOr<std::unique_ptr<StoreReader>> OpenDirectoryStoreReader(const std::string& path,
                                                                const ReaderOptions& options = {});

// As OpenStoreWriter, with every file operation of the database and of the
// SST writers going through `env` (not owned; outlives the writer).
StatusOr<std::unique_ptr<StoreWriter>> OpenStoreWriterWithEnv(const std::string& path, const StoreOptions& options,
                                                              rocksdb::Env* env);

// What tests may change about a writer beyond StoreOptions.
struct StoreWriterSeams {
  rocksdb::Env* env = nullptr;  // as OpenStoreWriterWithEnv; null: RocksDB's
  // Cut chunks at exactly chunk_bytes even where that splits an element, as
  // writers before format 2 did: for tests that readers handle such stores.
  bool split_elements = false;
  // Non-zero: chunks of at most this many raw bytes, below StoreOptions'
  // 4 KiB minimum, so that tests cut small tensors into many chunks (and
  // boxes).
  uint64_t chunk_bytes = 0;
  // false: leave commits (and deletes, tags, aborts) in the write-ahead log,
  // with no flush after them, as a writer that died right after its write
  // landed does.
  bool flush_after_writes = true;
};
StatusOr<std::unique_ptr<StoreWriter>> OpenStoreWriterWithSeams(const std::string& path, const StoreOptions& options,
                                                                const StoreWriterSeams& seams);

// What a store reader gives the remote reader (OpenRemoteStoreReader) to
// serve other ranks: one chunk's stored value, as ReadChunks fetches it
// (NotFound when absent). Thread-safe (one call per serving thread).
class ChunkValueSource {
 public:
  virtual ~ChunkValueSource() = default;
  virtual Status GetChunkValue(const DataKey& key, rocksdb::PinnableSlice* value) = 0;
};

}  // namespace ckptdb

#endif  // CKPTDB_SRC_ROCKSDB_STORE_INTERNAL_H_
