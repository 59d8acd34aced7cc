#include "bucket/object_upload_env.h"

#include <rocksdb/file_system.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "store/borrowing_file.h"
#include "util/crc32c.h"
#include "util/status_macros.h"

namespace ckptdb {
namespace bucket {

std::map<std::string, uint64_t> UploadLedger::objects() const {
  std::lock_guard<std::mutex> l(mu_);
  return objects_;
}

uint64_t UploadLedger::peak_buffered_bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return peak_;
}

Status UploadLedger::first_error() const {
  std::lock_guard<std::mutex> l(mu_);
  return first_error_;
}

void UploadLedger::Failed(const Status& s) {
  std::lock_guard<std::mutex> l(mu_);
  if (first_error_.ok()) first_error_ = s;
}

void UploadLedger::Completed(const std::string& key, uint64_t size) {
  std::lock_guard<std::mutex> l(mu_);
  objects_[key] = size;
}

void UploadLedger::Buffered(int64_t delta) {
  std::lock_guard<std::mutex> l(mu_);
  buffered_ = static_cast<uint64_t>(static_cast<int64_t>(buffered_) + delta);
  peak_ = std::max(peak_, buffered_);
}

namespace {

rocksdb::IOStatus ToIO(const Status& s) {
  return s.ok() ? rocksdb::IOStatus::OK() : rocksdb::IOStatus::IOError(s.ToString());
}

// Returns the failure of a Status-returning expression as an IOStatus.
#define CKPTDB_RETURN_IO(expr)     \
  do {                             \
    Status _s = (expr);            \
    if (!_s.ok()) return ToIO(_s); \
  } while (0)

// Part buffers handed back after their upload, for the next part of any
// file of the env: a fresh buffer costs a page fault and a zeroed page per
// 4 KiB the first time it is written (~0.1 CPU-s per 256 MiB saved, more
// than the copy into it), a recycled one nothing. Keeps at most `keep`.
class PartBuffers {
 public:
  explicit PartBuffers(size_t keep) : keep_(keep) {}

  // An empty buffer, with the capacity of an earlier one where there is one.
  std::string Take() {
    std::lock_guard<std::mutex> l(mu_);
    if (free_.empty()) return std::string();
    std::string b = std::move(free_.back());
    free_.pop_back();
    return b;
  }

  void Give(std::string b) {
    b.clear();
    std::lock_guard<std::mutex> l(mu_);
    if (free_.size() < keep_) free_.push_back(std::move(b));
  }

 private:
  const size_t keep_;
  std::mutex mu_;
  std::vector<std::string> free_;  // guarded by mu_
};

// Append copies into a part this many bytes at a time (see there).
constexpr size_t kCrcSlice = 128u << 10;

// A part: its pieces in order, each either copied into `owned` (at
// [offset, offset + n)) or lent by the writer (AppendBorrowed: `lent`).
struct Part {
  struct Piece {
    const char* lent;  // null: owned[offset, offset + n)
    size_t offset;
    size_t n;
  };
  int number = 0;
  std::string owned;
  std::vector<Piece> pieces;
  uint64_t size = 0;
  uint32_t crc = 0;  // Crc32c of the pieces, in order

  s3::HttpBody Body() const {
    std::vector<std::string_view> spans;
    spans.reserve(pieces.size());
    for (const Piece& p : pieces) spans.emplace_back(p.lent != nullptr ? p.lent : owned.data() + p.offset, p.n);
    return s3::HttpBody(std::move(spans));
  }
};

class ObjectUploadFile final : public rocksdb::FSWritableFile, public BorrowingFile {
 public:
  ObjectUploadFile(s3::S3Client* client, std::string bucket, std::string key, ObjectUploadOptions options,
                   UploadLedger* ledger, std::shared_ptr<PartBuffers> buffers)
      : client_(client),
        bucket_(std::move(bucket)),
        key_(std::move(key)),
        options_(options),
        ledger_(ledger),
        buffers_(std::move(buffers)) {
    options_.part_bytes = std::max<uint64_t>(options_.part_bytes, 1);
    options_.parts_in_flight = std::max(options_.parts_in_flight, 1);
  }

