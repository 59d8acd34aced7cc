#include "store/block_per_key_table.h"

#include <rocksdb/comparator.h>
#include <rocksdb/flush_block_policy.h>
#include <rocksdb/table.h>
#include <xxhash.h>

#include <cstring>
#include <map>
#include <random>

#include "store/rocksdb_status.h"
#include "util/hex.h"
#include "util/le_bytes.h"
#include "util/status_macros.h"
#include "util/varint.h"

namespace ckptdb {

namespace {

constexpr uint32_t kFormatVersion = 5;
constexpr char kXXH3ChecksumType = 4;  // rocksdb::kXXH3
constexpr uint64_t kBlockBasedTableMagic = 0x88e241b785f4cff7ull;
constexpr size_t kFooterHandlesBytes = 40;  // two handles, zero-padded
// Sequence number 0, type kTypeValue, as a user key's 8-byte suffix.
constexpr char kSeqAndType[8] = {1, 0, 0, 0, 0, 0, 0, 0};
constexpr uint32_t kUnknownColumnFamily = 0x7fffffff;
// bucket::SstObjectWriteOptions()'s flush policy: every key a block.
constexpr char kEveryKeyPolicy[] = "CkptdbEveryKeyPolicyFactory";

uint32_t BlockChecksum(const char* contents, size_t n) {
  // (The compression type byte, 0, changes nothing in RocksDB's XXH3 sum.)
  return static_cast<uint32_t>(XXH3_64bits(contents, n));
}

// A one-entry data block's restart array, at `tail` (where its entry ends).
void WriteDataBlockRestarts(char* tail) {
  PutLE32(tail, 0);      // the one restart point: the block's start
  PutLE32(tail + 4, 1);  // one restart (binary-search data blocks)
}

// A block's trailer (kBlockTrailerBytes): no compression, the checksum.
void WriteBlockTrailer(char* trailer, uint32_t checksum) {
  trailer[0] = 0;
  PutLE32(trailer + 1, checksum);
}

void PutHandle(std::string* out, uint64_t offset, uint64_t size) {
  PutVarint(out, offset);
  PutVarint(out, size);
}

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
  std::seed_seq seed{rd(), rd(), rd(), rd()};
  std::mt19937_64 gen(seed);
  std::string id(20, '0');
  for (char& c : id) c = kDigits[gen() % 36];
  return id;
}

// The first option (by name) that makes SstFileWriter write another table
// than this writer's, or "" when they describe this one.
std::string OtherTableOption(const rocksdb::Options& o) {
  const auto* t = o.table_factory != nullptr ? o.table_factory->GetOptions<rocksdb::BlockBasedTableOptions>() : nullptr;
  if (t == nullptr) return "table_factory (a block-based table)";
  if (t->checksum != rocksdb::kXXH3) return "checksum (kXXH3)";
  if (t->format_version != kFormatVersion) return "format_version (5)";
  if (t->index_type != rocksdb::BlockBasedTableOptions::kBinarySearch) return "index_type (kBinarySearch)";
  if (t->index_shortening != rocksdb::BlockBasedTableOptions::IndexShorteningMode::kNoShortening) {
    return "index_shortening (kNoShortening)";
  }
  if (t->index_block_restart_interval != 1) return "index_block_restart_interval (1)";
  if (t->data_block_index_type != rocksdb::BlockBasedTableOptions::kDataBlockBinarySearch) {
    return "data_block_index_type (kDataBlockBinarySearch)";
  }
  if (t->block_align) return "block_align (false)";
  if (t->filter_policy != nullptr) return "filter_policy (none)";
  if (!t->whole_key_filtering) return "whole_key_filtering (true)";
  if (t->flush_block_policy_factory == nullptr ||
      std::string_view(t->flush_block_policy_factory->Name()) != kEveryKeyPolicy) {
    return std::string("flush_block_policy_factory (") + kEveryKeyPolicy + ": every key a block)";
  }
  if (o.comparator != rocksdb::BytewiseComparator()) return "comparator (the bytewise comparator)";
  if (o.prefix_extractor != nullptr) return "prefix_extractor (none)";
  if (o.merge_operator != nullptr) return "merge_operator (none)";
  const bool bottom_set = o.bottommost_compression != rocksdb::kDisableCompressionOption;
  if ((bottom_set ? o.bottommost_compression : o.compression) != rocksdb::kNoCompression ||
      !o.compression_per_level.empty()) {
    return "compression, bottommost_compression, compression_per_level (none)";
  }
  if (o.sample_for_compression != 0) return "sample_for_compression (0)";
  const rocksdb::CompressionOptions defaults;
  const rocksdb::CompressionOptions& c = o.compression_opts;
  if (c.window_bits != defaults.window_bits || c.level != defaults.level || c.strategy != defaults.strategy ||
      c.max_dict_bytes != defaults.max_dict_bytes || c.zstd_max_train_bytes != defaults.zstd_max_train_bytes ||
      c.enabled != defaults.enabled || c.max_dict_buffer_bytes != defaults.max_dict_buffer_bytes ||
      c.use_zstd_dict_trainer != defaults.use_zstd_dict_trainer) {
    return "compression_opts (the defaults)";
  }
  return "";
}

}  // namespace

