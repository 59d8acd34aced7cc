#include "store/block_per_key_table.h"

#include <rocksdb/comparator.h>
#include <rocksdb/table.h>
#include <xxhash.h>

#include <cstring>
#include <map>
#include <random>

#include "store/rocksdb_status.h"
#include "util/le_bytes.h"
#include "util/status_macros.h"
#include "util/varint.h"

namespace ckptdb {

namespace {

constexpr uint32_t kFormatVersion = 5;
constexpr char kXXH3ChecksumType = 4;  // rocksdb::kXXH3
constexpr uint64_t kBlockBasedTableMagic = 0x88e241b785f4cff7ull;
constexpr size_t kTrailerBytes = 5;  // compression type, checksum
constexpr size_t kFooterHandlesBytes = 40;  // two handles, zero-padded
// Sequence number 0, type kTypeValue, as a user key's 8-byte suffix.
constexpr char kSeqAndType[8] = {1, 0, 0, 0, 0, 0, 0, 0};
constexpr uint32_t kUnknownColumnFamily = 0x7fffffff;

uint32_t BlockChecksum(const char* contents, size_t n) {
  // (The compression type byte, 0, changes nothing in RocksDB's XXH3 sum.)
  return static_cast<uint32_t>(XXH3_64bits(contents, n));
}

void PutHandle(std::string* out, uint64_t offset, uint64_t size) {
  PutVarint(out, offset);
  PutVarint(out, size);
}

// A block of entries each at a restart point of its own (nothing shared
// with the key before), with or without their values' lengths (an index
// whose values are delta-encoded omits them).
class EntriesBlock {
 public:
  explicit EntriesBlock(bool value_lengths) : value_lengths_(value_lengths) {}
  void Add(std::string_view key, std::string_view value) {
    restarts_.push_back(static_cast<uint32_t>(out_.size()));
    PutVarint(&out_, 0);
    PutVarint(&out_, key.size());
    if (value_lengths_) PutVarint(&out_, value.size());
    out_.append(key);
    out_.append(value);
  }
  std::string Finish() {
    for (uint32_t r : restarts_) AppendLE32(&out_, r);
    AppendLE32(&out_, static_cast<uint32_t>(restarts_.size()));
    return std::move(out_);
  }

