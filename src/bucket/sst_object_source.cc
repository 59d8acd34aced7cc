#include "bucket/sst_object_source.h"

#include <rocksdb/iterator.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include "bucket/sst_object_options.h"
#include "format/chunk_codec.h"
#include "store/rocksdb_status.h"
#include "util/ordered_parallel.h"
#include "util/status_macros.h"

namespace ckptdb {
namespace bucket {

struct SstObjectSource::Table {
  SstObject object;
  std::string path;  // s3://BUCKET/KEY
  std::unique_ptr<rocksdb::SstFileReader> reader;
  std::mutex open_mu;
  bool open_tried = false;  // guarded by open_mu; reader usable once tried and open_status is OK
  Status open_status;       // guarded by open_mu

  bool MayHold(const std::string& key) const {
    if (object.smallest_key.empty() && object.largest_key.empty()) return true;
    return key >= object.smallest_key && key <= object.largest_key;  // bytewise, as DatabaseOptions() orders keys
  }
};

namespace {

std::string DescribeChunk(const DataKey& k) {
  return "chunk " + std::to_string(k.chunk) + " of step " + std::to_string(k.step) + " rank " + std::to_string(k.rank) +
         " item " + std::to_string(k.item);
}

rocksdb::ReadOptions ChunkReadOptions() {
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;  // a damaged block is DataLoss, never parsed
  ro.fill_cache = false;
  ro.pin_data = true;  // values stay where the block holds them while the iterator lives
  ro.readahead_size = 0;
  ro.adaptive_readahead = false;
  return ro;
}

}  // namespace

SstObjectSource::~SstObjectSource() = default;

std::unique_ptr<SstObjectSource> SstObjectSource::Make(s3::S3Client* client, const std::string& bucket,
                                                       std::vector<SstObject> objects,
                                                       const ObjectReadOptions& options) {
  std::unique_ptr<SstObjectSource> source(new SstObjectSource());
  source->bucket_ = bucket;
  source->fs_ = std::make_shared<ObjectFileSystem>(client, options);
  source->env_ = rocksdb::NewCompositeEnv(source->fs_);
  const rocksdb::Options ro = SstObjectReadOptions(source->env_.get());
  for (SstObject& object : objects) {
    auto table = std::make_unique<Table>();
    table->path = ObjectPath(bucket, object.key);
    if (object.size > 0) source->fs_->SetObjectSize(table->path, object.size);
    table->object = std::move(object);
    table->reader = std::make_unique<rocksdb::SstFileReader>(ro);
    source->tables_.push_back(std::move(table));
  }
  return source;
}

Status SstObjectSource::EnsureOpen(Table& table) {
  std::lock_guard<std::mutex> lock(table.open_mu);
  if (!table.open_tried) {
    table.open_status = FromRocks(table.reader->Open(table.path), "opening the SST object " + table.path);
    table.open_tried = true;
  }
  return table.open_status;
}

StatusOr<std::unique_ptr<SstObjectSource>> SstObjectSource::Open(s3::S3Client* client, const std::string& bucket,
                                                                 std::vector<SstObject> objects,
                                                                 const ObjectReadOptions& options, int open_threads) {
  std::unique_ptr<SstObjectSource> source = Make(client, bucket, std::move(objects), options);
  // Each open waits on its own GETs: many at once.
  auto& tables = source->tables_;
  RETURN_IF_ERROR(RunOrdered(
      tables.size(), std::max(1, open_threads), 2 * static_cast<size_t>(std::max(1, open_threads)),
      [&tables](size_t i, std::string*) { return EnsureOpen(*tables[i]); },
      [](size_t, std::string&) { return Status::OK(); }));
  return source;
}

std::unique_ptr<SstObjectSource> SstObjectSource::OpenLazily(s3::S3Client* client, const std::string& bucket,
                                                             std::vector<SstObject> objects,
                                                             const ObjectReadOptions& options) {
  return Make(client, bucket, std::move(objects), options);
}

Status SstObjectSource::Get(const DataKey& key, rocksdb::PinnableSlice* value) const {
  return Lookup(key, value, nullptr);
}

Status SstObjectSource::Lookup(const DataKey& key, rocksdb::PinnableSlice* value, std::string* path) const {
  const std::string k = EncodeDataKey(key);
  for (const auto& table : tables_) {
    if (!table->MayHold(k)) continue;
    // An object of the step that cannot be opened is damage, named; never
    // NotFound, which would read as a chunk missing from every object.
    if (Status open = EnsureOpen(*table); !open.ok()) {
      return open.code() == StatusCode::kNotFound ? Status::DataLoss(open.message()) : open;
    }
    std::unique_ptr<rocksdb::Iterator> it(table->reader->NewIterator(ChunkReadOptions()));
    it->Seek(k);
    RETURN_IF_ERROR(FromRocks(it->status(), "reading " + DescribeChunk(key) + " from the SST object " + table->path));
    if (it->Valid() && it->key() == rocksdb::Slice(k)) {
      if (path != nullptr) *path = table->path;
      // The value lies in the iterator's block (the bytes the GET wrote):
      // pinned by handing the iterator to the slice, not copied.
      const rocksdb::Slice v = it->value();
      value->Reset();  // a slice pinned before lets its block go first
      value->PinSlice(
          v, [](void* iterator, void*) { delete static_cast<rocksdb::Iterator*>(iterator); }, it.release(), nullptr);
      return Status::OK();
    }
  }
  return Status::NotFound("missing");
}

ChunkValueGetter SstObjectSource::Getter() const {
  return [this](const DataKey& key, rocksdb::PinnableSlice* value) { return Get(key, value); };
}

StatusOr<std::vector<std::string>> SstObjectSource::ReadChunks(const std::vector<DataKey>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const DataKey& key : keys) {
    rocksdb::PinnableSlice value;
    std::string path;
    Status s = Lookup(key, &value, &path);
    if (s.code() == StatusCode::kNotFound) {
      return Status::NotFound(DescribeChunk(key) + " is in none of the " + std::to_string(tables_.size()) +
                              " SST objects of bucket '" + bucket_ + "'");
    }
    RETURN_IF_ERROR(s);
    StatusOr<std::string> raw = DecodeChunkToString(std::string_view(value.data(), value.size()));
    if (!raw.ok())
      return Status::DataLoss(DescribeChunk(key) + " in the SST object " + path + ": " + raw.status().message());
    out.push_back(std::move(*raw));
  }
  return out;
}

}  // namespace bucket
}  // namespace ckptdb