// A block as RocksDB's BlockBuilder writes it: with restart interval 1
// (every entry a restart point, nothing shared: the index, the metaindex)
// or with one restart point and each key sharing its prefix with the key
// before (the properties block); with or without the values' lengths (an
// index whose values are delta-encoded omits them).
class BlockPerKeyTableWriter::EntriesBlock {
 public:
  EntriesBlock(bool restart_every_entry, bool value_lengths)
      : restart_every_entry_(restart_every_entry), value_lengths_(value_lengths) {}
  void Add(std::string_view key, std::string_view value) {
    size_t shared = 0;
    if (restart_every_entry_ || restarts_.empty()) {
      restarts_.push_back(static_cast<uint32_t>(out_.size()));
    } else {
      while (shared < key.size() && shared < last_key_.size() && key[shared] == last_key_[shared]) ++shared;
    }
    PutVarint(&out_, shared);
    PutVarint(&out_, key.size() - shared);
    if (value_lengths_) PutVarint(&out_, value.size());
    out_.append(key.substr(shared));
    out_.append(value);
    if (!restart_every_entry_) last_key_.assign(key);
  }
  std::string Finish() {
    for (uint32_t r : restarts_) AppendLE32(&out_, r);
    AppendLE32(&out_, static_cast<uint32_t>(restarts_.size()));
    return std::move(out_);
  }

 private:
  bool restart_every_entry_, value_lengths_;
  std::string out_, last_key_;
  std::vector<uint32_t> restarts_;
};

DataBlockTail::DataBlockTail() : state_(XXH3_createState()) { XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_)); }

DataBlockTail::~DataBlockTail() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void DataBlockTail::Add(std::string_view piece) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), piece.data(), piece.size());
}

void DataBlockTail::WriteTail(char* tail) {
  auto* state = static_cast<XXH3_state_t*>(state_);
  WriteDataBlockRestarts(tail);
  XXH3_64bits_update(state, tail, kDataBlockRestartBytes);
  WriteBlockTrailer(tail + kDataBlockRestartBytes, static_cast<uint32_t>(XXH3_64bits_digest(state)));
}

size_t DataBlockHeadSize(size_t key_size, size_t value_size) {
  return 1 + VarintBytes(key_size + 8) + VarintBytes(value_size) + key_size + 8;
}

void WriteDataBlockHead(std::string_view key, size_t value_size, char* head) {
  char* p = EncodeVarint(head, 0);
  p = EncodeVarint(p, key.size() + 8);
  p = EncodeVarint(p, value_size);
  std::memcpy(p, key.data(), key.size());
  std::memcpy(p + key.size(), kSeqAndType, 8);
}

void WriteDataBlockTail(char* block, size_t contents_bytes) {
  char* tail = block + contents_bytes;
  WriteDataBlockRestarts(tail);
  WriteBlockTrailer(tail + kDataBlockRestartBytes, BlockChecksum(block, contents_bytes + kDataBlockRestartBytes));
}

void BuildDataBlock(std::string_view key, std::string_view value, std::string* out) {
  const size_t head = DataBlockHeadSize(key.size(), value.size());
  out->resize(head + value.size() + kDataBlockTailBytes);
  WriteDataBlockHead(key, value.size(), out->data());
  if (!value.empty()) std::memcpy(out->data() + head, value.data(), value.size());
  WriteDataBlockTail(out->data(), head + value.size());
}

