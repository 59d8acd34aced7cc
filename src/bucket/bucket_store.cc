#include "bucket/bucket_store.h"

#include <fcntl.h>
#include <rocksdb/sst_file_reader.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "bucket/sst_object_options.h"
#include "format/chunk_codec.h"
#include "format/metadata_codec.h"
#include "store/chunk_reader.h"
#include "store/rocksdb_status.h"
#include "store/rocksdb_store_internal.h"
#include "store/sst_chunk_writer.h"
#include "util/le_bytes.h"
#include "util/ordered_parallel.h"
#include "util/status_macros.h"

namespace ckptdb {
namespace bucket {
namespace {

namespace fs = std::filesystem;

constexpr char kRecordMagic[] = "ckptdb-bucket-step";  // 18 bytes, then the version byte
constexpr uint8_t kRecordVersion = 1;

std::string NormalPrefix(const std::string& prefix) {
  if (prefix.empty() || prefix.back() == '/') return prefix;
  return prefix + "/";
}

std::string Step20(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%020" PRId64, step);
  return buf;
}

std::string Hex(std::string_view s) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

bool Unhex(std::string_view s, std::string* out) {
  if (s.size() % 2 != 0) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  out->clear();
  for (size_t i = 0; i < s.size(); i += 2) {
    const int hi = nibble(s[i]), lo = nibble(s[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi << 4 | lo));
  }
  return true;
}

// A WriteResult::files entry: "KEY SIZE SMALLEST LARGEST", the keys in hex
// (object keys hold no spaces: they are made here).
std::string EncodeObjectEntry(const SstObject& o) {
  return o.key + " " + std::to_string(o.size) + " " + Hex(o.smallest_key) + " " + Hex(o.largest_key);
}

StatusOr<SstObject> DecodeObjectEntry(const std::string& entry) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t sp = entry.find(' ', start);
    parts.push_back(entry.substr(start, sp == std::string::npos ? std::string::npos : sp - start));
    if (sp == std::string::npos) break;
    start = sp + 1;
  }
  SstObject o;
  bool ok = parts.size() == 4;
  if (ok) {
    o.key = parts[0];
    char* end = nullptr;
    o.size = std::strtoull(parts[1].c_str(), &end, 10);
    ok = !parts[1].empty() && *end == '\0' && Unhex(parts[2], &o.smallest_key) && Unhex(parts[3], &o.largest_key);
  }
  if (!ok) return Status::Internal("a rank reported a malformed bucket object entry '" + entry + "'");
  return o;
}

void PutString(std::string* out, std::string_view s) {
  AppendLE32(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}

class Cursor {
 public:
  explicit Cursor(std::string_view s) : s_(s) {}
  bool U32(uint32_t* v) { return ConsumeLE32(&s_, v); }
  bool U64(uint64_t* v) { return ConsumeLE64(&s_, v); }
  bool String(std::string* out) {
    uint32_t n = 0;
    if (!U32(&n) || n > s_.size()) return false;
    out->assign(s_.substr(0, n));
    s_.remove_prefix(n);
    return true;
  }
  bool Bytes(size_t n, std::string_view* out) {
    if (n > s_.size()) return false;
    *out = s_.substr(0, n);
    s_.remove_prefix(n);
    return true;
  }
  bool empty() const { return s_.empty(); }

 private:
  std::string_view s_;
};

Status ValidateOptions(const StoreOptions& o, const BucketWriteOptions& w) {
  RETURN_IF_ERROR(ValidateStoreOptions(o));
  if (w.part_bytes == 0 || w.upload_threads < 1) {
    return Status::InvalidArgument("BucketWriteOptions.part_bytes and upload_threads must be positive");
  }
  return Status::OK();
}

// The smallest and largest keys of a finished local SST file.
Status KeyRange(const std::string& path, std::string* smallest, std::string* largest) {
  rocksdb::SstFileReader reader(SstObjectWriteOptions());
  RETURN_IF_ERROR(FromRocks(reader.Open(path), "opening " + path));
  std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(rocksdb::ReadOptions()));
  it->SeekToFirst();
  if (!it->Valid()) return FromRocks(it->status(), "reading the first key of " + path);
  *smallest = it->key().ToString();
  it->SeekToLast();
  if (!it->Valid()) return FromRocks(it->status(), "reading the last key of " + path);
  *largest = it->key().ToString();
  return FromRocks(it->status(), "reading " + path);
}

Status ReadAt(int fd, const std::string& path, uint64_t offset, size_t n, std::string* out) {
  out->resize(n);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, out->data() + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      return Status::IOError("cannot read " + path + ": " + (r < 0 ? std::strerror(errno) : "unexpected end"));
    }
    done += static_cast<size_t>(r);
  }
  return Status::OK();
}

