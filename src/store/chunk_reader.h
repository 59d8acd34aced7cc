// The load side's data path: fetch only the chunks that cover each requested
// byte range, verify and decode them on worker threads, and copy the range
// into its destination.
#ifndef CKPTDB_SRC_CHUNK_READER_H_
#define CKPTDB_SRC_CHUNK_READER_H_

#include <rocksdb/db.h>

#include <functional>
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

// ReadChunks with the values fetched by `get`: with one thread, in exactly
// the order of ChunksToRead (plus, for pieces whose chunks split elements
// delivered to a sink, the chunk after one whose last element it cuts).
StatusOr<ReadStats> ReadChunksFrom(const ChunkValueGetter& get, const StepMetadata& md,
                                   const std::vector<ReadItem>& items, int threads);

// The stored chunks `items` need, each once, in the order ReadChunksFrom
// fetches them: what a rank without the store asks the coordinator for.
StatusOr<std::vector<DataKey>> ChunksToRead(const StepMetadata& md, const std::vector<ReadItem>& items);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_CHUNK_READER_H_