namespace {

// The value's size and the head's of a data block of `total` bytes whose
// first bytes are `front`; false when it is not one (or front ends before
// its head does).
bool ParseDataBlockHead(std::string_view front, uint64_t total, uint64_t* value_size, size_t* head) {
  std::string_view in = front;
  uint64_t shared = 0, key_bytes = 0;
  if (!GetVarint(&in, &shared) || shared != 0 || !GetVarint(&in, &key_bytes) || !GetVarint(&in, value_size)) {
    return false;
  }
  if (key_bytes < 8 || key_bytes > UINT32_MAX || *value_size > UINT32_MAX || in.size() < key_bytes) return false;
  *head = front.size() - in.size() + key_bytes;
  return total >= *head + kDataBlockTailBytes && total - *head - kDataBlockTailBytes == *value_size;
}

}  // namespace

bool DataBlockValueSize(std::string_view block, uint64_t* value_size) {
  size_t head = 0;
  return ParseDataBlockHead(block, block.size(), value_size, &head);
}

BlockPerKeyTableWriter::BlockPerKeyTableWriter(const rocksdb::Options& options, const rocksdb::EnvOptions& env_options,
                                               bool invalidate_page_cache)
    : options_(options),
      env_options_(env_options),
      invalidate_page_cache_(invalidate_page_cache),
      session_id_(NewSessionId()),
      index_(std::make_unique<EntriesBlock>(true, false)) {}

// (No Close: an unfinished file is abandoned, never completed.)
BlockPerKeyTableWriter::~BlockPerKeyTableWriter() = default;

Status BlockPerKeyTableWriter::Open(const std::string& path) {
  path_ = path;
  const std::string other = OtherTableOption(options_);
  if (!other.empty()) {
    return Status::InvalidArgument("SST file " + path + ": BlockPerKeyTableWriter writes one table, and these options "
                                   "describe another; option " + other + " differs");
  }
  rocksdb::Env* env = options_.env != nullptr ? options_.env : rocksdb::Env::Default();
  // (Through the env's file system, whose files may be BorrowingFiles; the
  // env's own NewWritableFile would wrap them.)
  RETURN_IF_ERROR(FromRocks(env->GetFileSystem()->NewWritableFile(path, rocksdb::FileOptions(env_options_), &file_,
                                                                  nullptr),
                            "opening SST file " + path));
  borrowing_ = dynamic_cast<BorrowingFile*>(file_.get());
  rocksdb::TablePropertiesCollectorFactory::Context context;
  context.column_family_id = kUnknownColumnFamily;
  for (const auto& factory : options_.table_properties_collector_factories) {
    collectors_.emplace_back(factory->CreateTablePropertiesCollector(context));
  }
  return Status::OK();
}

Status BlockPerKeyTableWriter::Append(std::string_view bytes) {
  if (bytes.empty()) return Status::OK();
  Status st = FromRocks(file_->Append(rocksdb::Slice(bytes.data(), bytes.size()), rocksdb::IOOptions(), nullptr),
                        "writing SST file " + path_);
  if (!st.ok()) failed_ = st;
  return st.ok() ? Appended(bytes.size()) : st;
}

Status BlockPerKeyTableWriter::Lend(const std::vector<std::string_view>& pieces,
                                    const std::vector<uint32_t>& crc32cs) {
  if (borrowing_ == nullptr) {
    for (std::string_view p : pieces) RETURN_IF_ERROR(Append(p));
    return Status::OK();
  }
  uint64_t n = 0;
  for (std::string_view p : pieces) n += p.size();
  if (n == 0) return Status::OK();
  Status st = FromRocks(borrowing_->AppendBorrowed(pieces, crc32cs), "writing SST file " + path_);
  if (!st.ok()) failed_ = st;
  return st.ok() ? Appended(n) : st;
}

Status BlockPerKeyTableWriter::Appended(uint64_t n) {
  offset_ += n;
  const uint64_t every = env_options_.bytes_per_sync;
  if (every == 0 || offset_ - synced_to_ < every) return Status::OK();
  Status st = FromRocks(file_->RangeSync(synced_to_, offset_ - synced_to_, rocksdb::IOOptions(), nullptr),
                        "writing SST file " + path_);
  synced_to_ = offset_;
  if (!st.ok()) failed_ = st;
  return st;
}

Status BlockPerKeyTableWriter::Add(std::string_view key, std::string_view block, uint64_t* value_size) {
  return AddPieces(key, block, {}, {}, {}, value_size);
}

