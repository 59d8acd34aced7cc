#include "store/data_files.h"

#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>

#include <algorithm>
#include <filesystem>

#include "store/chunk_reader.h"
#include "store/rocksdb_options.h"
#include "store/rocksdb_status.h"
#include "store/store_dir.h"
#include "util/ordered_parallel.h"

namespace ckptdb {

namespace {

bool IsDataKey(const std::string& k) { return k.size() == kDataKeySize && k[0] == kDataPrefix; }

// A table file of the database directory, by RocksDB's naming: digits and
// ".sst", nothing that could reach outside the directory.
bool IsTableFileName(const std::string& name) {
  constexpr std::string_view kSuffix = ".sst";
  if (name.size() <= kSuffix.size() || name.size() > 32 || name.compare(name.size() - 4, 4, kSuffix) != 0) {
    return false;
  }
  return std::all_of(name.begin(), name.end() - 4, [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

DataFileIndex::DataFileIndex(std::vector<DataFile> files) {
  std::vector<DataFile> wide;
  for (DataFile& f : files) {
    if (f.smallest.empty() || f.smallest[0] != kDataPrefix) continue;  // past the data keys
    (IsDataKey(f.smallest) && IsDataKey(f.largest) ? files_ : wide).push_back(std::move(f));
  }
  auto by_start = [](const DataFile& a, const DataFile& b) { return a.smallest < b.smallest; };
  std::sort(files_.begin(), files_.end(), by_start);
  std::sort(wide.begin(), wide.end(), by_start);
  narrow_ = files_.size();
  reach_.resize(narrow_);
  for (size_t i = 0; i < narrow_; ++i) {
    reach_[i] = i > 0 && files_[reach_[i - 1]].largest > files_[i].largest ? reach_[i - 1] : i;
  }
  for (DataFile& f : wide) files_.push_back(std::move(f));
}

void DataFileIndex::AddFilesMeeting(const std::string& begin, const std::string& end, std::vector<size_t>* out) const {
  // The narrow files starting at or before `end`, walked back while one of
  // those left could still reach `begin`.
  const auto narrow_end = files_.begin() + static_cast<std::ptrdiff_t>(narrow_);
  size_t i = std::upper_bound(files_.begin(), narrow_end, end,
                              [](const std::string& k, const DataFile& f) { return k < f.smallest; }) -
             files_.begin();
  while (i > 0 && files_[reach_[i - 1]].largest >= begin) {
    --i;
    if (files_[i].largest >= begin) out->push_back(i);
  }
  // A wide file reaches past every data key: it meets the range when it
  // starts at or before its end.
  for (size_t w = narrow_; w < files_.size() && files_[w].smallest <= end; ++w) out->push_back(w);
}

void DataFileIndex::AddFilesOf(int64_t step, uint64_t save_id, const StoredPiece& p, std::vector<size_t>* out) const {
  if (files_.empty()) return;
  if (p.num_chunks > 0) {
    AddFilesMeeting(EncodeDataKey({step, save_id, p.key.rank, p.key.item, 0}),
                    EncodeDataKey({step, save_id, p.key.rank, p.key.item, p.num_chunks - 1}), out);
  }
  for (const ChunkReference& r : p.references) {
    if (r.count == 0) continue;
    AddFilesMeeting(EncodeDataKey({r.step, r.save_id, r.key.rank, r.key.item, r.chunk}),
                    EncodeDataKey({r.step, r.save_id, r.key.rank, r.key.item, r.chunk + (r.count - 1)}), out);
  }
}

std::vector<size_t> DataFileIndex::FilesHolding(const std::string& key) const {
  std::vector<size_t> out;
  AddFilesMeeting(key, key, &out);
  std::sort(out.begin(), out.end());  // (the wide files have the greatest indices)
  return out;
}

void AppendDataFiles(const DataFileIndex& index, std::vector<size_t> indices, std::string* out) {
  std::sort(indices.begin(), indices.end());
  indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
  AppendLE32(out, static_cast<uint32_t>(indices.size()));
  for (size_t i : indices) {
    const DataFile& f = index.files().at(i);
    AppendLEString(out, f.name);
    AppendLEString(out, f.smallest);
    AppendLEString(out, f.largest);
  }
}

bool ConsumeDataFiles(LECursor* in, std::vector<DataFile>* files) {
  uint32_t n = 0;
  if (!in->U32(&n)) return false;
  files->clear();
  for (uint32_t i = 0; i < n; ++i) {
    DataFile f;
    if (!in->String(&f.name) || !in->String(&f.smallest) || !in->String(&f.largest) || !IsTableFileName(f.name)) {
      return false;
    }
    files->push_back(std::move(f));
  }
  return true;
}

DataFileChunks::DataFileChunks(std::string store, std::vector<DataFile> files, bool mmap_reads)
    : db_dir_(DbDir(store)),
      index_(std::move(files)),
      mmap_reads_(mmap_reads),
      opened_(new std::once_flag[index_.files().size()]),
      readers_(index_.files().size()),
      open_errors_(index_.files().size()) {}

DataFileChunks::~DataFileChunks() = default;

namespace {

// The options a rank's file readers are opened with, made once (making
// rocksdb::Options, a table factory and its block cache for every read cost
// more than a small read itself): the database's, with no block cache
// (every chunk is read once).
const rocksdb::Options& FileReaderOptions(bool mmap_reads) {
  static const auto make = [](bool mmap) {
    rocksdb::Options o = DatabaseOptions();
    rocksdb::BlockBasedTableOptions table;
    if (const auto* t = o.table_factory->GetOptions<rocksdb::BlockBasedTableOptions>()) table = *t;
    table.no_block_cache = true;
    table.block_cache.reset();
    o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
    o.allow_mmap_reads = mmap;
    return o;
  };
  static const rocksdb::Options with_mmap = make(true), without = make(false);
  return mmap_reads ? with_mmap : without;
}

}  // namespace

StatusOr<rocksdb::SstFileReader*> DataFileChunks::Open(size_t i) {
  // Once per file; threads opening different files do not wait on each
  // other (an open reads the file's footer, index and properties).
  std::call_once(opened_[i], [&] {
    auto reader = std::make_unique<rocksdb::SstFileReader>(FileReaderOptions(mmap_reads_));
    const std::string path = (std::filesystem::path(db_dir_) / index_.files()[i].name).string();
    rocksdb::Status s = reader->Open(path);
    if (s.ok()) {
      readers_[i] = std::move(reader);
      return;
    }
    Status st = FromRocks(s, "opening " + path);
    open_errors_[i] = st.code() == StatusCode::kDataLoss
                          ? st
                          : Status::IOError(st.message() +
                                            " (a file of the step the coordinator named: deleted since it listed "
                                            "it, or the store is not on a file system this host shares with the "
                                            "coordinator's; a store on the coordinator's host only is loaded with "
                                            "OpenRemoteStoreReader)");
  });
  if (!readers_[i]) return open_errors_[i];
  return readers_[i].get();
}

Status DataFileChunks::Get(const DataKey& key, rocksdb::PinnableSlice* value) {
  const std::string k = EncodeDataKey(key);
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  // As the database's reads (chunk_reader.cc): a damaged block is DataLoss,
  // never a parse of damaged bytes.
  ro.verify_checksums = true;
  for (size_t i : index_.FilesHolding(k)) {
    StatusOr<rocksdb::SstFileReader*> reader = Open(i);
    if (!reader.ok()) return reader.status();
    std::unique_ptr<rocksdb::Iterator> it((*reader)->NewIterator(ro));
    it->Seek(k);
    if (it->Valid() && it->key() == rocksdb::Slice(k)) {
      // The value stays where the iterator holds it until it is let go.
      const rocksdb::Slice v = it->value();
      value->PinSlice(
          v, [](void* iterator, void*) { delete static_cast<rocksdb::Iterator*>(iterator); }, it.release(), nullptr);
      return Status::OK();
    }
    if (!it->status().ok()) return FromRocks(it->status(), "reading " + index_.files()[i].name + " in " + db_dir_);
  }
  return Status::NotFound("missing");
}

namespace {

class TableFileIndex final : public ChunkPlaceIndex {
 public:
  explicit TableFileIndex(std::vector<DataFile> files) : index_(std::move(files)) {}
  void AddPlacesOf(int64_t step, uint64_t save_id, const StoredPiece& p, std::vector<size_t>* out) const override {
    index_.AddFilesOf(step, save_id, p, out);
  }
  void AppendPlaces(std::vector<size_t> indices, std::string* out) const override {
    AppendDataFiles(index_, std::move(indices), out);
  }

 private:
  const DataFileIndex index_;
};

class TableFileReader final : public PlacedChunkReader {
 public:
  TableFileReader(std::string store, const ReaderOptions& options) : store_(std::move(store)), options_(options) {}
  StatusOr<ReadStats> Read(std::string_view places, const StepMetadata& md,
                           const std::vector<ReadItem>& items) override {
    LECursor in(places);
    std::vector<DataFile> files;
    if (!ConsumeDataFiles(&in, &files) || !in.empty()) {
      return Status::Internal("the coordinator's list of the table files of step " + std::to_string(md.step) +
                              " of " + store_ + " is malformed");
    }
    DataFileChunks chunks(store_, std::move(files), options_.mmap_reads);
    return ReadChunksFrom([&](const DataKey& key, rocksdb::PinnableSlice* value) { return chunks.Get(key, value); },
                          md, items, options_.threads > 0 ? options_.threads : DefaultParallelism());
  }

 private:
  const std::string store_;
  const ReaderOptions options_;
};

}  // namespace

std::unique_ptr<ChunkPlaceIndex> TableFilePlaces(std::vector<DataFile> files) {
  return std::make_unique<TableFileIndex>(std::move(files));
}

std::unique_ptr<PlacedChunkReader> NewTableFileReader(std::string store, const ReaderOptions& options) {
  return std::make_unique<TableFileReader>(std::move(store), options);
}

}  // namespace ckptdb
