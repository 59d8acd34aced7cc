#include "bucket/object_file_system.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace ckptdb {
namespace bucket {

namespace {

constexpr char kScheme[] = "s3://";

thread_local const ObjectWindow* tls_window = nullptr;

// Where an object's cached tail (its last tail_bytes) begins.
uint64_t TailStartOf(uint64_t size, uint64_t tail_bytes) { return size > tail_bytes ? size - tail_bytes : 0; }

rocksdb::IOStatus Truncated(const std::string& path, const s3::S3Client& client, uint64_t ends_by, uint64_t size) {
  return rocksdb::IOStatus::Corruption(path + " at " + client.settings().endpoint + " is truncated: it ends by byte " +
                                       std::to_string(ends_by) + " but its size is " + std::to_string(size));
}

// GETs [offset, offset + n) of bucket/key into out (or hands it to
// `stream` when out is null), counted; Corruption naming the object when it
// ends before that (it is shorter than `size`, the size it was opened with).
rocksdb::IOStatus FetchRange(s3::S3Client* client, ObjectReadCounters* counters, const std::string& bucket,
                             const std::string& key, uint64_t size, uint64_t offset, uint64_t n, char* out,
                             s3::HttpBodyStream* stream = nullptr) {
  StatusOr<size_t> got = out != nullptr ? client->GetObjectRangeInto(bucket, key, offset, n, out)
                                        : client->GetObjectRangeTo(bucket, key, offset, n, stream);
  counters->gets.fetch_add(1, std::memory_order_relaxed);
  if (got.ok()) counters->bytes.fetch_add(*got, std::memory_order_relaxed);
  if (!got.ok()) {
    // S3's 416: the range starts past the object's end.
    if (got.status().code() == StatusCode::kInvalidArgument) {
      return Truncated(ObjectPath(bucket, key), *client, offset, size);
    }
    return ToIOStatus(got.status());
  }
  if (*got < n) return Truncated(ObjectPath(bucket, key), *client, offset + *got, size);
  return rocksdb::IOStatus::OK();
}

// An object read by ranged GETs, its tail cached (see the header).
class ObjectFile : public rocksdb::FSRandomAccessFile {
 public:
  ObjectFile(s3::S3Client* client, std::string bucket, std::string key, uint64_t size, uint64_t tail_bytes,
             std::shared_ptr<ObjectReadCounters> counters)
      : client_(client),
        bucket_(std::move(bucket)),
        key_(std::move(key)),
        path_(ObjectPath(bucket_, key_)),
        size_(size),
        tail_start_(TailStartOf(size, tail_bytes)),
        counters_(std::move(counters)) {}

  rocksdb::IOStatus Read(uint64_t offset, size_t n, const rocksdb::IOOptions& /*options*/, rocksdb::Slice* result,
                         char* scratch, rocksdb::IODebugContext* /*dbg*/) const override {
    if (offset >= size_ || n == 0) {
      *result = rocksdb::Slice(scratch, 0);
      return rocksdb::IOStatus::OK();
    }
    n = static_cast<size_t>(std::min<uint64_t>(n, size_ - offset));
    if (const ObjectWindow* w = tls_window;
        w != nullptr && offset >= w->begin && offset - w->begin + n <= w->size && w->path == path_) {
      *result = rocksdb::Slice(w->data.get() + (offset - w->begin), n);  // no copy: see the header
      return rocksdb::IOStatus::OK();
    }
    if (scratch == nullptr) return rocksdb::IOStatus::InvalidArgument(path_ + ": read without a buffer");
    if (offset >= tail_start_) {
      rocksdb::IOStatus s = LoadTail();
      if (!s.ok()) return s;
      std::memcpy(scratch, tail_.data() + (offset - tail_start_), n);
      *result = rocksdb::Slice(scratch, n);
      return rocksdb::IOStatus::OK();
    }
    rocksdb::IOStatus s = Fetch(offset, n, scratch);
    if (!s.ok()) return s;
    *result = rocksdb::Slice(scratch, n);
    return rocksdb::IOStatus::OK();
  }