class BucketStoreWriter : public StorageWriter {
 public:
  BucketStoreWriter(s3::S3Client* client, std::string bucket, std::string prefix, StoreOptions options,
                    BucketWriteOptions write_options)
      : client_(client),
        bucket_(std::move(bucket)),
        prefix_(std::move(prefix)),
        options_(std::move(options)),
        write_options_(std::move(write_options)) {}

  FileDelivery delivery() const override { return FileDelivery::kShared; }

  StatusOr<uint64_t> Prepare(int64_t step) override {
    const std::string key = StepRecordKey(prefix_, step);
    StatusOr<s3::ObjectInfo> head = client_->HeadObject(bucket_, key);
    if (head.ok()) {
      return Status::AlreadyExists("step " + std::to_string(step) + " is already committed in " + Where() + " (" + key +
                                   ")");
    }
    if (head.status().code() != StatusCode::kNotFound) return head.status();
    return NewSaveId();
  }

  StatusOr<std::vector<ReuseCandidate>> FindReusable(const SaveContext&, const StepMetadata&) override {
    return std::vector<ReuseCandidate>{};  // no deduplication in bucket stores yet
  }

  Status PrepareStorage(const SaveContext& ctx, const std::vector<WriteItem>& items) override {
    return CheckWriteItems(ctx, items);
  }

  StatusOr<WriteResult> Write(const SaveContext& ctx, const std::vector<WriteItem>& items) override {
    const fs::path base =
        write_options_.local_dir.empty() ? fs::temp_directory_path() : fs::path(write_options_.local_dir);
    char name[96];
    std::snprintf(name, sizeof(name), "ckptdb-bucket-%016" PRIx64 "-rank-%d-%016" PRIx64, ctx.save_id, ctx.rank,
                  NewSaveId());
    const fs::path dir = base / name;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return Status::IOError("cannot create the local directory " + dir.string() + ": " + ec.message());
    StatusOr<WriteResult> r = WriteAndUpload(ctx, items, dir.string());
    fs::remove_all(dir, ec);  // every local copy, uploaded or not
    return r;
  }

  StatusOr<std::string> ReceivedFilePath(const SaveContext&, int, const std::string&) override {
    return Status::FailedPrecondition("bucket store " + Where() + " is shared: no files are sent to the coordinator");
  }

  void DiscardLocalFiles(const SaveContext&) override {}

