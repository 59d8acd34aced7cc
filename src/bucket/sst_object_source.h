// Chunk values read out of SST objects in a bucket, with RocksDB's own table
// reader (rocksdb::SstFileReader) over ObjectFileSystem: the files a rank
// wrote with rocksdb::SstFileWriter and DatabaseOptions()'s table format
// (store/sst_chunk_writer.cc), uploaded as they are. Its Getter() is a
// ChunkValueGetter, so ReadChunksFrom (store/chunk_reader.h) loads pieces
// from a bucket as it does from the local database: chunks verified by their
// checksums, decoded, placed.
//
// Requests: opening costs one GET per object (its tail: footer, index,
// properties) plus one HEAD where the size is not given; a chunk then costs
// exactly one ranged GET of its data block (the value plus its key and
// RocksDB's block trailer, a few dozen bytes). Objects whose key range
// (SstObject::smallest_key..largest_key) excludes a key are not asked for it.
//
// PlanRuns groups a read's chunks into runs of adjacent blocks of one object
// (where they lie: bucket/block_starts.h), each fetched by one ranged GET
// of up to 16 MiB: a load of every chunk of an object of 4 MiB chunks costs
// a GET per 16 MiB instead of one per chunk, and fetches no byte it does
// not need (runs never span a gap). Objects without the
// property (written before it) are read chunk by chunk as above. A run's
// Land writes its raw chunks straight into the read's target as the GET
// delivers them (bucket/block_landing.h); the other chunks of the run come
// from that GET too, through Get.
//
// Thread safety: Get, ReadChunks and PlanRuns (and the runs' own methods)
// may be called from many threads at once.
#ifndef CKPTDB_SRC_BUCKET_SST_OBJECT_SOURCE_H_
#define CKPTDB_SRC_BUCKET_SST_OBJECT_SOURCE_H_

#include <rocksdb/env.h>
#include <rocksdb/slice.h>
#include <rocksdb/sst_file_reader.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bucket/object_file_system.h"
#include "ckptdb/status.h"
#include "format/keys.h"
#include "s3/s3_client.h"
#include "store/chunk_reader.h"

namespace ckptdb {
namespace bucket {

struct SstObject {
  std::string key;    // the object's key in the bucket
  uint64_t size = 0;  // 0: not known (a HEAD finds it)
  // The smallest and largest keys the file holds (what SstFileWriter's
  // Finish reports, or RocksDB's file metadata): keys outside are not looked
  // up in it. Both empty: unknown, every lookup may try the object (a Seek
  // there can cost a GET of a data block that does not hold the key).
  std::string smallest_key, largest_key;
};

class SstObjectSource {
 public:
  // Opens every object of `bucket` in `objects` as an SST, up to
  // open_threads at once. NotFound naming a missing object; DataLoss naming
  // an object that is not a whole SST (truncated, damaged footer or index:
  // block checksums are verified); the S3 client's codes otherwise (of the
  // first object to fail). `client` must outlive the source.
  static StatusOr<std::unique_ptr<SstObjectSource>> Open(s3::S3Client* client, const std::string& bucket,
                                                         std::vector<SstObject> objects,
                                                         const ObjectReadOptions& options = {}, int open_threads = 8);
  // Like Open, but an object is opened at the first lookup of a key in its
  // key range, and its errors come from that lookup (DataLoss naming an
  // object that is missing or not a whole SST): a
  // load of the pieces some ranks wrote GETs the objects of those ranks
  // only, not one tail per object of the save (W GETs per rank at W ranks).
  // Nothing is read here.
  static std::unique_ptr<SstObjectSource> OpenLazily(s3::S3Client* client, const std::string& bucket,
                                                     std::vector<SstObject> objects,
                                                     const ObjectReadOptions& options = {});
  ~SstObjectSource();

