#include "bucket/step_objects.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "bucket/bucket_store.h"
#include "s3/s3_config.h"
#include "store/chunk_reader.h"
#include "store/data_files.h"
#include "util/status_macros.h"

namespace ckptdb {
namespace bucket {

namespace {

class ObjectIndex final : public ChunkPlaceIndex {
 public:
  // Places [0, ranged) are index_.files() (named by object key), then the
  // objects of unknown range.
  explicit ObjectIndex(std::vector<SstObject> objects) {
    std::vector<DataFile> ranged;
    for (SstObject& o : objects) {
      if (o.smallest_key.empty() && o.largest_key.empty()) {
        unranged_.push_back(std::move(o));
        continue;
      }
      sizes_[o.key] = o.size;
      ranged.push_back(DataFile{std::move(o.key), std::move(o.smallest_key), std::move(o.largest_key)});
    }
    index_ = DataFileIndex(std::move(ranged));
  }

  void AddPlacesOf(int64_t step, uint64_t save_id, const StoredPiece& p, std::vector<size_t>* out) const override {
    index_.AddFilesOf(step, save_id, p, out);
    for (size_t i = 0; i < unranged_.size(); ++i) out->push_back(index_.files().size() + i);
  }

  void AppendPlaces(std::vector<size_t> indices, std::string* out) const override {
    std::sort(indices.begin(), indices.end());
    indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
    AppendLE32(out, static_cast<uint32_t>(indices.size()));
    const size_t ranged = index_.files().size();
    for (size_t i : indices) {
      if (i < ranged) {
        const DataFile& f = index_.files()[i];
        AppendLEString(out, f.name);
        AppendLE64(out, sizes_.at(f.name));
        AppendLEString(out, f.smallest);
        AppendLEString(out, f.largest);
      } else {
        const SstObject& o = unranged_.at(i - ranged);
        AppendLEString(out, o.key);
        AppendLE64(out, o.size);
        AppendLEString(out, {});
        AppendLEString(out, {});
      }
    }
  }

 private:
  DataFileIndex index_;
  std::unordered_map<std::string, uint64_t> sizes_;  // by object key, of the ranged objects
  std::vector<SstObject> unranged_;
};

class ObjectReader final : public PlacedChunkReader {
 public:
  ObjectReader(s3::S3Url url, const ReaderOptions& options)
      : url_(std::move(url)), data_prefix_(StorePrefix(url_.prefix) + "data/"), options_(options) {}

  StatusOr<ReadStats> Read(std::string_view places, const StepMetadata& md,
                           const std::vector<ReadItem>& items) override {
    LECursor in(places);
    std::vector<SstObject> objects;
    if (!ConsumeStepObjects(&in, data_prefix_, &objects) || !in.empty()) {
      return Status::Internal("the coordinator's list of the objects of step " + std::to_string(md.step) + " of " +
                              url_.ToString() + " is malformed");
    }
    if (!client_) {
      ASSIGN_OR_RETURN(client_, ClientFromEnvironment(options_.s3_stall_timeout_seconds));
    }
    std::unique_ptr<SstObjectSource> source =
        SstObjectSource::OpenLazily(client_.get(), url_.bucket, std::move(objects), ObjectReadOptions());
    return ReadChunksFrom(source->Getter(), md, items, ReadThreads(options_), source->Planner());
  }

 private:
  const s3::S3Url url_;
  const std::string data_prefix_;
  const ReaderOptions options_;
  std::shared_ptr<s3::S3Client> client_;  // made at the first Read
};

}  // namespace

std::unique_ptr<ChunkPlaceIndex> StepObjectPlaces(std::vector<SstObject> objects) {
  return std::make_unique<ObjectIndex>(std::move(objects));
}

bool ConsumeStepObjects(LECursor* in, const std::string& data_prefix, std::vector<SstObject>* objects) {
  uint32_t n = 0;
  if (!in->U32(&n)) return false;
  objects->clear();
  for (uint32_t i = 0; i < n; ++i) {
    SstObject o;
    if (!in->String(&o.key) || !in->U64(&o.size) || !in->String(&o.smallest_key) || !in->String(&o.largest_key) ||
        o.key.compare(0, data_prefix.size(), data_prefix) != 0 || o.key.size() == data_prefix.size() ||
        o.key.find("/../") != std::string::npos) {
      return false;
    }
    objects->push_back(std::move(o));
  }
  return true;
}

StatusOr<std::unique_ptr<PlacedChunkReader>> NewStepObjectReader(const std::string& url,
                                                                 const ReaderOptions& options) {
  if (!s3::IsS3Url(url)) return Status::InvalidArgument("'" + url + "' is not a bucket store URL (s3://BUCKET/PREFIX)");
  ASSIGN_OR_RETURN(s3::S3Url u, s3::S3Url::Parse(url));
  return std::unique_ptr<PlacedChunkReader>(new ObjectReader(std::move(u), options));
}

}  // namespace bucket
}  // namespace ckptdb
