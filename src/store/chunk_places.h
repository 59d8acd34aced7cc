// Where the ranks of a load through OpenSharedStoreReader find their chunks
// without opening the store (include/ckptdb/rocksdb_store.h).
//
// Only the coordinator opens the store. Its reader names, for one step, the
// places that may hold a rank's chunks (ChunkPlaceIndex):
//   - a directory store: the database's table files (store/data_files.h);
//   - a bucket store: the SST objects of the step's record
//     (bucket/step_objects.h).
// Each rank is sent the few places its chunks lie in (a rank's own chunks
// lie in its own file or object) and reads them from those places alone
// (PlacedChunkReader): it never replays the database's MANIFEST, and never
// GETs the bucket's index or the step's record, whose head lists every
// object of the step. What a rank receives and reads for its metadata then
// does not grow with the world size.
#ifndef CKPTDB_SRC_STORE_CHUNK_PLACES_H_
#define CKPTDB_SRC_STORE_CHUNK_PLACES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/rocksdb_store.h"
#include "ckptdb/status.h"
#include "ckptdb/storage.h"

namespace ckptdb {

// The places of one step's chunks, as the coordinator's reader sees them.
// Thread safety: const methods from any thread.
class ChunkPlaceIndex {
 public:
  virtual ~ChunkPlaceIndex() = default;
  // Adds to *out (indices, unsorted, maybe repeated) the places that may
  // hold a chunk of piece `p` of save (step, save_id): its own chunks and
  // those it shares with earlier steps.
  virtual void AddPlacesOf(int64_t step, uint64_t save_id, const StoredPiece& p, std::vector<size_t>* out) const = 0;
  // The places of `indices`, each once, appended to *out in the form
  // PlacedChunkReader::Read takes.
  virtual void AppendPlaces(std::vector<size_t> indices, std::string* out) const = 0;
};

// What the coordinator's store reader gives the shared-store reader.
class ChunkPlaceSource {
 public:
  virtual ~ChunkPlaceSource() = default;
  // The places of committed save (step, save_id), as of the reader's view.
  virtual StatusOr<std::unique_ptr<ChunkPlaceIndex>> PlacesOf(int64_t step, uint64_t save_id) = 0;
};

// A rank's reads of its chunks from the places the coordinator named.
// Thread safety: one Read at a time.
class PlacedChunkReader {
 public:
  virtual ~PlacedChunkReader() = default;
  // Reads `items` of `md` (as StorageReader::Read) from `places`
  // (ChunkPlaceIndex::AppendPlaces's bytes). Internal naming the places when
  // they are malformed or lie outside the store; a place that cannot be
  // opened or read is IOError or DataLoss naming it.
  virtual StatusOr<ReadStats> Read(std::string_view places, const StepMetadata& md,
                                   const std::vector<ReadItem>& items) = 0;
};

// The reader of places of the store at `path` (a directory, or
// s3://BUCKET/PREFIX: its client is made from the environment's settings at
// the first Read, as OpenStoreReader's). Nothing is opened here.
StatusOr<std::unique_ptr<PlacedChunkReader>> OpenPlacedChunkReader(const std::string& path,
                                                                   const ReaderOptions& options);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_STORE_CHUNK_PLACES_H_