  // RocksDB prefetches a table's tail before reading its footer: that is the
  // tail cache's one GET. Other ranges are not fetched ahead (a chunk is read
  // once, by exactly one GET).
  rocksdb::IOStatus Prefetch(uint64_t offset, size_t n, const rocksdb::IOOptions& /*options*/,
                             rocksdb::IODebugContext* /*dbg*/) override {
    if (offset + n >= size_ && size_ > 0) return LoadTail();
    return rocksdb::IOStatus::OK();
  }

 private:
  rocksdb::IOStatus Fetch(uint64_t offset, size_t n, char* out) const {
    return FetchRange(client_, counters_.get(), bucket_, key_, size_, offset, n, out);
  }

  rocksdb::IOStatus LoadTail() const {
    std::lock_guard<std::mutex> lock(tail_mu_);
    if (tail_loaded_) return rocksdb::IOStatus::OK();
    std::string tail(size_ - tail_start_, '\0');
    rocksdb::IOStatus s = Fetch(tail_start_, tail.size(), tail.data());
    if (!s.ok()) return s;  // not kept: a later read tries again
    tail_ = std::move(tail);
    tail_loaded_ = true;
    return rocksdb::IOStatus::OK();
  }

  s3::S3Client* const client_;
  const std::string bucket_;
  const std::string key_;
  const std::string path_;  // s3://BUCKET/KEY
  const uint64_t size_;
  const uint64_t tail_start_;
  const std::shared_ptr<ObjectReadCounters> counters_;
  mutable std::mutex tail_mu_;
  mutable bool tail_loaded_ = false;  // guarded by tail_mu_; tail_ is immutable once set
  mutable std::string tail_;          // [tail_start_, size_)
};

}  // namespace

std::string ObjectPath(const std::string& bucket, const std::string& key) { return kScheme + bucket + "/" + key; }

bool ParseObjectPath(const std::string& path, std::string* bucket, std::string* key) {
  const size_t scheme = sizeof(kScheme) - 1;
  if (path.compare(0, scheme, kScheme) != 0) return false;
  const size_t slash = path.find('/', scheme);
  if (slash == std::string::npos || slash == scheme || slash + 1 == path.size()) return false;
  *bucket = path.substr(scheme, slash - scheme);
  *key = path.substr(slash + 1);
  return true;
}

rocksdb::IOStatus ToIOStatus(const Status& s) {
  if (s.ok()) return rocksdb::IOStatus::OK();
  // RocksDB prefixes its own code's name; ours is kept where it differs.
  switch (s.code()) {
    case StatusCode::kNotFound:
      return rocksdb::IOStatus::NotFound(s.message());
    case StatusCode::kDataLoss:
      return rocksdb::IOStatus::Corruption(s.message());
    case StatusCode::kInvalidArgument:
      return rocksdb::IOStatus::InvalidArgument(s.message());
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
      return rocksdb::IOStatus::Busy(s.ToString());
    default:
      return rocksdb::IOStatus::IOError(s.ToString());
  }
}

ScopedObjectWindow::ScopedObjectWindow(const ObjectWindow* window) : previous_(tls_window) { tls_window = window; }

ScopedObjectWindow::~ScopedObjectWindow() { tls_window = previous_; }

ObjectFileSystem::ObjectFileSystem(s3::S3Client* client, ObjectReadOptions options)
    : rocksdb::FileSystemWrapper(rocksdb::FileSystem::Default()),
      client_(client),
      options_(options),
      counters_(std::make_shared<ObjectReadCounters>()) {}

void ObjectFileSystem::SetObjectSize(const std::string& path, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  sizes_[path] = size;
}

StatusOr<uint64_t> ObjectFileSystem::SizeOf(const std::string& path, const std::string& bucket,
                                            const std::string& key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(path);
    if (it != sizes_.end()) return it->second;
  }
  StatusOr<s3::ObjectInfo> info = client_->HeadObject(bucket, key);
  counters_->heads.fetch_add(1, std::memory_order_relaxed);
  if (!info.ok()) return info.status();
  std::lock_guard<std::mutex> lock(mu_);
  sizes_[path] = info->size;
  return info->size;
}

