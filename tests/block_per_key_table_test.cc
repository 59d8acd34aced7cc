// BlockPerKeyTableWriter against RocksDB's SstFileWriter with the SST
// objects' options: the same data blocks and index byte for byte, the same
// properties, and a file RocksDB reads, verifies and ingests.
#include "store/block_per_key_table.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/table.h>
#include <rocksdb/table_properties.h>

#include <rocksdb/file_system.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "bucket/block_starts.h"
#include "bucket/sst_object_options.h"
#include "ckptdb/ckptdb.h"
#include "format/keys.h"
#include "store/rocksdb_options.h"
#include "store/sst_chunk_writer.h"
#include "test_util.h"
#include "util/crc32c.h"

namespace ckptdb {
namespace {

using testing::PatternTensor;
using testing::TempDir;

std::string Bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Entry {
  std::string key, value;
};

// Values of sizes that cross the varint boundaries of the entry's lengths
// (127/128 bytes, 16 KiB, 2 MiB), and an empty one.
std::vector<Entry> Entries() {
  std::vector<Entry> out;
  const size_t sizes[] = {0, 1, 100, 127, 128, 16383, 16384, 100000, 1 << 20, 3 << 20};
  for (size_t i = 0; i < std::size(sizes); ++i) {
    DataKey k;
    k.step = 7;
    k.item = static_cast<uint32_t>(i * 3);
    k.chunk = static_cast<uint32_t>(i);
    std::string v(sizes[i], '\0');
    for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<char>((j * 131 + i) & 0xff);
    out.push_back(Entry{EncodeDataKey(k), std::move(v)});
  }
  return out;
}

std::map<std::string, std::string> Properties(const std::string& path, rocksdb::TableProperties* props) {
  rocksdb::SstFileReader reader(bucket::SstObjectWriteOptions());
  EXPECT_TRUE(reader.Open(path).ok());
  EXPECT_TRUE(reader.VerifyChecksum().ok()) << path;
  *props = *reader.GetTableProperties();
  std::map<std::string, std::string> user(props->user_collected_properties.begin(),
                                          props->user_collected_properties.end());
  return user;
}

TEST(BlockPerKeyTable, WritesTheTableSstFileWriterWritesWithTheObjectsOptions) {
  TempDir dir;
  const rocksdb::Options options = bucket::SstObjectWriteOptions();
  const std::vector<Entry> entries = Entries();
  const std::string theirs = dir.Sub("theirs.sst"), ours = dir.Sub("ours.sst");
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), options);
  ASSERT_TRUE(writer.Open(theirs).ok());
  for (const Entry& e : entries) ASSERT_TRUE(writer.Put(e.key, e.value).ok());
  rocksdb::ExternalSstFileInfo their_info;
  ASSERT_TRUE(writer.Finish(&their_info).ok());

  rocksdb::TableProperties their_props, our_props;
  std::map<std::string, std::string> their_user = Properties(theirs, &their_props);
  BlockPerKeyTableWriter table(options, rocksdb::EnvOptions(), false);
  table.SetSessionId(their_props.db_session_id);
  ASSERT_TRUE(table.Open(ours).ok());
  for (const Entry& e : entries) {
    std::string block;
    BuildDataBlock(e.key, e.value, &block);
    uint64_t value_size = 0;
    ASSERT_TRUE(DataBlockValueSize(block, &value_size));
    EXPECT_EQ(value_size, e.value.size());
    ASSERT_TRUE(table.Add(e.key, block).ok());
  }
  rocksdb::ExternalSstFileInfo info;
  ASSERT_TRUE(table.Finish(&info).ok());
  EXPECT_EQ(info.smallest_key, their_info.smallest_key);
  EXPECT_EQ(info.largest_key, their_info.largest_key);
  EXPECT_EQ(info.num_entries, their_info.num_entries);
  EXPECT_EQ(info.sequence_number, their_info.sequence_number);
  EXPECT_EQ(info.version, their_info.version);
  EXPECT_EQ(info.file_size, Bytes(ours).size());