Status BlockPerKeyTableWriter::AddPieces(std::string_view key, std::string_view front,
                                         const std::vector<std::string_view>& lent,
                                         const std::vector<uint32_t>& lent_crc32cs,
                                         std::string_view back, uint64_t* value_size) {
  if (!file_) return Status::FailedPrecondition("SST file " + path_ + " is not open");
  if (!failed_.ok()) return failed_;
  if (entries_ > 0 && key <= std::string_view(last_key_)) {
    return Status::InvalidArgument("SST file " + path_ + ": keys must be added in increasing order; key " + HexEncode(key) +
                                   " comes after " + HexEncode(last_key_));
  }
  if (lent.size() != lent_crc32cs.size()) {
    return Status::InvalidArgument("SST file " + path_ + ": the block of key " + HexEncode(key) + " lends " +
                                   std::to_string(lent.size()) + " pieces with " +
                                   std::to_string(lent_crc32cs.size()) + " CRCs");
  }
  uint64_t block_bytes = front.size() + back.size();
  for (std::string_view p : lent) block_bytes += p.size();
  uint64_t value_bytes = 0;
  size_t head = 0;
  if (!ParseDataBlockHead(front, block_bytes, &value_bytes, &head) ||
      block_bytes != DataBlockHeadSize(key.size(), value_bytes) + value_bytes + kDataBlockTailBytes) {
    return Status::InvalidArgument("SST file " + path_ + ": the block of key " + HexEncode(key) + " is not a data block of " +
                                   "one entry (its lengths do not add up to its " + std::to_string(block_bytes) +
                                   " bytes)");
  }
  if (front.substr(head - 8 - key.size(), key.size()) != key) {
    return Status::InvalidArgument("SST file " + path_ + ": the block given for key " + HexEncode(key) + " holds key " +
                                   HexEncode(front.substr(head - 8 - key.size(), key.size())));
  }
  const uint64_t start = offset_;
  RETURN_IF_ERROR(Append(front));
  RETURN_IF_ERROR(Lend(lent, lent_crc32cs));
  RETURN_IF_ERROR(Append(back));
  // As RocksDB's builder: a collector's error is not the file's (it leaves
  // out nothing but what the collector would have said).
  const rocksdb::Slice value = lent.empty() && back.empty() ? rocksdb::Slice(front.data() + head, value_bytes)
                                                            : rocksdb::Slice();
  for (auto& c : collectors_) {
    (void)c->AddUserKey(rocksdb::Slice(key.data(), key.size()), value, rocksdb::kEntryPut, 0, start);
    c->BlockAdd(block_bytes - kBlockTrailerBytes, 0, 0);
  }
  // The index: the block's key (unshortened) and its handle, in full at a
  // restart point of its own, as RocksDB writes an index with delta-encoded
  // values (no value lengths) and restart interval 1.
  std::string handle;
  PutHandle(&handle, start, block_bytes - kBlockTrailerBytes);
  index_->Add(key, handle);
  if (entries_ == 0) first_key_.assign(key);
  last_key_.assign(key);
  ++entries_;
  raw_key_bytes_ += key.size() + 8;
  raw_value_bytes_ += value_bytes;
  if (value_size != nullptr) *value_size = value_bytes;
  return Status::OK();
}

Status BlockPerKeyTableWriter::WriteBlock(const std::string& contents, uint64_t* offset, uint64_t* size) {
  *offset = offset_;
  *size = contents.size();
  char trailer[kBlockTrailerBytes];
  WriteBlockTrailer(trailer, BlockChecksum(contents.data(), contents.size()));
  RETURN_IF_ERROR(Append(contents));
  return Append(std::string_view(trailer, kBlockTrailerBytes));
}

Status BlockPerKeyTableWriter::Finish(rocksdb::ExternalSstFileInfo* info) {
  if (!file_) return Status::FailedPrecondition("SST file " + path_ + " is not open");
  if (failed_.ok() && entries_ == 0) {
    return Status::InvalidArgument("cannot create an SST file with no entries: " + path_);
  }
  Status st = failed_;
  if (st.ok()) st = WriteTail(info);
  if (!st.ok()) {
    file_.reset();
    borrowing_ = nullptr;
    rocksdb::Env* env = options_.env != nullptr ? options_.env : rocksdb::Env::Default();
    (void)env->DeleteFile(path_);
  }
  return st;
}