rocksdb::IOStatus ObjectFileSystem::NewRandomAccessFile(const std::string& fname, const rocksdb::FileOptions& file_opts,
                                                        std::unique_ptr<rocksdb::FSRandomAccessFile>* result,
                                                        rocksdb::IODebugContext* dbg) {
  std::string bucket, key;
  if (!ParseObjectPath(fname, &bucket, &key)) return target()->NewRandomAccessFile(fname, file_opts, result, dbg);
  StatusOr<uint64_t> size = SizeOf(fname, bucket, key);
  if (!size.ok()) return ToIOStatus(size.status());
  result->reset(new ObjectFile(client_, std::move(bucket), std::move(key), *size, options_.tail_bytes, counters_));
  return rocksdb::IOStatus::OK();
}

std::optional<uint64_t> ObjectFileSystem::TailStart(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sizes_.find(path);
  if (it == sizes_.end()) return std::nullopt;
  return TailStartOf(it->second, options_.tail_bytes);
}

rocksdb::IOStatus ObjectFileSystem::CheckRange(const std::string& path, uint64_t begin, uint64_t n,
                                               std::string* bucket, std::string* key, uint64_t* size) {
  if (!ParseObjectPath(path, bucket, key)) {
    return rocksdb::IOStatus::InvalidArgument(path + " is not s3://BUCKET/KEY");
  }
  StatusOr<uint64_t> known = SizeOf(path, *bucket, *key);
  if (!known.ok()) return ToIOStatus(known.status());
  *size = *known;
  if (begin > *size || n > *size - begin) {
    return rocksdb::IOStatus::InvalidArgument(path + ": bytes [" + std::to_string(begin) + ", " +
                                              std::to_string(begin + n) + ") lie past its end (" +
                                              std::to_string(*size) + " bytes)");
  }
  return rocksdb::IOStatus::OK();
}

rocksdb::IOStatus ObjectFileSystem::FetchWindow(const std::string& path, uint64_t begin, uint64_t n,
                                                ObjectWindow* window) {
  std::string bucket, key;
  uint64_t size = 0;
  rocksdb::IOStatus checked = CheckRange(path, begin, n, &bucket, &key, &size);
  if (!checked.ok()) return checked;
  window->path = path;
  window->begin = begin;
  window->size = 0;
  ReserveWindow(window, n);
  rocksdb::IOStatus s = FetchRange(client_, counters_.get(), bucket, key, size, begin, n, window->data.get());
  if (s.ok()) window->size = n;
  return s;
}

void ReserveWindow(ObjectWindow* window, uint64_t n) {
  if (window->capacity < n || window->data == nullptr) {
    window->data.reset();  // the old buffer goes before the new one comes
    window->data.reset(new char[n]);
    window->capacity = n;
  }
}

rocksdb::IOStatus ObjectFileSystem::FetchStream(const std::string& path, uint64_t begin, uint64_t n,
                                                s3::HttpBodyStream* stream) {
  std::string bucket, key;
  uint64_t size = 0;
  rocksdb::IOStatus checked = CheckRange(path, begin, n, &bucket, &key, &size);
  if (!checked.ok()) return checked;
  return FetchRange(client_, counters_.get(), bucket, key, size, begin, n, nullptr, stream);
}

rocksdb::IOStatus ObjectFileSystem::GetFileSize(const std::string& fname, const rocksdb::IOOptions& options,
                                                uint64_t* file_size, rocksdb::IODebugContext* dbg) {
  std::string bucket, key;
  if (!ParseObjectPath(fname, &bucket, &key)) return target()->GetFileSize(fname, options, file_size, dbg);
  StatusOr<uint64_t> size = SizeOf(fname, bucket, key);
  if (!size.ok()) return ToIOStatus(size.status());
  *file_size = *size;
  return rocksdb::IOStatus::OK();
}

rocksdb::IOStatus ObjectFileSystem::FileExists(const std::string& fname, const rocksdb::IOOptions& options,
                                               rocksdb::IODebugContext* dbg) {
  std::string bucket, key;
  if (!ParseObjectPath(fname, &bucket, &key)) return target()->FileExists(fname, options, dbg);
  return ToIOStatus(SizeOf(fname, bucket, key).status());
}

}  // namespace bucket
}  // namespace ckptdb
