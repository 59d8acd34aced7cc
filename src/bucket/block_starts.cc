#include "bucket/block_starts.h"

#include <algorithm>

#include "util/varint.h"

namespace ckptdb {
namespace bucket {

namespace {

constexpr char kFormat = 1;

class BlockStartsCollector : public rocksdb::TablePropertiesCollector {
 public:
  rocksdb::Status AddUserKey(const rocksdb::Slice& key, const rocksdb::Slice& /*value*/, rocksdb::EntryType type,
                             rocksdb::SequenceNumber /*seq*/, uint64_t file_size) override {
    if (type != rocksdb::kEntryPut) return rocksdb::Status::OK();
    const std::string_view k(key.data(), key.size());
    size_t shared = 0;
    const size_t most = std::min(k.size(), last_key_.size());
    while (shared < most && k[shared] == last_key_[shared]) ++shared;
    PutVarint(&out_, shared);
    PutVarint(&out_, k.size() - shared);
    out_.append(k.substr(shared));
    PutVarint(&out_, file_size - last_offset_);
    last_key_.assign(k);
    last_offset_ = file_size;
    return rocksdb::Status::OK();
  }

  rocksdb::Status Finish(rocksdb::UserCollectedProperties* properties) override {
    properties->emplace(kBlockStartsProperty, std::string(1, kFormat) + out_);
    return rocksdb::Status::OK();
  }

  rocksdb::UserCollectedProperties GetReadableProperties() const override { return {}; }
  const char* Name() const override { return "CkptdbBlockStartsCollector"; }

 private:
  std::string out_;
  std::string last_key_;
  uint64_t last_offset_ = 0;
};

class BlockStartsCollectorFactory : public rocksdb::TablePropertiesCollectorFactory {
 public:
  rocksdb::TablePropertiesCollector* CreateTablePropertiesCollector(
      rocksdb::TablePropertiesCollectorFactory::Context /*context*/) override {
    return new BlockStartsCollector();
  }
  const char* Name() const override { return "CkptdbBlockStartsCollectorFactory"; }
};

}  // namespace

std::shared_ptr<rocksdb::TablePropertiesCollectorFactory> NewBlockStartsCollectorFactory() {
  return std::make_shared<BlockStartsCollectorFactory>();
}

std::optional<BlockStarts> BlockStarts::Parse(std::string_view in, uint64_t data_size) {
  if (in.empty() || in.front() != kFormat) return std::nullopt;
  in.remove_prefix(1);
  BlockStarts b;
  b.data_size_ = data_size;
  std::string key;
  uint64_t offset = 0;
  while (!in.empty()) {
    uint64_t shared = 0, fresh = 0, step = 0;
    if (!GetVarint(&in, &shared) || !GetVarint(&in, &fresh) || shared > key.size() || fresh > in.size()) {
      return std::nullopt;
    }
    key.resize(shared);
    key.append(in.substr(0, fresh));
    in.remove_prefix(fresh);
    if (!GetVarint(&in, &step)) return std::nullopt;
    offset += step;
    // Keys strictly increase; blocks start inside the data blocks.
    if ((!b.keys_.empty() && key <= b.keys_.back()) || offset >= data_size) return std::nullopt;
    b.keys_.push_back(key);
    b.offsets_.push_back(offset);
  }
  return b;
}

int64_t BlockStarts::Find(std::string_view key) const {
  auto it = std::lower_bound(keys_.begin(), keys_.end(), key);
  if (it == keys_.end() || *it != key) return -1;
  return it - keys_.begin();
}

uint64_t BlockStarts::End(size_t i) const {
  for (size_t j = i + 1; j < offsets_.size(); ++j) {
    if (offsets_[j] > offsets_[i]) return offsets_[j];
  }
  return data_size_;
}

}  // namespace bucket
}  // namespace ckptdb