  std::map<std::string, std::string> our_user = Properties(ours, &our_props);
  EXPECT_EQ(our_user, their_user);
  EXPECT_EQ(our_props.ToString(), their_props.ToString());
  // The whole file, byte for byte: data blocks, index, properties,
  // metaindex, footer.
  EXPECT_EQ(Bytes(ours).size(), Bytes(theirs).size());
  EXPECT_TRUE(Bytes(ours) == Bytes(theirs));
  // The block starts a load plans its reads with.
  auto starts = bucket::BlockStarts::Parse(our_user.at(bucket::kBlockStartsProperty), our_props.data_size);
  ASSERT_TRUE(starts.has_value());
  EXPECT_EQ(starts->size(), entries.size());

  // RocksDB reads it back and ingests it.
  rocksdb::SstFileReader reader(options);
  ASSERT_TRUE(reader.Open(ours).ok());
  std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(rocksdb::ReadOptions()));
  size_t i = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next(), ++i) {
    ASSERT_LT(i, entries.size());
    EXPECT_EQ(it->key().ToString(), entries[i].key);
    EXPECT_TRUE(it->value().ToString() == entries[i].value) << i;
  }
  EXPECT_TRUE(it->status().ok());
  EXPECT_EQ(i, entries.size());
  rocksdb::Options db_options = options;
  db_options.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(db_options, dir.Sub("db"), &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::IngestExternalFileOptions ingest;
  rocksdb::Status st = db->IngestExternalFile({ours}, ingest);
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::string got;
  ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), entries.back().key, &got).ok());
  EXPECT_TRUE(got == entries.back().value);
}

// A file system whose files take lent bytes as a bucket's upload does
// (store/borrowing_file.h): they keep the pieces, copied and lent, and read
// them all only at Sync, so a lent piece that changed or went before then
// shows in the file. It counts the bytes lent to it.
class LendingFileSystem : public rocksdb::FileSystemWrapper {
 public:
  LendingFileSystem() : rocksdb::FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "LendingFileSystem"; }
  uint64_t lent_bytes = 0;
  std::vector<const char*> lent_at;  // where each lent piece lay
  int wrong_crcs = 0;                 // lendings whose CRC-32C was not their bytes

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    std::unique_ptr<rocksdb::FSWritableFile> base;
    rocksdb::IOStatus s = target()->NewWritableFile(f, o, &base, dbg);
    if (s.ok()) *r = std::make_unique<File>(this, std::move(base));
    return s;
  }

 private:
  class File : public rocksdb::FSWritableFileOwnerWrapper, public BorrowingFile {
   public:
    File(LendingFileSystem* fs, std::unique_ptr<rocksdb::FSWritableFile> base)
        : rocksdb::FSWritableFileOwnerWrapper(std::move(base)), fs_(fs) {}
    using rocksdb::FSWritableFileOwnerWrapper::Append;
    rocksdb::IOStatus Append(const rocksdb::Slice& d, const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
      copies_.emplace_back(d.data(), d.size());
      pieces_.emplace_back(nullptr, copies_.size() - 1);
      size_ += d.size();
      return rocksdb::IOStatus::OK();
    }
    rocksdb::IOStatus AppendBorrowed(const std::vector<std::string_view>& pieces,
                                     const std::vector<uint32_t>& crc32cs) override {
      if (crc32cs.size() != pieces.size()) return rocksdb::IOStatus::InvalidArgument("CRCs do not match the pieces");
      for (size_t i = 0; i < pieces.size(); ++i) {
        const std::string_view d = pieces[i];
        fs_->lent_bytes += d.size();
        fs_->lent_at.push_back(d.data());
        pieces_.emplace_back(d.data(), d.size());
        size_ += d.size();
        if (Crc32c(d.data(), d.size()) != crc32cs[i]) ++fs_->wrong_crcs;
      }
      return rocksdb::IOStatus::OK();
    }
    uint64_t GetFileSize(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override { return size_; }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      for (const auto& [lent, n] : pieces_) {
        const rocksdb::Slice piece = lent != nullptr ? rocksdb::Slice(lent, n) : rocksdb::Slice(copies_[n]);
        rocksdb::IOStatus s = target()->Append(piece, o, dbg);
        if (!s.ok()) return s;
      }
      pieces_.clear();
      return target()->Sync(o, dbg);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override { return Sync(o, dbg); }

   private:
    LendingFileSystem* fs_;
    std::vector<std::string> copies_;
    std::vector<std::pair<const char*, size_t>> pieces_;  // lent: (where, size); copied: (null, index)
    uint64_t size_ = 0;
  };
};