Status BlockPerKeyTableWriter::WriteTail(rocksdb::ExternalSstFileInfo* info) {
  const uint64_t data_size = offset_;
  uint64_t index_offset = 0, index_size = 0;
  RETURN_IF_ERROR(WriteBlock(index_->Finish(), &index_offset, &index_size));

  // The properties, each name's first value kept, in RocksDB's order: the
  // table's own, SstFileWriter's, the collectors', the block-based table's;
  // written in name order.
  std::map<std::string, std::string> props;
  auto number = [&](const std::string& name, uint64_t v) { props.emplace(name, Varint(v)); };
  using Names = rocksdb::TablePropertiesNames;
  number(Names::kOriginalFileNumber, 1);
  number(Names::kRawKeySize, raw_key_bytes_);
  number(Names::kRawValueSize, raw_value_bytes_);
  number(Names::kDataSize, data_size);
  number(Names::kIndexSize, index_size + kBlockTrailerBytes);
  number(Names::kIndexKeyIsUserKey, 1);
  number(Names::kIndexValueIsDeltaEncoded, 1);
  number(Names::kNumEntries, entries_);
  number(Names::kNumFilterEntries, 0);
  number(Names::kDeletedKeys, 0);
  number(Names::kMergeOperands, 0);
  number(Names::kNumRangeDeletions, 0);
  number(Names::kNumDataBlocks, entries_);
  number(Names::kFilterSize, 0);
  number(Names::kFormatVersion, 0);  // (a plain table's: block-based tables write 0)
  number(Names::kFixedKeyLen, 0);
  number(Names::kColumnFamilyId, kUnknownColumnFamily);
  number(Names::kCreationTime, 0);
  number(Names::kOldestKeyTime, 0);
  props.emplace(Names::kDbId, "SST Writer");
  props.emplace(Names::kDbSessionId, session_id_);
  std::string host = options_.db_host_id;
  if (host == rocksdb::kHostnameForDbHostId) {
    rocksdb::Env* env = options_.env != nullptr ? options_.env : rocksdb::Env::Default();
    if (!env->GetHostNameString(&host).ok()) host.clear();
  }
  if (!host.empty()) props.emplace(Names::kDbHostId, host);
  props.emplace(Names::kComparator, options_.comparator->Name());
  props.emplace(Names::kMergeOperator, "nullptr");
  props.emplace(Names::kPrefixExtractorName, "nullptr");
  std::string collector_names = "[";
  for (size_t i = 0; i < options_.table_properties_collector_factories.size(); ++i) {
    if (i > 0) collector_names += ",";
    collector_names += options_.table_properties_collector_factories[i]->Name();
  }
  props.emplace(Names::kPropertyCollectors, collector_names + "]");
  props.emplace(Names::kCompression, "NoCompression");
  props.emplace(Names::kCompressionOptions,
                "window_bits=-14; level=32767; strategy=0; max_dict_bytes=0; zstd_max_train_bytes=0; enabled=0; "
                "max_dict_buffer_bytes=0; use_zstd_dict_trainer=1; ");
  std::string version, seqno, index_type;
  AppendLE32(&version, 2);
  AppendLE64(&seqno, 0);
  AppendLE32(&index_type, 0);  // binary search
  props.emplace("rocksdb.external_sst_file.version", version);
  props.emplace("rocksdb.external_sst_file.global_seqno", seqno);
  for (auto& c : collectors_) {
    rocksdb::UserCollectedProperties collected;
    if (!c->Finish(&collected).ok()) continue;  // (as RocksDB: left out)
    for (auto& [name, value] : collected) props.emplace(name, value);
  }
  props.emplace("rocksdb.block.based.table.index.type", index_type);
  props.emplace("rocksdb.block.based.table.whole.key.filtering", "1");
  props.emplace("rocksdb.block.based.table.prefix.filtering", "0");
  EntriesBlock properties(false, true);
  for (const auto& [name, value] : props) properties.Add(name, value);
  uint64_t props_offset = 0, props_size = 0;
  RETURN_IF_ERROR(WriteBlock(properties.Finish(), &props_offset, &props_size));

  std::string handle;
  PutHandle(&handle, props_offset, props_size);
  EntriesBlock metaindex(true, true);
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
  const rocksdb::IOOptions io;
  RETURN_IF_ERROR(FromRocks(options_.use_fsync ? file_->Fsync(io, nullptr) : file_->Sync(io, nullptr), where));
  if (invalidate_page_cache_) (void)file_->InvalidateCache(0, 0);
  RETURN_IF_ERROR(FromRocks(file_->Close(io, nullptr), where));
  file_.reset();
  borrowing_ = nullptr;
  if (info != nullptr) {
    *info = rocksdb::ExternalSstFileInfo(path_, first_key_, last_key_, 0, offset_, entries_, 2);
  }
  return Status::OK();
}

}  // namespace ckptdb