  // The stored value of chunk `key`, as GetChunkValue gives it from a local
  // database: NotFound ("missing") when no object holds it; DataLoss naming
  // the object when a block fails RocksDB's checksum; the value itself is
  // not decoded (ReadChunksFrom verifies it).
  Status Get(const DataKey& key, rocksdb::PinnableSlice* value) const;

  // Get as a ChunkValueGetter; valid while the source lives.
  ChunkValueGetter Getter() const;

  // The runs of a read of `keys` on `threads` threads (see above): runs of
  // at most min(16 MiB, max(2 MiB, bytes / (4 x threads))) bytes, so that
  // every thread has runs to fetch and the windows of the runs in flight
  // stay within a quarter of the bytes; a run of keys that all land
  // (`lands`, ChunkRunPlanner's) needs no window and may hold up to
  // LandedRunCap (fewer GETs: SeaweedFS spent 0.95x the CPU on a 512 MiB
  // load in 32 MiB runs that it did in 16 MiB ones); a key in the object's cached tail, whose
  // object lacks the property, or that no object holds, is a run of its
  // own. Opens the objects the keys fall in (an object that fails to open is
  // left to the run's Get to report). Valid while the source lives.
  // Memory: a thread holds the window of the run it reads; the runs keep
  // up to `threads` windows for reuse until they are destroyed.
  StatusOr<std::unique_ptr<ChunkRuns>> PlanRuns(const std::vector<DataKey>& keys, int threads,
                                                const std::vector<bool>& lands = {}) const;

  // The most bytes PlanRuns puts in one run of a read of `bytes` bytes of
  // blocks on `threads` threads (a run may pass it by its blocks' framing,
  // 64 KiB at most).
  static uint64_t RunCap(uint64_t bytes, int threads);
  // The same for a run of keys that all land: min(32 MiB, max(RunCap,
  // bytes / (2 x threads))).
  static uint64_t LandedRunCap(uint64_t bytes, int threads);

  // PlanRuns as a ChunkRunPlanner; valid while the source lives.
  ChunkRunPlanner Planner() const;

  // The decoded, verified raw bytes of each chunk of `keys`, in order:
  // DataLoss naming the chunk and its object when its checksum fails.
  StatusOr<std::vector<std::string>> ReadChunks(const std::vector<DataKey>& keys) const;

  ObjectReadStats stats() const { return fs_->stats(); }

  // Every key of object `i` (of the list the source was made with) in
  // order, with the bytes of the data block that holds it, from its
  // block-starts property; nullopt when the object lacks it (objects written
  // before it). Opens the object (its errors as Get's).
  struct KeyBlock {
    std::string key;
    uint64_t block_bytes = 0;
  };
  StatusOr<std::optional<std::vector<KeyBlock>>> KeyBlocksOf(size_t i) const;

 private:
  struct Table;
  SstObjectSource() = default;
  class Runs;
  // Get, also naming the object that held the chunk in *path; with
  // `window`, RocksDB's read of the chunk's block is served from it when it
  // lies there (the value then keeps the window).
  Status Lookup(const DataKey& key, rocksdb::PinnableSlice* value, std::string* path,
                std::shared_ptr<const ObjectWindow> window = nullptr) const;
  // Makes the source with every table, none opened.
  static std::unique_ptr<SstObjectSource> Make(s3::S3Client* client, const std::string& bucket,
                                               std::vector<SstObject> objects, const ObjectReadOptions& options);
  // Opens `table` unless it is (the first open's outcome, kept).
  static Status EnsureOpen(Table& table);

  std::string bucket_;
  std::shared_ptr<ObjectFileSystem> fs_;
  std::unique_ptr<rocksdb::Env> env_;           // over fs_; used by the readers
  std::vector<std::unique_ptr<Table>> tables_;  // destroyed before env_
};

}  // namespace bucket
}  // namespace ckptdb

#endif  // CKPTDB_SRC_BUCKET_SST_OBJECT_SOURCE_H_