// A block in pieces (head, the value in three lent pieces, tail) makes the
// file its whole block makes; a lending file gets the value's bytes where
// they lie, read only when the file is finished; any other file a copy.
TEST(BlockPerKeyTable, AValueLentInPiecesIsReadWhereItLiesUntilTheFileIsFinished) {
  TempDir dir;
  const std::vector<Entry> entries = Entries();
  std::vector<std::string> blocks(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) BuildDataBlock(entries[i].key, entries[i].value, &blocks[i]);
  // before_finish: called after the last AddPieces, before Finish.
  auto write = [&](const rocksdb::Options& options, const std::string& path, bool pieces,
                   const std::function<void()>& before_finish = nullptr) {
    BlockPerKeyTableWriter table(options, rocksdb::EnvOptions(), false);
    table.SetSessionId("SESSION0123456789ABC");
    EXPECT_TRUE(table.Open(path).ok());
    for (size_t i = 0; i < entries.size(); ++i) {
      const std::string_view block = blocks[i];
      const size_t value = entries[i].value.size();
      const size_t head = DataBlockHeadSize(entries[i].key.size(), value);
      uint64_t value_size = 0;
      if (!pieces) {
        ASSERT_TRUE(table.Add(entries[i].key, block, &value_size).ok());
      } else {
        const std::vector<std::string_view> lent = {block.substr(head, value / 3),
                                                    block.substr(head + value / 3, value / 3),
                                                    block.substr(head + 2 * (value / 3), value - 2 * (value / 3))};
        std::vector<uint32_t> crcs;
        for (std::string_view p : lent) crcs.push_back(Crc32c(p.data(), p.size()));
        ASSERT_TRUE(table.AddPieces(entries[i].key, block.substr(0, head), lent, crcs, block.substr(head + value),
                                    &value_size)
                        .ok());
      }
      EXPECT_EQ(value_size, value);
    }
    if (before_finish) before_finish();
    rocksdb::ExternalSstFileInfo info;
    ASSERT_TRUE(table.Finish(&info).ok());
    EXPECT_EQ(info.file_size, Bytes(path).size());
  };
  const rocksdb::Options plain = bucket::SstObjectWriteOptions();
  auto fs = std::make_shared<LendingFileSystem>();
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  rocksdb::Options lending = plain;
  lending.env = env.get();
  const std::string whole = dir.Sub("whole.sst"), copied = dir.Sub("copied.sst"), lent = dir.Sub("lent.sst");
  write(plain, whole, false);
  write(plain, copied, true);
  write(lending, lent, true);
  EXPECT_TRUE(Bytes(copied) == Bytes(whole));
  EXPECT_TRUE(Bytes(lent) == Bytes(whole));
  uint64_t values = 0;
  for (const Entry& e : entries) values += e.value.size();
  EXPECT_EQ(fs->lent_bytes, values);
  EXPECT_EQ(fs->wrong_crcs, 0);
  // Lent where they lay: in the blocks, not in copies of them.
  for (const char* at : fs->lent_at) {
    EXPECT_TRUE(std::any_of(blocks.begin(), blocks.end(),
                            [&](const std::string& b) { return at >= b.data() && at < b.data() + b.size(); }));
  }
  rocksdb::TableProperties props;
  Properties(lent, &props);  // (checksums verified)
  EXPECT_EQ(props.num_entries, entries.size());
  // Read where it lies when the file is finished, not when it was added: a
  // lent byte changed in between is in the lending file, not in a copy.
  std::string& changed_block = blocks[5];
  const size_t at = DataBlockHeadSize(entries[5].key.size(), entries[5].value.size()) + 1000;
  const std::string changed = dir.Sub("changed.sst"), copied_then = dir.Sub("copied-then.sst");
  for (const auto& [options, path] : {std::make_pair(lending, changed), std::make_pair(plain, copied_then)}) {
    write(options, path, true, [&] { changed_block[at] ^= 0x40; });
    changed_block[at] ^= 0x40;
  }
  const std::string a = Bytes(changed), b = Bytes(whole);
  ASSERT_EQ(a.size(), b.size());
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
  EXPECT_EQ(differ, 1u);
  EXPECT_TRUE(Bytes(copied_then) == b);

  // A front that ends inside the head, or pieces that do not add up to the
  // block, are refused.
  BlockPerKeyTableWriter table(plain, rocksdb::EnvOptions(), false);
  ASSERT_TRUE(table.Open(dir.Sub("bad.sst")).ok());
  const std::string_view block = blocks[3];
  EXPECT_EQ(table.AddPieces(entries[3].key, block.substr(0, 4), {block.substr(4, block.size() - 17)}, {0},
                            block.substr(block.size() - 13))
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(table.AddPieces(entries[3].key, block.substr(0, block.size() - 20), {}, {}, block.substr(block.size() - 13))
                .code(),
            StatusCode::kInvalidArgument);
  // CRCs not one per lent piece: refused before anything is written.
  const size_t head3 = DataBlockHeadSize(entries[3].key.size(), entries[3].value.size());
  const std::string_view value3 = block.substr(head3, block.size() - head3 - 13);
  EXPECT_EQ(table.AddPieces(entries[3].key, block.substr(0, head3), {value3}, {}, block.substr(block.size() - 13))
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(table.FileSize(), 0u);
}

TEST(BlockPerKeyTable, RefusesKeysOutOfOrderBlocksOfOtherKeysEmptyFilesAndOtherTables) {
  TempDir dir;
  const std::vector<Entry> entries = Entries();
  BlockPerKeyTableWriter table(bucket::SstObjectWriteOptions(), rocksdb::EnvOptions(), false);
  ASSERT_TRUE(table.Open(dir.Sub("t.sst")).ok());
  rocksdb::ExternalSstFileInfo info;
  EXPECT_EQ(table.Finish(&info).code(), StatusCode::kInvalidArgument);
  std::string block;
  BuildDataBlock(entries[1].key, entries[1].value, &block);
  Status st = table.Add(entries[0].key, block);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("holds key"), std::string::npos) << st.ToString();
  EXPECT_EQ(table.Add(entries[1].key, block.substr(0, block.size() - 1)).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(table.Add(entries[1].key, block).ok());
  BuildDataBlock(entries[0].key, entries[0].value, &block);
  st = table.Add(entries[0].key, block);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("increasing order"), std::string::npos) << st.ToString();
  ASSERT_TRUE(table.Finish(&info).ok());
  EXPECT_EQ(info.num_entries, 1u);

  // Options that ask for another table, named: CRC32c checksums; the local
  // store's (a block closes at 4 KiB, not at every key); zstd.
  rocksdb::Options crc = bucket::SstObjectWriteOptions();
  rocksdb::BlockBasedTableOptions t = *crc.table_factory->GetOptions<rocksdb::BlockBasedTableOptions>();
  t.checksum = rocksdb::kCRC32c;
  crc.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  rocksdb::Options zstd = bucket::SstObjectWriteOptions();
  zstd.bottommost_compression = rocksdb::kZSTD;
  const std::pair<rocksdb::Options, std::string> others[] = {
      {crc, "checksum"}, {DatabaseOptions(), "flush_block_policy_factory"}, {zstd, "compression"}};
  for (const auto& [options, named] : others) {
    BlockPerKeyTableWriter other(options, rocksdb::EnvOptions(), false);
    st = other.Open(dir.Sub("other.sst"));
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("option " + named), std::string::npos) << st.ToString();
  }
}