  Status Finish(const SaveContext& ctx, const StepMetadata& metadata,
                const std::vector<WriteResult>& results) override {
    Status v = ValidateStepMetadata(metadata);
    if (!v.ok()) return Status::Internal("refusing to commit inconsistent metadata: " + v.message());
    StepRecord record;
    record.metadata_value = EncodeMetadataValue(metadata);
    const std::string own = SaveDataPrefix(prefix_, ctx.step, ctx.save_id);
    for (const WriteResult& r : results) {
      for (const std::string& entry : r.files) {
        ASSIGN_OR_RETURN(SstObject o, DecodeObjectEntry(entry));
        if (o.key.compare(0, own.size(), own) != 0) {
          return Status::Internal("rank " + std::to_string(r.rank) + " reported object '" + o.key +
                                  "' outside this save's prefix " + own);
        }
        record.objects.push_back(std::move(o));
      }
    }
    // Every object is where the ranks said, whole, before the step refers
    // to it: one HEAD each, 16 at once.
    RETURN_IF_ERROR(CheckSizes(ctx, record.objects));
    const std::string key = StepRecordKey(prefix_, ctx.step);
    StatusOr<std::string> put = client_->PutObject(bucket_, key, EncodeStepRecord(record), /*if_none_match=*/true);
    if (put.status().code() == StatusCode::kAlreadyExists) {
      return Status::AlreadyExists("step " + std::to_string(ctx.step) + " was committed in " + Where() +
                                   " by another save first (" + key + ")");
    }
    // A put that failed without an answer (the client's retries spent) may
    // have landed: the record read back decides.
    if (!put.ok() && CommittedBy(ctx) == Committed::kThisSave) return Status::OK();
    return put.status();
  }

  void Abort(const SaveContext& ctx) override {
    // Finish may have failed after its record landed, or without knowing:
    // the objects of a step that is (or may be) this save's stay.
    if (CommittedBy(ctx) != Committed::kNotThisSave) return;
    StatusOr<std::vector<s3::ObjectInfo>> objects =
        client_->ListAll(bucket_, SaveDataPrefix(prefix_, ctx.step, ctx.save_id));
    if (!objects.ok()) return;  // best effort: what stays is a leftover for gc
    std::vector<std::string> keys;
    for (const s3::ObjectInfo& o : *objects) keys.push_back(o.key);
    for (size_t i = 0; i < keys.size(); i += 1000) {
      const size_t end = std::min(keys.size(), i + 1000);
      (void)client_->DeleteObjects(bucket_, std::vector<std::string>(keys.begin() + i, keys.begin() + end));
    }
  }

 private:
  std::string Where() const { return "s3://" + bucket_ + "/" + prefix_; }