 private:
  bool value_lengths_;
  std::string out_;
  std::vector<uint32_t> restarts_;
};

std::string Varint(uint64_t v) {
  std::string s;
  PutVarint(&s, v);
  return s;
}

// A session id as RocksDB makes them (20 characters of base 36), so that
// readers derive the file's unique id (cache keys) as for SstFileWriter's.
std::string NewSessionId() {
  static const char kDigits[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
  std::random_device rd;
  std::mt19937_64 gen((uint64_t{rd()} << 32) ^ rd());
  std::string id(20, '0');
  for (char& c : id) c = kDigits[gen() % 36];
  return id;
}

}  // namespace

size_t DataBlockHeadSize(size_t key_size, size_t value_size) {
  return 1 + VarintBytes(key_size + 8) + VarintBytes(value_size) + key_size + 8;
}

void WriteDataBlockHead(std::string_view key, size_t value_size, char* head) {
  std::string lengths;
  PutVarint(&lengths, 0);
  PutVarint(&lengths, key.size() + 8);
  PutVarint(&lengths, value_size);
  std::memcpy(head, lengths.data(), lengths.size());
  std::memcpy(head + lengths.size(), key.data(), key.size());
  std::memcpy(head + lengths.size() + key.size(), kSeqAndType, 8);
}

void WriteDataBlockTail(char* block, size_t contents_bytes) {
  char* t = block + contents_bytes;
  PutLE32(t, 0);      // the one restart point: the block's start
  PutLE32(t + 4, 1);  // one restart (binary-search data blocks)
  t[8] = 0;           // no compression
  PutLE32(t + 9, BlockChecksum(block, contents_bytes + 8));
}

void BuildDataBlock(std::string_view key, std::string_view value, std::string* out) {
  const size_t head = DataBlockHeadSize(key.size(), value.size());
  out->resize(head + value.size() + kDataBlockTailBytes);
  WriteDataBlockHead(key, value.size(), out->data());
  if (!value.empty()) std::memcpy(out->data() + head, value.data(), value.size());
  WriteDataBlockTail(out->data(), head + value.size());
}

bool DataBlockValueSize(std::string_view block, uint64_t* value_size) {
  std::string_view in = block;
  uint64_t shared = 0, key_bytes = 0;
  if (!GetVarint(&in, &shared) || shared != 0 || !GetVarint(&in, &key_bytes) || !GetVarint(&in, value_size)) {
    return false;
  }
  return key_bytes >= 8 && in.size() >= key_bytes && in.size() - key_bytes >= kDataBlockTailBytes &&
         in.size() - key_bytes - kDataBlockTailBytes == *value_size;
}

BlockPerKeyTableWriter::BlockPerKeyTableWriter(const rocksdb::Options& options, const rocksdb::EnvOptions& env_options,
                                               bool invalidate_page_cache)
    : options_(options), env_options_(env_options), invalidate_page_cache_(invalidate_page_cache) {}

BlockPerKeyTableWriter::~BlockPerKeyTableWriter() {
  if (file_) (void)file_->Close();
}

Status BlockPerKeyTableWriter::Open(const std::string& path) {
  path_ = path;
  // The table this writes is the one these options describe; any other
  // would be a file that RocksDB reads differently from how it was meant.
  const auto* table = options_.table_factory != nullptr
                          ? options_.table_factory->GetOptions<rocksdb::BlockBasedTableOptions>()
                          : nullptr;
  if (table == nullptr || table->checksum != rocksdb::kXXH3 || table->format_version != kFormatVersion ||
      table->index_type != rocksdb::BlockBasedTableOptions::kBinarySearch || table->filter_policy != nullptr ||
      !table->whole_key_filtering || options_.prefix_extractor != nullptr ||
      options_.compression != rocksdb::kNoCompression ||
      options_.comparator != rocksdb::BytewiseComparator()) {
    return Status::InvalidArgument(
        "BlockPerKeyTableWriter writes block-based tables of format version 5 with XXH3 checksums, a binary-search "
        "index, no filter, no compression and the bytewise comparator; these options ask for another table (" +
        path + ")");
  }
  rocksdb::Env* env = options_.env != nullptr ? options_.env : rocksdb::Env::Default();
  RETURN_IF_ERROR(FromRocks(env->NewWritableFile(path, &file_, env_options_), "opening SST file " + path));
  rocksdb::TablePropertiesCollectorFactory::Context context;
  context.column_family_id = kUnknownColumnFamily;
  for (const auto& factory : options_.table_properties_collector_factories) {
    collectors_.emplace_back(factory->CreateTablePropertiesCollector(context));
  }
  return Status::OK();
}

Status BlockPerKeyTableWriter::Append(std::string_view bytes) {
  RETURN_IF_ERROR(FromRocks(file_->Append(rocksdb::Slice(bytes.data(), bytes.size())), "writing SST file " + path_));
  offset_ += bytes.size();
  const uint64_t every = env_options_.bytes_per_sync;
  if (every > 0 && offset_ - synced_to_ >= every) {
    RETURN_IF_ERROR(FromRocks(file_->RangeSync(synced_to_, offset_ - synced_to_), "writing SST file " + path_));
    synced_to_ = offset_;
  }
  return Status::OK();
}

Status BlockPerKeyTableWriter::Add(std::string_view key, std::string_view block) {
  if (!file_) return Status::FailedPrecondition("SST file is not open");
  if (entries_ > 0 && key <= std::string_view(last_key_)) {
    return Status::InvalidArgument("SST file " + path_ + ": keys must be added in increasing order");
  }
  uint64_t value_size = 0;
  const bool parsed = DataBlockValueSize(block, &value_size);
  const size_t head = parsed ? DataBlockHeadSize(key.size(), value_size) : 0;
  if (!parsed || block.size() != head + value_size + kDataBlockTailBytes ||
      block.substr(head - 8 - key.size(), key.size()) != key) {
    return Status::InvalidArgument("SST file " + path_ + ": a block that is not its key's");
  }
  const uint64_t start = offset_;
  for (auto& c : collectors_) {
    const rocksdb::Slice value(block.data() + head, value_size);
    RETURN_IF_ERROR(FromRocks(c->AddUserKey(rocksdb::Slice(key.data(), key.size()), value, rocksdb::kEntryPut, 0, start),
                              "collecting the properties of SST file " + path_));
  }
  RETURN_IF_ERROR(Append(block));
  // The index: the block's key (unshortened) and its handle, in full at a
  // restart point of its own, as RocksDB writes an index with delta-encoded
  // values and restart interval 1.
  index_restarts_.push_back(static_cast<uint32_t>(index_entries_.size()));
  PutVarint(&index_entries_, 0);
  PutVarint(&index_entries_, key.size());
  index_entries_.append(key);
  PutHandle(&index_entries_, start, block.size() - kTrailerBytes);
  if (entries_ == 0) first_key_.assign(key);
  last_key_.assign(key);
  ++entries_;
  raw_key_bytes_ += key.size() + 8;
  raw_value_bytes_ += value_size;
  return Status::OK();
}

Status BlockPerKeyTableWriter::WriteBlock(const std::string& contents, uint64_t* offset, uint64_t* size) {
  *offset = offset_;
  *size = contents.size();
  char trailer[kTrailerBytes];
  trailer[0] = 0;
  PutLE32(trailer + 1, BlockChecksum(contents.data(), contents.size()));
  RETURN_IF_ERROR(Append(contents));
  return Append(std::string_view(trailer, kTrailerBytes));
}

Status BlockPerKeyTableWriter::Finish(rocksdb::ExternalSstFileInfo* info) {
  if (!file_) return Status::FailedPrecondition("SST file is not open");
  if (entries_ == 0) return Status::InvalidArgument("cannot create an SST file with no entries: " + path_);
  const uint64_t data_size = offset_;
  std::string index = std::move(index_entries_);
  for (uint32_t r : index_restarts_) AppendLE32(&index, r);
  AppendLE32(&index, static_cast<uint32_t>(index_restarts_.size()));
  uint64_t index_offset = 0, index_size = 0;
  RETURN_IF_ERROR(WriteBlock(index, &index_offset, &index_size));

  // The properties, in key order: RocksDB's own, SstFileWriter's, the
  // block-based table's and the collectors'.
  std::map<std::string, std::string> props;
  auto number = [&](const std::string& name, uint64_t v) { props[name] = Varint(v); };
  using Names = rocksdb::TablePropertiesNames;
  number(Names::kOriginalFileNumber, 1);
  number(Names::kRawKeySize, raw_key_bytes_);
  number(Names::kRawValueSize, raw_value_bytes_);
  number(Names::kDataSize, data_size);
  number(Names::kIndexSize, index_size + kTrailerBytes);
  number(Names::kIndexKeyIsUserKey, 1);
  number(Names::kIndexValueIsDeltaEncoded, 1);
  number(Names::kNumEntries, entries_);
  number(Names::kNumFilterEntries, 0);
  number(Names::kDeletedKeys, 0);
  number(Names::kMergeOperands, 0);
  number(Names::kNumRangeDeletions, 0);
  number(Names::kNumDataBlocks, entries_);
  number(Names::kFilterSize, 0);
  number(Names::kFormatVersion, kFormatVersion);
  number(Names::kFixedKeyLen, 0);
  number(Names::kColumnFamilyId, kUnknownColumnFamily);
  number(Names::kCreationTime, 0);
  number(Names::kOldestKeyTime, 0);
  props[Names::kDbId] = "SST Writer";
  props[Names::kDbSessionId] = NewSessionId();
  std::string host = options_.db_host_id;
  if (host == rocksdb::kHostnameForDbHostId) {
    rocksdb::Env* env = options_.env != nullptr ? options_.env : rocksdb::Env::Default();
    if (!env->GetHostNameString(&host).ok()) host.clear();
  }
  if (!host.empty()) props[Names::kDbHostId] = host;
  props[Names::kComparator] = options_.comparator->Name();
  props[Names::kMergeOperator] = "nullptr";
  props[Names::kPrefixExtractorName] = "nullptr";
  std::string collector_names = "[";
  for (size_t i = 0; i < options_.table_properties_collector_factories.size(); ++i) {
    if (i > 0) collector_names += ",";
    collector_names += options_.table_properties_collector_factories[i]->Name();
  }
  props[Names::kPropertyCollectors] = collector_names + "]";
  props[Names::kCompression] = "NoCompression";
  props[Names::kCompressionOptions] =
      "window_bits=-14; level=32767; strategy=0; max_dict_bytes=0; zstd_max_train_bytes=0; enabled=0; "
      "max_dict_buffer_bytes=0; use_zstd_dict_trainer=1; ";
  std::string version, seqno, index_type;
  AppendLE32(&version, 2);
  AppendLE64(&seqno, 0);
  AppendLE32(&index_type, 0);  // binary search
  props["rocksdb.external_sst_file.version"] = version;
  props["rocksdb.external_sst_file.global_seqno"] = seqno;
  props["rocksdb.block.based.table.index.type"] = index_type;
  props["rocksdb.block.based.table.prefix.filtering"] = "0";
  props["rocksdb.block.based.table.whole.key.filtering"] = "1";
  for (auto& c : collectors_) {
    rocksdb::UserCollectedProperties collected;
    RETURN_IF_ERROR(FromRocks(c->Finish(&collected), "collecting the properties of SST file " + path_));
    for (auto& [name, value] : collected) props[name] = value;
  }
  EntriesBlock properties(true);
  for (const auto& [name, value] : props) properties.Add(name, value);
  uint64_t props_offset = 0, props_size = 0;
  RETURN_IF_ERROR(WriteBlock(properties.Finish(), &props_offset, &props_size));

  std::string handle;
  PutHandle(&handle, props_offset, props_size);
  EntriesBlock metaindex(true);
  metaindex.Add("rocksdb.properties", handle);
  uint64_t meta_offset = 0, meta_size = 0;
  RETURN_IF_ERROR(WriteBlock(metaindex.Finish(), &meta_offset, &meta_size));

  std::string footer(1, kXXH3ChecksumType);
  PutHandle(&footer, meta_offset, meta_size);
  PutHandle(&footer, index_offset, index_size);
  footer.resize(1 + kFooterHandlesBytes, '\0');
  AppendLE32(&footer, kFormatVersion);
  AppendLE64(&footer, kBlockBasedTableMagic);
  RETURN_IF_ERROR(Append(footer));

  const std::string where = "finishing SST file " + path_;
  RETURN_IF_ERROR(FromRocks(options_.use_fsync ? file_->Fsync() : file_->Sync(), where));
  if (invalidate_page_cache_) (void)file_->InvalidateCache(0, 0);
  RETURN_IF_ERROR(FromRocks(file_->Close(), where));
  file_.reset();
  if (info != nullptr) {
    *info = rocksdb::ExternalSstFileInfo(path_, first_key_, last_key_, 0, offset_, entries_, 2);
  }
  return Status::OK();
}

}  // namespace ckptdb