// WriteItemsToSst with o.block_per_key (the workers build each chunk's
// block) writes what it writes through SstFileWriter: raw and compressed
// chunks, of contiguous pieces, of pieces cut into boxes, read through a
// source, small and empty, a piece whose chunks a step before stored
// (shared, not written), over several files.
// Files that fail their appends once `budget` bytes are written (-1: never)
// or their sync, and say whether they were closed.
class FaultyEnv : public rocksdb::EnvWrapper {
 public:
  FaultyEnv() : rocksdb::EnvWrapper(rocksdb::Env::Default()) {}
  const char* Name() const override { return "FaultyEnv"; }
  int64_t budget = -1;
  bool fail_sync = false;
  bool closed = false;

  rocksdb::Status NewWritableFile(const std::string& f, std::unique_ptr<rocksdb::WritableFile>* r,
                                  const rocksdb::EnvOptions& o) override {
    std::unique_ptr<rocksdb::WritableFile> base;
    rocksdb::Status s = target()->NewWritableFile(f, &base, o);
    if (s.ok()) r->reset(new File(this, std::move(base)));
    return s;
  }

 private:
  class File : public rocksdb::WritableFile {
   public:
    File(FaultyEnv* env, std::unique_ptr<rocksdb::WritableFile> base) : env_(env), base_(std::move(base)) {}
    rocksdb::Status Append(const rocksdb::Slice& d) override {
      if (env_->budget >= 0 && static_cast<int64_t>(d.size()) > env_->budget) {
        return rocksdb::Status::IOError("injected append failure");
      }
      if (env_->budget >= 0) env_->budget -= static_cast<int64_t>(d.size());
      return base_->Append(d);
    }
    rocksdb::Status Close() override {
      env_->closed = true;
      return base_->Close();
    }
    rocksdb::Status Flush() override { return base_->Flush(); }
    rocksdb::Status Sync() override {
      return env_->fail_sync ? rocksdb::Status::IOError("injected sync failure") : base_->Sync();
    }

