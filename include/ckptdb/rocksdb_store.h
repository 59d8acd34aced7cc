// The RocksDB store: ckptdb's real StorageWriter and StorageReader.
//
// A store is a directory:
//   STORE/CKPTDB     marker file naming the format; a directory without it
//                    is not a store and is never written to
//   STORE/db/        the RocksDB database (keys and values: proto/FORMAT.md)
//   STORE/staging/   per-save directories of SST files not yet ingested
//
// Writers on every rank build SST files (rocksdb::SstFileWriter) under
// staging/<save id>/; the coordinator ingests all of them in one
// IngestExternalFile call and then commits the step's metadata in one synced
// WriteBatch. Only the coordinator's process opens the database for writing;
// readers open it read-only and never block the writer.
#ifndef CKPTDB_ROCKSDB_STORE_H_
#define CKPTDB_ROCKSDB_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckptdb/status.h"
#include "ckptdb/storage.h"

namespace ckptdb {

enum class Compression : int {
  kNone = 0,  // chunks stored raw
  kZstd = 1,  // every chunk zstd-compressed
  kAuto = 2,  // zstd, but a chunk that does not shrink is stored raw
};

struct StoreOptions {
  // Raw bytes per chunk. A read of any byte range fetches only the chunks
  // covering it, and never needs more than this much memory per chunk. Larger
  // chunks mean fewer keys and less per-chunk overhead. Range [4 KiB, 1 GiB].
  uint64_t chunk_bytes = 4u << 20;
  // How chunks are compressed on save. Reads handle every codec.
  Compression compression = Compression::kNone;
  int zstd_level = 1;  // 1 (fast) .. 19
  // A rank starts a new SST file after this many bytes of values. Bounds the
  // size of one file; each file is ingested as a whole.
  uint64_t max_sst_file_bytes = 1ull << 30;
  // Passed to SstFileWriter: when true, written pages are dropped from the
  // page cache, which makes an immediate read-back several times slower on
  // these machines (DESIGN.md). Default false keeps them cached.
  bool sst_invalidate_page_cache = false;
  // Sweep leftovers of failed saves when the coordinator opens the database.
  bool sweep_on_open = true;
};

// A committed step, as listed.
struct StepInfo {
  int64_t step = 0;
  int64_t created_unix_ms = 0;
  int32_t world_size = 1;
  uint64_t entries = 0;
  uint64_t logical_bytes = 0;
  uint64_t stored_bytes = 0;
};

// What a sweep found and removed: data whose save id has no committed
// metadata (failed or interrupted saves), and staging directories.
struct SweepStats {
  uint64_t orphan_saves = 0;
  uint64_t staging_dirs = 0;
};

class StoreWriter : public StorageWriter {
 public:
  // Opens the database for writing if it is not yet open (creating the store
  // when missing); the coordinator's Prepare does this too. Sweeps when
  // options.sweep_on_open.
  virtual Status OpenDatabase() = 0;
  // Removes leftovers of failed saves (see SweepStats). REQUIRES: no save in
  // flight on this writer.
  virtual StatusOr<SweepStats> Sweep() = 0;
  // Deletes a committed step and gives its space back. NotFound if absent.
  virtual Status DeleteStep(int64_t step) = 0;
  virtual const std::string& path() const = 0;
};

// A writer for the store at `path`. Fails with FailedPrecondition when `path`
// is a file, or a non-empty directory that is not a ckptdb store. The store is
// created by the coordinator's first Prepare when it does not exist.
StatusOr<std::unique_ptr<StoreWriter>> OpenStoreWriter(const std::string& path, const StoreOptions& options = {});

class StoreReader : public StorageReader {
 public:
  // Every committed step, in increasing order.
  virtual StatusOr<std::vector<StepInfo>> ListSteps() = 0;
  // The highest committed step, or NotFound when the store has none.
  virtual StatusOr<int64_t> LatestStep() = 0;
  // Re-reads the database so that steps committed since the reader was opened
  // become visible.
  virtual Status Refresh() = 0;
  virtual const std::string& path() const = 0;
};

// A read-only view of the store at `path` as of the call (see Refresh).
// NotFound when nothing is at `path`; FailedPrecondition when it is a file or
// not a ckptdb store.
StatusOr<std::unique_ptr<StoreReader>> OpenStoreReader(const std::string& path);

}  // namespace ckptdb

#endif  // CKPTDB_ROCKSDB_STORE_H_