  Status CheckSizes(const SaveContext& ctx, const std::vector<SstObject>& objects) {
    constexpr size_t kHeadThreads = 16;
    std::atomic<size_t> next{0};
    std::mutex mu;
    Status first;
    auto work = [&] {
      for (size_t i = next.fetch_add(1); i < objects.size(); i = next.fetch_add(1)) {
        const SstObject& o = objects[i];
        StatusOr<s3::ObjectInfo> info = client_->HeadObject(bucket_, o.key);
        Status s = info.status();
        if (s.ok() && info->size != o.size) {
          s = Status::DataLoss("object s3://" + bucket_ + "/" + o.key + " of step " + std::to_string(ctx.step) +
                               " holds " + std::to_string(info->size) + " bytes, but " + std::to_string(o.size) +
                               " were uploaded");
        }
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (first.ok()) first = s;
          return;
        }
      }
    };
    std::vector<std::thread> threads;
    for (size_t t = 1; t < std::min(kHeadThreads, objects.size()); ++t) threads.emplace_back(work);
    work();
    for (std::thread& t : threads) t.join();
    return first;
  }

  enum class Committed { kThisSave, kNotThisSave, kUnknown };
  // Whose step record ctx.step has, read back.
  Committed CommittedBy(const SaveContext& ctx) {
    StatusOr<std::string> value = client_->GetObject(bucket_, StepRecordKey(prefix_, ctx.step));
    if (value.status().code() == StatusCode::kNotFound) return Committed::kNotThisSave;
    if (!value.ok()) return Committed::kUnknown;
    StatusOr<StepRecord> record = DecodeStepRecord(*value);
    if (!record.ok()) return Committed::kUnknown;
    StatusOr<StepMetadata> md = DecodeMetadataValue(record->metadata_value);
    if (!md.ok()) return Committed::kUnknown;
    return md->save_id == ctx.save_id ? Committed::kThisSave : Committed::kNotThisSave;
  }

  StatusOr<WriteResult> WriteAndUpload(const SaveContext& ctx, const std::vector<WriteItem>& items,
                                       const std::string& dir) {
    ChunkWriteOptions o;
    o.chunk_bytes = options_.chunk_bytes;
    o.compression = options_.compression;
    o.zstd_level = options_.zstd_level;
    o.max_sst_file_bytes = options_.max_sst_file_bytes;
    o.invalidate_page_cache = options_.sst_invalidate_page_cache;
    o.threads = options_.threads > 0 ? options_.threads : DefaultParallelism();
    o.boxes = options_.chunk_layout == ChunkLayout::kBoxes;
    o.content_hashes = options_.content_hashes;
    o.writeback_bytes = 0;  // the files are read back for upload and removed
    ASSIGN_OR_RETURN(WriteResult result, WriteItemsToSst(dir, ctx, items, SstObjectWriteOptions(), o));
    const std::string save_prefix = SaveDataPrefix(prefix_, ctx.step, ctx.save_id);
    std::vector<std::string> entries;
    std::vector<std::string> uploaded;
    Status failed;
    for (const std::string& path : result.files) {
      SstObject obj;
      obj.key = save_prefix + fs::path(path).filename().string();
      Status s = KeyRange(path, &obj.smallest_key, &obj.largest_key);
      std::error_code ec;
      if (s.ok()) {
        obj.size = fs::file_size(path, ec);
        if (ec) s = Status::IOError("cannot stat " + path + ": " + ec.message());
      }
      if (s.ok()) s = Upload(path, obj.key, obj.size);
      if (!s.ok()) {
        failed = s;
        break;
      }
      uploaded.push_back(obj.key);
      entries.push_back(EncodeObjectEntry(obj));
      fs::remove(path, ec);
    }
    if (!failed.ok()) {
      // This rank's objects go now; the coordinator's Abort lists the rest.
      if (!uploaded.empty()) (void)client_->DeleteObjects(bucket_, uploaded);
      return failed;
    }
    result.files = std::move(entries);
    return result;
  }

  Status Upload(const std::string& path, const std::string& key, uint64_t size) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::IOError("cannot open " + path + ": " + std::strerror(errno));
    Status s =
        size < write_options_.multipart_threshold ? PutWhole(fd, path, key, size) : PutInParts(fd, path, key, size);
    ::close(fd);
    return s;
  }

  Status PutWhole(int fd, const std::string& path, const std::string& key, uint64_t size) {
    std::string data;
    RETURN_IF_ERROR(ReadAt(fd, path, 0, size, &data));
    return client_->PutObject(bucket_, key, data).status();
  }

  // Parts read and uploaded by upload_threads threads at once, each holding
  // one part: memory stays bounded whatever the file's size.
  Status PutInParts(int fd, const std::string& path, const std::string& key, uint64_t size) {
    ASSIGN_OR_RETURN(std::string upload_id, client_->CreateMultipartUpload(bucket_, key));
    const uint64_t part = write_options_.part_bytes;
    const int parts = static_cast<int>((size + part - 1) / part);
    std::vector<s3::CompletedPart> done(parts);
    std::atomic<int> next{0};
    std::mutex mu;
    Status first;
    auto work = [&] {
      std::string buf;
      while (true) {
        const int i = next.fetch_add(1);
        if (i >= parts) return;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!first.ok()) return;
        }
        const uint64_t begin = static_cast<uint64_t>(i) * part;
        Status s = ReadAt(fd, path, begin, std::min(part, size - begin), &buf);
        StatusOr<std::string> etag =
            s.ok() ? client_->UploadPart(bucket_, key, upload_id, i + 1, buf) : StatusOr<std::string>(s);
        std::lock_guard<std::mutex> lock(mu);
        if (!etag.ok()) {
          if (first.ok()) first = etag.status();
          return;
        }
        done[i] = s3::CompletedPart{i + 1, *etag};
      }
    };
    std::vector<std::thread> threads;
    const int n = std::min(parts, write_options_.upload_threads);
    for (int t = 1; t < n; ++t) threads.emplace_back(work);
    work();
    for (std::thread& t : threads) t.join();
    if (first.ok()) first = client_->CompleteMultipartUpload(bucket_, key, upload_id, done).status();
    if (!first.ok()) (void)client_->AbortMultipartUpload(bucket_, key, upload_id);
    return first;
  }

  s3::S3Client* client_;
  const std::string bucket_;
  const std::string prefix_;
  const StoreOptions options_;
  const BucketWriteOptions write_options_;
};