  ~ObjectUploadFile() override {
    // Destroyed without a successful Close: the object must not appear.
    if (!closed_) {
      // (Not the ledger's error: whatever made the writer give up is.)
      std::lock_guard<std::mutex> l(mu_);
      if (error_.ok()) error_ = Status::Aborted("s3://" + bucket_ + "/" + key_ + ": file destroyed before Close");
      cv_.notify_all();
    }
    StopWorkers();
    if (!upload_id_.empty() && !completed_) (void)client_->AbortMultipartUpload(bucket_, key_, upload_id_);
    ledger_->Buffered(-static_cast<int64_t>(part_.owned.size()));
  }

  using rocksdb::FSWritableFile::Append;
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    if (closed_) return rocksdb::IOStatus::IOError(Name() + ": append after Close");
    CKPTDB_RETURN_IO(FirstError());
    std::string_view rest(data.data(), data.size());
    while (!rest.empty()) {
      // In slices that stay in cache: the part's CRC-32C is taken from the
      // bytes just copied (UploadPart would read them again).
      const size_t n = std::min<size_t>({rest.size(), options_.part_bytes - part_.size, kCrcSlice});
      std::string& owned = part_.owned;
      if (owned.capacity() < options_.part_bytes) owned.reserve(options_.part_bytes);
      if (part_.pieces.empty() || part_.pieces.back().lent != nullptr) {
        part_.pieces.push_back({nullptr, owned.size(), 0});
      }
      part_.pieces.back().n += n;
      owned.append(rest.data(), n);
      part_.crc = Crc32c(owned.data() + owned.size() - n, n, part_.crc);
      ledger_->Buffered(static_cast<int64_t>(n));
      rest.remove_prefix(n);
      part_.size += n;
      size_ += n;
      if (part_.size == options_.part_bytes) CKPTDB_RETURN_IO(SendPart());
    }
    return rocksdb::IOStatus::OK();
  }

  // The pieces join the parts as they lie (store/borrowing_file.h), a piece
  // cut where a part ends: every part but the last is part_bytes, as with
  // copied bytes (servers keep parts in fixed stripes, SeaweedFS's and
  // Ceph's of 4 MiB: a part a few bytes longer costs them a stripe more).
  // A part's CRC-32C is joined from its pieces' without reading them, but
  // for the bytes of a cut piece that end a part.
  rocksdb::IOStatus AppendBorrowed(const std::vector<std::string_view>& pieces,
                                   const std::vector<uint32_t>& crc32cs) override {
    if (closed_) return rocksdb::IOStatus::IOError(Name() + ": append after Close");
    if (crc32cs.size() != pieces.size()) {
      return rocksdb::IOStatus::InvalidArgument(Name() + ": " + std::to_string(pieces.size()) + " pieces lent with " +
                                                std::to_string(crc32cs.size()) + " CRCs");
    }
    CKPTDB_RETURN_IO(FirstError());
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string_view p = pieces[i];
      uint32_t crc = crc32cs[i];
      while (!p.empty()) {
        const uint64_t room = options_.part_bytes - part_.size;
        const size_t n = std::min<uint64_t>(p.size(), room);
        // What ends the part of a piece cut: its CRC read; the rest's then
        // follows from the piece's: crc = Crc32cCombine(head, rest's CRC,
        // rest's size), so the rest's is crc ^ Crc32cCombine(head, 0, size).
        const uint32_t head = n < p.size() ? Crc32c(p.data(), n) : crc;
        part_.pieces.push_back({p.data(), 0, n});
        part_.crc = Crc32cCombine(part_.crc, head, n);
        part_.size += n;
        size_ += n;
        p.remove_prefix(n);
        if (!p.empty()) crc ^= Crc32cCombine(head, 0, p.size());
        if (part_.size == options_.part_bytes) CKPTDB_RETURN_IO(SendPart());
      }
    }
    return rocksdb::IOStatus::OK();
  }

