// The load side's data path: fetch only the chunks that cover each requested
// byte range, verify and decode them on worker threads, and copy the range
// into its destination.
#ifndef CKPTDB_SRC_CHUNK_READER_H_
#define CKPTDB_SRC_CHUNK_READER_H_

#include <rocksdb/db.h>

#include <functional>
#include <memory>
#include <vector>

#include "format/keys.h"

#include "ckptdb/metadata.h"
#include "ckptdb/storage.h"

namespace ckptdb {

// StorageReader::Read for a database holding `md`'s data (see storage.h for
// the contract). Chunks are independent: workers fetch (pinned, no copy out of
// RocksDB), verify and decode them in parallel, straight into the
// destination when a chunk lies wholly inside its range. Destinations of
// different items must not overlap.
StatusOr<ReadStats> ReadChunks(rocksdb::DB* db, const StepMetadata& md, const std::vector<ReadItem>& items,
                               int threads);

// The stored value of one chunk of `db`, pinned where it lies; NotFound when
// the store lacks it. RocksDB's block checksums are verified too (a damaged
// block becomes DataLoss, never a parse of damaged bytes).
Status GetChunkValue(rocksdb::DB* db, const DataKey& key, rocksdb::PinnableSlice* value);

// Fetches the stored value of one chunk into *value; NotFound when the store
// lacks it (the read then fails with DataLoss naming the chunk).
using ChunkValueGetter = std::function<Status(const DataKey& key, rocksdb::PinnableSlice* value)>;

// Where a chunk's raw_bytes go, for a store that can put them there straight
// from storage (ChunkRuns::Land): as `place` says (a null dest: nowhere).
struct ChunkLanding {
  BoxPlace place;
  uint64_t raw_bytes = 0;
};

// A read's chunks grouped into runs that a store fetches by one request
// each (a bucket's adjacent blocks: one ranged GET instead of one per
// chunk). Thread safety: Get, Land and Done from any thread; a run's Land and
// Get hold it while they fetch it (retries included).
class ChunkRuns {
 public:
  virtual ~ChunkRuns() = default;
  // The runs, in the order they are read: indices into the keys they were
  // planned for, each index in exactly one run.
  virtual const std::vector<std::vector<size_t>>& runs() const = 0;
  // A ChunkValueGetter: the first Get of a key of a run fetches the run.
  virtual Status Get(const DataKey& key, rocksdb::PinnableSlice* value) = 0;
  // Fetches run r (before any Get of its keys), landing each of its chunks
  // that `spots` (one per chunk, in runs()[r]'s order) gives a place: its raw
  // bytes written there, verified by the chunk's checksum and the store's
  // own, with no value made. Returns which chunks landed; the others are
  // read by Get, from what this fetched (Get fetches the run no more), and
  // their places may hold bytes to be written again. A fetch that failed
  // lands none, and Get reports its error. The default lands none and
  // fetches nothing: Get fetches the run.
  virtual std::vector<bool> Land(size_t r, const std::vector<ChunkLanding>& spots) {
    (void)r;
    return std::vector<bool>(spots.size(), false);
  }
  // Run r's chunks are read: the run lets go of what it fetched (values
  // still pinned keep it); a later Get of its keys fetches that chunk alone.
  virtual void Done(size_t r) = 0;
};

// Plans the runs of `keys` for a read on `threads` threads. `lands` (empty,
// or one per key): key i is a chunk stored raw (its piece's encoding says
// no compression) that the read has a place for (ChunkRuns::Land), so it
// needs no window and may come in a larger run.
using ChunkRunPlanner = std::function<StatusOr<std::unique_ptr<ChunkRuns>>(const std::vector<DataKey>& keys,
                                                                           int threads, const std::vector<bool>& lands)>;

// ReadChunks with the values fetched by `get`: with one thread, in exactly
// the order of ChunksToRead (plus, for pieces whose chunks split elements
// delivered to a sink, the chunk after one whose last element it cuts).
// With `plan`, the chunks are read run by run instead (each thread reads
// one run at a time, its chunks in order) and fetched by the runs' Get.
StatusOr<ReadStats> ReadChunksFrom(const ChunkValueGetter& get, const StepMetadata& md,
                                   const std::vector<ReadItem>& items, int threads,
                                   const ChunkRunPlanner& plan = nullptr);

// The stored chunks `items` need, each once, in the order ReadChunksFrom
// fetches them: what a rank without the store asks the coordinator for.
StatusOr<std::vector<DataKey>> ChunksToRead(const StepMetadata& md, const std::vector<ReadItem>& items);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_CHUNK_READER_H_