   private:
    FaultyEnv* env_;
    std::unique_ptr<rocksdb::WritableFile> base_;
  };
};

TEST(BlockPerKeyTable, AFailedFileIsDeletedAndAnUnfinishedOneNeverClosed) {
  TempDir dir;
  const std::vector<Entry> entries = Entries();
  std::vector<std::string> blocks(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) BuildDataBlock(entries[i].key, entries[i].value, &blocks[i]);
  FaultyEnv env;
  rocksdb::Options options = bucket::SstObjectWriteOptions();
  options.env = &env;
  // An append fails: that Add, every later call and Finish say so; the
  // file is gone.
  {
    const std::string path = dir.Sub("append.sst");
    BlockPerKeyTableWriter table(options, rocksdb::EnvOptions(), false);
    ASSERT_TRUE(table.Open(path).ok());
    env.budget = static_cast<int64_t>(blocks[0].size() + blocks[1].size());
    ASSERT_TRUE(table.Add(entries[0].key, blocks[0]).ok());
    ASSERT_TRUE(table.Add(entries[1].key, blocks[1]).ok());
    Status st = table.Add(entries[2].key, blocks[2]);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("injected append failure"), std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find(path), std::string::npos) << st.ToString();
    env.budget = -1;
    EXPECT_EQ(table.Add(entries[3].key, blocks[3]).message(), st.message());
    rocksdb::ExternalSstFileInfo info;
    EXPECT_EQ(table.Finish(&info).message(), st.message());
    EXPECT_FALSE(std::filesystem::exists(path));
  }
  // The sync fails: Finish says so and deletes the file.
  {
    const std::string path = dir.Sub("sync.sst");
    BlockPerKeyTableWriter table(options, rocksdb::EnvOptions(), false);
    ASSERT_TRUE(table.Open(path).ok());
    ASSERT_TRUE(table.Add(entries[0].key, blocks[0]).ok());
    env.fail_sync = true;
    rocksdb::ExternalSstFileInfo info;
    Status st = table.Finish(&info);
    EXPECT_NE(st.message().find("injected sync failure"), std::string::npos) << st.ToString();
    EXPECT_FALSE(std::filesystem::exists(path));
    env.fail_sync = false;
  }
  // A writer dropped before Finish never closes its file (an upload env's
  // file would complete its object on Close).
  env.closed = false;
  {
    BlockPerKeyTableWriter table(options, rocksdb::EnvOptions(), false);
    ASSERT_TRUE(table.Open(dir.Sub("dropped.sst")).ok());
    ASSERT_TRUE(table.Add(entries[0].key, blocks[0]).ok());
  }
  EXPECT_FALSE(env.closed);
}