class BucketReader : public BucketStoreReader {
 public:
  BucketReader(s3::S3Client* client, std::string bucket, std::string prefix, int threads)
      : client_(client), bucket_(std::move(bucket)), prefix_(std::move(prefix)), threads_(threads) {}

  StatusOr<StepMetadata> ReadMetadata(int64_t step) override {
    ASSIGN_OR_RETURN(StepRecord record, ReadRecord(step));
    StatusOr<StepMetadata> md = DecodeMetadataValue(record.metadata_value);
    if (!md.ok()) {
      return Status::DataLoss("the metadata in step record s3://" + bucket_ + "/" + StepRecordKey(prefix_, step) +
                              " is damaged: " + md.status().message());
    }
    if (md->step != step) {
      return Status::DataLoss("step record s3://" + bucket_ + "/" + StepRecordKey(prefix_, step) +
                              " holds the metadata of step " + std::to_string(md->step));
    }
    std::lock_guard<std::mutex> lock(mu_);
    objects_[step] = std::move(record.objects);
    return md;
  }

  StatusOr<ReadStats> Read(const StepMetadata& metadata, const std::vector<ReadItem>& items) override {
    ASSIGN_OR_RETURN(const SstObjectSource* source, SourceOf(metadata.step));
    return ReadChunksFrom(source->Getter(), metadata, items, threads_);
  }

  StatusOr<std::vector<int64_t>> ListSteps() override {
    const std::string dir = prefix_ + "steps/";
    ASSIGN_OR_RETURN(std::vector<s3::ObjectInfo> objects, client_->ListAll(bucket_, dir));
    std::vector<int64_t> steps;
    for (const s3::ObjectInfo& o : objects) {
      const std::string name = o.key.substr(dir.size());
      if (name.size() != 20 || name.find_first_not_of("0123456789") != std::string::npos) continue;
      steps.push_back(static_cast<int64_t>(std::stoull(name)));
    }
    std::sort(steps.begin(), steps.end());
    return steps;
  }

 private:
  StatusOr<StepRecord> ReadRecord(int64_t step) {
    const std::string key = StepRecordKey(prefix_, step);
    StatusOr<std::string> value = client_->GetObject(bucket_, key);
    if (value.status().code() == StatusCode::kNotFound) {
      return Status::NotFound("step " + std::to_string(step) + " not found in s3://" + bucket_ + "/" + prefix_ +
                              " (no " + key + ")");
    }
    if (!value.ok()) return value.status();
    StatusOr<StepRecord> record = DecodeStepRecord(*value);
    if (!record.ok()) {
      return Status::DataLoss("step record s3://" + bucket_ + "/" + key + " of step " + std::to_string(step) +
                              " is damaged: " + record.status().message());
    }
    return record;
  }

  // The step's data objects, opened once per step this reader reads.
  StatusOr<const SstObjectSource*> SourceOf(int64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    auto open = sources_.find(step);
    if (open != sources_.end()) return open->second.get();
    auto known = objects_.find(step);
    std::vector<SstObject> objects;
    if (known != objects_.end()) {
      objects = known->second;
    } else {
      ASSIGN_OR_RETURN(StepRecord record, ReadRecord(step));
      objects = std::move(record.objects);
    }
    ASSIGN_OR_RETURN(std::unique_ptr<SstObjectSource> source,
                     SstObjectSource::Open(client_, bucket_, std::move(objects), ObjectReadOptions(), threads_));
    const SstObjectSource* raw = source.get();
    sources_[step] = std::move(source);
    return raw;
  }

