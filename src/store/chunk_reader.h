// The load side's data path: fetch only the chunks that cover each requested
// byte range, verify and decode them on worker threads, and copy the range
// into its destination.
#ifndef CKPTDB_SRC_CHUNK_READER_H_
#define CKPTDB_SRC_CHUNK_READER_H_

#include <rocksdb/db.h>

#include <vector>

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

}  // namespace ckptdb

#endif  // CKPTDB_SRC_CHUNK_READER_H_