TEST(BlockPerKeyTable, ChunksWrittenInTheirBlocksMakeTheFilesSstFileWriterMakes) {
  TempDir dir;
  Tensor matrix = PatternTensor(DType::kF32, {300, 500}, 3);
  Tensor vector = PatternTensor(DType::kU8, {3 * 65536 + 100}, 4);
  Tensor small = PatternTensor(DType::kBF16, {5}, 5);
  std::vector<WriteItem> items(4);
  items[0].fqn = "matrix";
  items[0].dtype = DType::kF32;
  items[0].sizes = {300, 500};
  items[0].data = matrix.data();
  items[0].nbytes = matrix.nbytes();
  items[1].fqn = "vector";
  items[1].sizes = {static_cast<int64_t>(vector.nbytes())};
  items[1].data = vector.data();
  items[1].nbytes = vector.nbytes();
  items[2] = items[1];
  items[2].fqn = "vector through its source";
  items[2].source = [&](uint64_t begin, uint64_t n, const std::function<void(const char*)>& use) {
    std::string copy(static_cast<const char*>(vector.data()) + begin, n);
    use(copy.data());
    return Status::OK();
  };
  items[3].fqn = "small";
  items[3].dtype = DType::kBF16;
  items[3].sizes = {5};
  items[3].data = small.data();
  items[3].nbytes = small.nbytes();
  items.emplace_back();
  items.back().fqn = "empty";
  items.back().sizes = {0};
  // A wrapper's source (Python's checks for an interrupt) that hands over
  // the item's own bytes: they may be lent.
  Tensor checked = PatternTensor(DType::kF32, {256, 300}, 6);
  items.push_back(items[0]);
  items.back().fqn = "matrix through a checking source";
  items.back().sizes = {256, 300};
  items.back().data = checked.data();
  items.back().nbytes = checked.nbytes();
  items.back().source = [&](uint64_t begin, uint64_t, const std::function<void(const char*)>& use) {
    use(static_cast<const char*>(checked.data()) + begin);
    return Status::OK();
  };
  // Bytes in one run, read directly: lent in 64 KiB pieces.
  Tensor bytes = PatternTensor(DType::kU8, {3 * 65536 + 1000}, 7);
  items.push_back(items[1]);
  items.back().fqn = "bytes";
  items.back().data = bytes.data();
  items.back().nbytes = bytes.nbytes();
  items.back().sizes = {static_cast<int64_t>(bytes.nbytes())};
  for (uint32_t i = 0; i < items.size(); ++i) items[i].key = StorageKey{0, i};
  const SaveContext ctx{3, 99, 0, 1, 0};
  for (Compression compression : {Compression::kNone, Compression::kZstd}) {
    // The vector's chunks as a step before stored them: a deduplicating
    // save refers to those instead of writing them (both ways alike).
    ReuseCandidate before;
    {
      ChunkWriteOptions o;
      o.chunk_bytes = 64 << 10;
      o.compression = compression;
      const std::string sub = dir.Sub("before" + std::to_string(int(compression)));
      std::filesystem::create_directories(sub);
      StatusOr<WriteResult> r = WriteItemsToSst(sub, ctx, {items[1]}, bucket::SstObjectWriteOptions(), o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      const WrittenItem& w = r.value().items[0];
      before.key = items[1].key;
      before.step = 2;
      before.save_id = 5;
      before.piece.key = StorageKey{0, 7};
      before.piece.offsets = {0};
      before.piece.sizes = items[1].sizes;
      before.piece.nbytes = items[1].nbytes;
      before.piece.chunk_bytes = w.chunk_bytes;
      before.piece.num_chunks = w.num_chunks;
      before.piece.encoding = w.encoding;
      before.piece.chunk_hashes = w.chunk_hashes;
      before.piece.chunk_shape = w.chunk_shape;
    }
    items[1].reuse = &before;
    // The vector's chunk 1 changed since: written (and lent, raw), not
    // shared; its CRCs taken after its hash decided.
    static_cast<char*>(vector.data())[65536 + 5] ^= 1;
    // SstFileWriter's files; the blocks' files; the same to files that
    // take raw chunks' bytes lent (read only when each file is finished).
    std::vector<WriteResult> results;
    auto fs = std::make_shared<LendingFileSystem>();
    std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
    for (int way : {0, 1, 2}) {
      ChunkWriteOptions o;
      o.chunk_bytes = 64 << 10;
      o.compression = compression;
      o.threads = 2;
      o.max_sst_file_bytes = 400 << 10;
      o.block_per_key = way > 0;
      rocksdb::Options options = bucket::SstObjectWriteOptions();
      if (way == 2) options.env = env.get();
      const std::string sub = dir.Sub("way" + std::to_string(way) + "-" + std::to_string(int(compression)));
      std::filesystem::create_directories(sub);
      StatusOr<WriteResult> r = WriteItemsToSst(sub, ctx, items, options, o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      results.push_back(std::move(r).value());
    }
    // Lent, where they lie in the tensors: the raw chunks of 64 KiB of the
    // matrices (boxes of 128 x 128 elements, rows of 512 bytes), of the
    // bytes (64 KiB pieces of a run), and the vector's changed chunk 1;
    // none of the vector's shared chunks, none that a source copied.
    if (compression == Compression::kNone) {
      const char* changed_chunk = static_cast<const char*>(vector.data()) + 65536;
      auto in = [](const char* base, size_t n, const char* at) { return at >= base && at < base + n; };
      auto in_tensor = [&](const Tensor& t, const char* at) {
        return in(static_cast<const char*>(t.data()), t.nbytes(), at);
      };
      EXPECT_GT(fs->lent_bytes, 0u);
      EXPECT_EQ(fs->wrong_crcs, 0);
      const std::vector<std::function<bool(const char*)>> each = {
          [&](const char* at) { return in_tensor(matrix, at); },
          [&](const char* at) { return in_tensor(checked, at); },
          [&](const char* at) { return in_tensor(bytes, at); },
          [&](const char* at) { return in(changed_chunk, 65536, at); }};
      for (const char* at : fs->lent_at) {
        EXPECT_TRUE(std::any_of(each.begin(), each.end(), [&](const auto& lies_in) { return lies_in(at); }));
      }
      for (size_t k = 0; k < each.size(); ++k) {
        EXPECT_TRUE(std::any_of(fs->lent_at.begin(), fs->lent_at.end(), each[k])) << k;
      }
    } else {
      EXPECT_EQ(fs->lent_bytes, 0u);
    }
    const WriteResult& theirs = results[0];
    for (size_t way = 1; way < results.size(); ++way) {
      const WriteResult& ours = results[way];
      ASSERT_EQ(ours.files.size(), theirs.files.size());
      EXPECT_GE(ours.files.size(), 2u);
      for (size_t f = 0; f < ours.files.size(); ++f) {
        rocksdb::TableProperties their_props, our_props;
        EXPECT_EQ(Properties(ours.files[f], &our_props), Properties(theirs.files[f], &their_props));
        ASSERT_EQ(our_props.data_size, their_props.data_size);
        ASSERT_EQ(our_props.index_size, their_props.index_size);
        const uint64_t n = our_props.data_size + our_props.index_size;
        EXPECT_TRUE(Bytes(ours.files[f]).substr(0, n) == Bytes(theirs.files[f]).substr(0, n)) << f;
        our_props.db_session_id = their_props.db_session_id = "";  // (random)
        EXPECT_EQ(our_props.ToString(), their_props.ToString()) << f;
      }
      ASSERT_EQ(ours.items.size(), theirs.items.size());
      EXPECT_FALSE(ours.items[1].references.empty());
      for (size_t i = 0; i < ours.items.size(); ++i) {
        EXPECT_EQ(ours.items[i].references.size(), theirs.items[i].references.size()) << i;
        EXPECT_EQ(ours.items[i].stored_bytes, theirs.items[i].stored_bytes) << i;
        EXPECT_EQ(ours.items[i].num_chunks, theirs.items[i].num_chunks) << i;
        EXPECT_EQ(ours.items[i].chunk_hashes, theirs.items[i].chunk_hashes) << i;
      }
    }
  }
}

}  // namespace
}  // namespace ckptdb
