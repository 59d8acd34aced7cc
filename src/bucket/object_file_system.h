// Objects in a bucket as RocksDB files: a rocksdb::FileSystem that opens
// "s3://BUCKET/KEY" as an FSRandomAccessFile whose reads are ranged GETs, so
// that RocksDB's own table reader can read an SST object where it lies (the
// chunk read path of a bucket store is then the local store's).
//
// Cost of reading an SST object (RocksDB 7.8's block-based table reader):
//   - its size: one HEAD, once per object, unless given (SetObjectSize);
//   - opening the table: one GET of the object's last tail_bytes, which holds
//     the footer, the metaindex, properties and index blocks of any SST of
//     ckptdb's (a 1 GiB file of 4 MiB chunks has an index of ~16 KiB); a
//     block of the tail that lies before that window costs a GET of its own;
//   - every other read: exactly one GET of exactly the bytes asked (a data
//     block: one chunk value, its key and RocksDB's 5-byte trailer).
// Nothing but the tail is cached; readers should turn RocksDB's readahead
// off (BlockBasedTableOptions::max_auto_readahead_size = 0), which would
// otherwise fetch bytes beyond a chunk.
//
// Windows: a reader that knows which blocks it will read next (where they
// lie: bucket/block_starts.h) fetches a run of adjacent ones by one GET
// (FetchWindow) and names that window on its thread (ScopedObjectWindow)
// while RocksDB reads: a read that lies wholly inside the window is then
// served from it without a GET and without a copy (the result points into
// the window, as a read of an mmap'd file points into the mapping), so the
// window must outlive whatever RocksDB built on those bytes (the block, the
// iterator, a value pinned there). Any other read is a GET as above.
//
// Errors carry the S3 client's text (the operation, s3://BUCKET/KEY, the
// endpoint, the HTTP status; never a secret) in a rocksdb::IOStatus whose
// code FromRocks (store/rocksdb_status.h) maps back: NotFound stays NotFound,
// DataLoss and an object shorter than its size become Corruption (DataLoss),
// Unavailable becomes Busy (Unavailable), the rest IOError.
//
// Thread safety: the file system and its files may be used from any number
// of threads at once. Every other path goes to FileSystem::Default().
#ifndef CKPTDB_SRC_BUCKET_OBJECT_FILE_SYSTEM_H_
#define CKPTDB_SRC_BUCKET_OBJECT_FILE_SYSTEM_H_

#include <rocksdb/file_system.h>
#include <rocksdb/io_status.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "ckptdb/status.h"
#include "s3/s3_client.h"

namespace ckptdb {
namespace bucket {

struct ObjectReadOptions {
  // Bytes at an object's end fetched by its first read there (or RocksDB's
  // prefetch of its tail), once, and kept while the file is open. Default
  // 64 KiB; the whole object when it is smaller.
  uint64_t tail_bytes = 64u << 10;
};

// Requests made and bytes fetched, counted from the file system's creation.
struct ObjectReadStats {
  uint64_t heads = 0;
  uint64_t gets = 0;
  uint64_t bytes = 0;  // object bytes received by GETs
};

// The counters a file system and its files add to.
struct ObjectReadCounters {
  std::atomic<uint64_t> heads{0}, gets{0}, bytes{0};
  ObjectReadStats Get() const { return {heads.load(), gets.load(), bytes.load()}; }
};

// Bytes [begin, begin + size) of the object at `path`, fetched ahead into
// `data` (of `capacity` bytes: a window is refilled without allocating when
// its buffer is large enough, so a read's windows fault their pages in once).
struct ObjectWindow {
  std::string path;  // s3://BUCKET/KEY
  uint64_t begin = 0;
  uint64_t size = 0;
  uint64_t capacity = 0;
  std::unique_ptr<char[]> data;
};

// Makes `window`'s buffer hold at least n bytes, keeping it when it does.
void ReserveWindow(ObjectWindow* window, uint64_t n);

// While it lives, reads of `window`'s object on this thread that lie inside
// it are served from it (see above); scopes nest, the innermost naming the
// window. `window` may be null (no window).
class ScopedObjectWindow {
 public:
  explicit ScopedObjectWindow(const ObjectWindow* window);
  ~ScopedObjectWindow();
  ScopedObjectWindow(const ScopedObjectWindow&) = delete;
  ScopedObjectWindow& operator=(const ScopedObjectWindow&) = delete;

 private:
  const ObjectWindow* previous_;
};

// "s3://BUCKET/KEY".
std::string ObjectPath(const std::string& bucket, const std::string& key);

// Splits "s3://BUCKET/KEY"; false for any other path (or an empty part).
bool ParseObjectPath(const std::string& path, std::string* bucket, std::string* key);

// Our Status as the IOStatus a FileSystem returns (see above).
rocksdb::IOStatus ToIOStatus(const Status& s);

class ObjectFileSystem : public rocksdb::FileSystemWrapper {
 public:
  // `client` must outlive the file system and every file it opened.
  explicit ObjectFileSystem(s3::S3Client* client, ObjectReadOptions options = {});

  const char* Name() const override { return "CkptdbObjectFileSystem"; }

  // The size of the object at `path` is `size` (from a listing or a record
  // that names it): no HEAD for it. A wrong size makes reads fail with
  // Corruption (too large) or see only part of the object (too small: the
  // table's footer is then missing, also Corruption).
  void SetObjectSize(const std::string& path, uint64_t size);

  rocksdb::IOStatus NewRandomAccessFile(const std::string& fname, const rocksdb::FileOptions& file_opts,
                                        std::unique_ptr<rocksdb::FSRandomAccessFile>* result,
                                        rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus GetFileSize(const std::string& fname, const rocksdb::IOOptions& options, uint64_t* file_size,
                                rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus FileExists(const std::string& fname, const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override;

  // Where the object's cached tail begins (reads from there cost no GET
  // once it is fetched): nullopt while its size is not known.
  std::optional<uint64_t> TailStart(const std::string& path);

  // Fetches bytes [begin, begin + n) of the object at `path` by one GET
  // (counted in stats()) into `window`, reusing its buffer when it holds n
  // bytes: Corruption, as a read, when the object ends before them; the S3
  // client's error otherwise (the window then holds nothing).
  rocksdb::IOStatus FetchWindow(const std::string& path, uint64_t begin, uint64_t n, ObjectWindow* window);

  // The same GET, its bytes handed to `stream` as they arrive (from the
  // first again when the GET is retried), for a reader that places them
  // itself (bucket/block_landing.h).
  rocksdb::IOStatus FetchStream(const std::string& path, uint64_t begin, uint64_t n, s3::HttpBodyStream* stream);

  ObjectReadStats stats() const { return counters_->Get(); }

 private:
  // The object's size: the one set or seen before, else a HEAD.
  StatusOr<uint64_t> SizeOf(const std::string& path, const std::string& bucket, const std::string& key);
  // Splits `path` and finds its size: InvalidArgument unless [begin, begin +
  // n) lies within the object.
  rocksdb::IOStatus CheckRange(const std::string& path, uint64_t begin, uint64_t n, std::string* bucket,
                               std::string* key, uint64_t* size);

  s3::S3Client* client_;
  ObjectReadOptions options_;
  std::shared_ptr<ObjectReadCounters> counters_;  // shared with the files
  std::mutex mu_;
  std::map<std::string, uint64_t> sizes_;  // guarded by mu_
};

}  // namespace bucket
}  // namespace ckptdb

#endif  // CKPTDB_SRC_BUCKET_OBJECT_FILE_SYSTEM_H_
