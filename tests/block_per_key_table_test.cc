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
#include "store/sst_chunk_writer.h"
#include "test_util.h"

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
// (127/128 bytes, 16 KiB), an empty one and a 1 MiB one.
std::vector<Entry> Entries() {
  std::vector<Entry> out;
  const size_t sizes[] = {0, 1, 100, 127, 128, 16383, 16384, 100000, 1 << 20};
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

  BlockPerKeyTableWriter table(options, rocksdb::EnvOptions(), false);
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

  rocksdb::TableProperties their_props, our_props;
  std::map<std::string, std::string> their_user = Properties(theirs, &their_props);
  std::map<std::string, std::string> our_user = Properties(ours, &our_props);
  EXPECT_EQ(our_user, their_user);
  ASSERT_EQ(our_props.data_size, their_props.data_size);
  ASSERT_EQ(our_props.index_size, their_props.index_size);
  // The data blocks and the index that follows them, byte for byte.
  const uint64_t data_and_index = our_props.data_size + our_props.index_size;
  EXPECT_TRUE(Bytes(ours).substr(0, data_and_index) == Bytes(theirs).substr(0, data_and_index));
  // Every property but the session's random id.
  their_props.db_session_id = our_props.db_session_id = "";
  EXPECT_EQ(our_props.ToString(), their_props.ToString());
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
  EXPECT_NE(st.message().find("not its key's"), std::string::npos) << st.ToString();
  EXPECT_EQ(table.Add(entries[1].key, block.substr(0, block.size() - 1)).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(table.Add(entries[1].key, block).ok());
  BuildDataBlock(entries[0].key, entries[0].value, &block);
  st = table.Add(entries[0].key, block);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("increasing order"), std::string::npos) << st.ToString();
  ASSERT_TRUE(table.Finish(&info).ok());
  EXPECT_EQ(info.num_entries, 1u);

  // Options that ask for another table (here: CRC32c checksums).
  rocksdb::Options crc = bucket::SstObjectWriteOptions();
  rocksdb::BlockBasedTableOptions t;
  t.checksum = rocksdb::kCRC32c;
  crc.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  BlockPerKeyTableWriter other(crc, rocksdb::EnvOptions(), false);
  st = other.Open(dir.Sub("crc.sst"));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("XXH3"), std::string::npos) << st.ToString();
}

// WriteItemsToSst with o.block_per_key (the workers build each chunk's
// block) writes what it writes through SstFileWriter: raw and compressed
// chunks, of contiguous pieces, of pieces cut into boxes, read through a
// source, small and empty, over two files.
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
  for (uint32_t i = 0; i < items.size(); ++i) items[i].key = StorageKey{0, i};
  const SaveContext ctx{3, 99, 0, 1, 0};
  for (Compression compression : {Compression::kNone, Compression::kZstd}) {
    std::vector<WriteResult> results;
    for (bool blocks : {false, true}) {
      ChunkWriteOptions o;
      o.chunk_bytes = 64 << 10;
      o.compression = compression;
      o.threads = 2;
      o.max_sst_file_bytes = 400 << 10;
      o.block_per_key = blocks;
      const std::string sub = dir.Sub(std::string(blocks ? "ours" : "theirs") + std::to_string(int(compression)));
      std::filesystem::create_directories(sub);
      StatusOr<WriteResult> r = WriteItemsToSst(sub, ctx, items, bucket::SstObjectWriteOptions(), o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      results.push_back(std::move(r).value());
    }
    const WriteResult& theirs = results[0];
    const WriteResult& ours = results[1];
    ASSERT_EQ(ours.files.size(), theirs.files.size());
    EXPECT_GE(ours.files.size(), 2u);
    for (size_t f = 0; f < ours.files.size(); ++f) {
      rocksdb::TableProperties their_props, our_props;
      EXPECT_EQ(Properties(ours.files[f], &our_props), Properties(theirs.files[f], &their_props));
      ASSERT_EQ(our_props.data_size, their_props.data_size);
      ASSERT_EQ(our_props.index_size, their_props.index_size);
      const uint64_t n = our_props.data_size + our_props.index_size;
      EXPECT_TRUE(Bytes(ours.files[f]).substr(0, n) == Bytes(theirs.files[f]).substr(0, n)) << f;
    }
    ASSERT_EQ(ours.items.size(), theirs.items.size());
    for (size_t i = 0; i < ours.items.size(); ++i) {
      EXPECT_EQ(ours.items[i].stored_bytes, theirs.items[i].stored_bytes) << i;
      EXPECT_EQ(ours.items[i].num_chunks, theirs.items[i].num_chunks) << i;
      EXPECT_EQ(ours.items[i].chunk_hashes, theirs.items[i].chunk_hashes) << i;
    }
  }
}

}  // namespace
}  // namespace ckptdb