  s3::S3Client* client_;
  const std::string bucket_;
  const std::string prefix_;
  const int threads_;
  std::mutex mu_;
  std::map<int64_t, std::vector<SstObject>> objects_;            // guarded by mu_
  std::map<int64_t, std::unique_ptr<SstObjectSource>> sources_;  // guarded by mu_
};

}  // namespace

std::string StepRecordKey(const std::string& prefix, int64_t step) { return prefix + "steps/" + Step20(step); }

std::string SaveDataPrefix(const std::string& prefix, int64_t step, uint64_t save_id) {
  char id[17];
  std::snprintf(id, sizeof(id), "%016" PRIx64, save_id);
  return prefix + "data/" + Step20(step) + "/" + id + "/";
}

std::string EncodeStepRecord(const StepRecord& record) {
  std::string raw(kRecordMagic, sizeof(kRecordMagic) - 1);
  raw.push_back(static_cast<char>(kRecordVersion));
  PutString(&raw, record.metadata_value);
  AppendLE32(&raw, static_cast<uint32_t>(record.objects.size()));
  for (const SstObject& o : record.objects) {
    PutString(&raw, o.key);
    AppendLE64(&raw, o.size);
    PutString(&raw, o.smallest_key);
    PutString(&raw, o.largest_key);
  }
  std::string value;
  EncodeChunk(raw.data(), raw.size(), Compression::kNone, 1, &value);
  return value;
}

StatusOr<StepRecord> DecodeStepRecord(std::string_view value) {
  ASSIGN_OR_RETURN(std::string raw, DecodeChunkToString(value));
  Cursor c(raw);
  std::string expected(kRecordMagic, sizeof(kRecordMagic) - 1);
  expected.push_back(static_cast<char>(kRecordVersion));
  std::string_view magic;
  if (!c.Bytes(expected.size(), &magic) || magic != expected) {
    return Status::DataLoss("not a step record of version " + std::to_string(kRecordVersion));
  }
  StepRecord r;
  uint32_t n = 0;
  bool ok = c.String(&r.metadata_value) && c.U32(&n);
  for (uint32_t i = 0; ok && i < n; ++i) {
    SstObject o;
    ok = c.String(&o.key) && c.U64(&o.size) && c.String(&o.smallest_key) && c.String(&o.largest_key);
    r.objects.push_back(std::move(o));
  }
  if (!ok || !c.empty()) return Status::DataLoss("the step record's layout is wrong (truncated or trailing bytes)");
  return r;
}

StatusOr<std::unique_ptr<StorageWriter>> OpenBucketStoreWriter(s3::S3Client* client, const std::string& bucket,
                                                               const std::string& prefix, const StoreOptions& options,
                                                               const BucketWriteOptions& write_options) {
  RETURN_IF_ERROR(ValidateOptions(options, write_options));
  if (bucket.empty()) return Status::InvalidArgument("bucket store: the bucket name is empty");
  return std::unique_ptr<StorageWriter>(
      new BucketStoreWriter(client, bucket, NormalPrefix(prefix), options, write_options));
}

StatusOr<std::unique_ptr<BucketStoreReader>> OpenBucketStoreReader(s3::S3Client* client, const std::string& bucket,
                                                                   const std::string& prefix, int read_threads) {
  if (bucket.empty()) return Status::InvalidArgument("bucket store: the bucket name is empty");
  if (read_threads < 1) return Status::InvalidArgument("bucket store: read_threads must be positive");
  return std::unique_ptr<BucketStoreReader>(new BucketReader(client, bucket, NormalPrefix(prefix), read_threads));
}

}  // namespace bucket
}  // namespace ckptdb