  rocksdb::IOStatus Flush(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override { return ToIO(FirstError()); }
  // Durability comes from Close: an object exists whole or not at all.
  rocksdb::IOStatus Sync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override { return ToIO(FirstError()); }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override { return ToIO(FirstError()); }
  rocksdb::IOStatus RangeSync(uint64_t, uint64_t, const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus InvalidateCache(size_t, size_t) override { return rocksdb::IOStatus::OK(); }
  uint64_t GetFileSize(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override { return size_; }

  rocksdb::IOStatus Close(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    if (closed_) return ToIO(close_status_);
    closed_ = true;
    close_status_ = Finish();
    if (!close_status_.ok()) {
      (void)Fail(close_status_);
      StopWorkers();
      if (!upload_id_.empty() && !completed_) (void)Cleanup()->AbortMultipartUpload(bucket_, key_, upload_id_);
    }
    return ToIO(close_status_);
  }

 private:
  std::string Name() const { return "s3://" + bucket_ + "/" + key_; }
  s3::S3Client* Cleanup() const { return options_.cleanup_client != nullptr ? options_.cleanup_client : client_; }

  Status FirstError() {
    std::lock_guard<std::mutex> l(mu_);
    return error_;
  }

  Status Fail(Status s) {
    ledger_->Failed(s);
    std::lock_guard<std::mutex> l(mu_);
    if (error_.ok()) error_ = s;
    cv_.notify_all();
    return error_;
  }

  // Hands the full part to the upload threads, waiting while
  // parts_in_flight parts are queued or uploading.
  Status SendPart() {
    if (upload_id_.empty()) {
      StatusOr<std::string> id = client_->CreateMultipartUpload(bucket_, key_);
      if (!id.ok()) return Fail(id.status());
      upload_id_ = *id;
      for (int i = 0; i < options_.parts_in_flight; ++i) workers_.emplace_back([this] { Work(); });
    }
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return !error_.ok() || in_flight_ < options_.parts_in_flight; });
    if (!error_.ok()) return error_;
    ++in_flight_;
    part_.number = ++parts_sent_;
    queue_.push_back(std::move(part_));
    part_ = Part();
    part_.owned = buffers_->Take();
    cv_.notify_all();
    return Status::OK();
  }

  void Work() {
    std::unique_lock<std::mutex> l(mu_);
    while (true) {
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Part sending = std::move(queue_.front());
      queue_.pop_front();
      Status failed = error_;
      l.unlock();
      StatusOr<s3::CompletedPart> part =
          failed.ok() ? client_->UploadPartWithItsCrc32c(bucket_, key_, upload_id_, sending.number, sending.Body(),
                                                         sending.crc)
                      : StatusOr<s3::CompletedPart>(failed);
      ledger_->Buffered(-static_cast<int64_t>(sending.owned.size()));
      buffers_->Give(std::move(sending.owned));
      l.lock();
      if (part.ok()) {
        parts_.push_back(*std::move(part));
      } else if (error_.ok()) {
        error_ = part.status();
      }
      --in_flight_;
      cv_.notify_all();
    }
  }

  void StopWorkers() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

  Status Finish() {
    RETURN_IF_ERROR(FirstError());
    std::string expected_etag;
    if (upload_id_.empty()) {
      StatusOr<std::string> etag = client_->PutObjectWithItsCrc32c(bucket_, key_, part_.Body(), part_.crc);
      ledger_->Buffered(-static_cast<int64_t>(part_.owned.size()));
      buffers_->Give(std::move(part_.owned));
      part_ = Part();
      RETURN_IF_ERROR(etag.status());
    } else {
      if (part_.size > 0) RETURN_IF_ERROR(SendPart());
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return !error_.ok() || in_flight_ == 0; });
        RETURN_IF_ERROR(error_);
      }
      StopWorkers();
      std::sort(parts_.begin(), parts_.end(),
                [](const s3::CompletedPart& a, const s3::CompletedPart& b) { return a.part_number < b.part_number; });
      expected_etag = s3::S3Client::MultipartEtag(parts_);
      RETURN_IF_ERROR(client_->CompleteMultipartUpload(bucket_, key_, upload_id_, parts_).status());
      completed_ = true;
    }
    StatusOr<s3::ObjectInfo> head = client_->HeadObject(bucket_, key_);
    Status check = head.status();
    if (check.ok() && head->size != size_) {
      check = Status::DataLoss(Name() + ": uploaded " + std::to_string(size_) + " bytes but the object has " +
                               std::to_string(head->size));
    }
    std::string etag = check.ok() ? head->etag : "";
    etag.erase(std::remove(etag.begin(), etag.end(), '"'), etag.end());
    if (check.ok() && !expected_etag.empty() && etag != expected_etag) {
      check = Status::DataLoss(Name() + ": the object's ETag " + etag + " is not its parts' " + expected_etag);
    }
    if (!check.ok()) {
      (void)Cleanup()->DeleteObject(bucket_, key_);
      return check;
    }
    ledger_->Completed(key_, size_);
    return Status::OK();
  }

  s3::S3Client* client_;
  std::string bucket_, key_;
  ObjectUploadOptions options_;
  UploadLedger* ledger_;
  std::shared_ptr<PartBuffers> buffers_;
  Part part_;  // the part being filled (writer thread only)
  uint64_t size_ = 0;
  int parts_sent_ = 0;
  std::string upload_id_;
  bool completed_ = false;
  bool closed_ = false;
  Status close_status_;
  std::vector<std::thread> workers_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Part> queue_;                         // guarded by mu_
  int in_flight_ = 0;                              // queued or uploading; guarded by mu_
  std::vector<s3::CompletedPart> parts_;           // guarded by mu_
  Status error_;                                   // the first failure; guarded by mu_
  bool stop_ = false;                              // guarded by mu_
};

class ObjectUploadFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  ObjectUploadFileSystem(const std::shared_ptr<rocksdb::FileSystem>& base, s3::S3Client* client, std::string bucket,
                         std::string key_prefix, std::string root, ObjectUploadOptions options, UploadLedger* ledger)
      : FileSystemWrapper(base),
        client_(client),
        bucket_(std::move(bucket)),
        key_prefix_(std::move(key_prefix)),
        root_(std::move(root)),
        options_(options),
        ledger_(ledger),
        // Enough for one file's parts in flight and the one being filled.
        buffers_(std::make_shared<PartBuffers>(static_cast<size_t>(std::max(options.parts_in_flight, 1)) + 1)) {}
  const char* Name() const override { return "CkptdbObjectUploadFileSystem"; }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    std::string key;
    if (!KeyOf(f, &key)) return target()->NewWritableFile(f, o, r, dbg);
    *r = std::make_unique<ObjectUploadFile>(client_, bucket_, key, options_, ledger_, buffers_);
    return rocksdb::IOStatus::OK();
  }

  // A writer that gives up on a file deletes it; a file that never closed
  // left nothing, and one that did is removed from the bucket.
  rocksdb::IOStatus DeleteFile(const std::string& f, const rocksdb::IOOptions& o,
                               rocksdb::IODebugContext* dbg) override {
    std::string key;
    if (!KeyOf(f, &key)) return target()->DeleteFile(f, o, dbg);
    return ToIO(client_->DeleteObject(bucket_, key));
  }

  rocksdb::IOStatus FileExists(const std::string& f, const rocksdb::IOOptions& o,
                               rocksdb::IODebugContext* dbg) override {
    std::string key;
    if (!KeyOf(f, &key)) return target()->FileExists(f, o, dbg);
    StatusOr<s3::ObjectInfo> head = client_->HeadObject(bucket_, key);
    if (head.ok()) return rocksdb::IOStatus::OK();
    return head.status().code() == StatusCode::kNotFound ? rocksdb::IOStatus::NotFound(f) : ToIO(head.status());
  }

 private:
  bool KeyOf(const std::string& path, std::string* key) const {
    if (path.size() <= root_.size() || path.compare(0, root_.size(), root_) != 0) return false;
    *key = key_prefix_ + path.substr(root_.size());
    return true;
  }

  s3::S3Client* client_;
  std::string bucket_, key_prefix_, root_;
  ObjectUploadOptions options_;
  UploadLedger* ledger_;
  std::shared_ptr<PartBuffers> buffers_;
};

#undef CKPTDB_RETURN_IO

}  // namespace

std::unique_ptr<rocksdb::Env> NewObjectUploadEnv(rocksdb::Env* base, s3::S3Client* client, std::string bucket,
                                                 std::string key_prefix, std::string root, ObjectUploadOptions options,
                                                 UploadLedger* ledger) {
  if (base == nullptr) base = rocksdb::Env::Default();
  return rocksdb::NewCompositeEnv(std::make_shared<ObjectUploadFileSystem>(
      base->GetFileSystem(), client, std::move(bucket), std::move(key_prefix), std::move(root), options, ledger));
}

}  // namespace bucket
}  // namespace ckptdb
