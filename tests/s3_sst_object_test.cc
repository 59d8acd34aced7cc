// SST objects read where they lie in a bucket (src/bucket/), against the real
// SeaweedFS server of the S3Server fixture: chunks bit for bit, the requests
// and bytes each read costs, and damaged, truncated and missing objects.
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/sst_file_writer.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bucket/block_starts.h"
#include "bucket/object_file_system.h"
#include "bucket/sst_object_options.h"
#include "bucket/sst_object_source.h"
#include "format/chunk_codec.h"
#include "format/keys.h"
#include "s3/s3_client.h"
#include "s3_fault_proxy.h"
#include "s3_test_server.h"
#include "store/chunk_reader.h"
#include "store/rocksdb_options.h"
#include "test_util.h"

namespace ckptdb {
namespace bucket {
namespace {

using ::ckptdb::testing::RandomBytes;
using ::ckptdb::testing::TempDir;

const ::ckptdb::testing::S3TestServer& Server() { return ::ckptdb::testing::TestS3Server(); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Chunks written into one SST file as the store writes them (SstFileWriter,
// data keys in order, encoded values), with the options `o`: the bucket's
// SstObjectWriteOptions() or the local store's DatabaseOptions().
struct SstFile {
  std::vector<DataKey> keys;
  std::vector<std::string> raw;     // each chunk's bytes
  std::vector<std::string> values;  // as stored
  std::string bytes;                // the file
  std::string smallest, largest;
  uint64_t stored_bytes() const {
    uint64_t n = 0;
    for (const std::string& v : values) n += v.size();
    return n;
  }
};

// `chunks` chunks of chunk_bytes each, alternately raw and zstd-compressed
// (compressible bytes); with damage_chunk >= 0, that chunk's stored payload
// has one byte flipped before it is written (RocksDB's block checksum then
// covers the damaged bytes: only the chunk's own checksum finds it).
SstFile WriteSst(const TempDir& dir, int chunks, size_t chunk_bytes, int damage_chunk = -1,
                 const rocksdb::Options& o = SstObjectWriteOptions()) {
  SstFile f;
  const std::string path = dir.Sub("chunks.sst");
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), o);
  EXPECT_TRUE(writer.Open(path).ok());
  for (int i = 0; i < chunks; ++i) {
    DataKey k;
    k.step = 7;
    k.save_id = 3;
    k.rank = 1;
    k.item = static_cast<uint32_t>(i / 3);
    k.chunk = static_cast<uint32_t>(i % 3);
    std::string raw = RandomBytes(chunk_bytes, 100 + i);
    if (i % 2 == 1) {
      for (size_t b = 0; b < raw.size(); ++b) raw[b] = static_cast<char>((b / 97) % 7);
    }
    std::string value;
    EncodeChunk(raw.data(), raw.size(), i % 2 == 1 ? Compression::kZstd : Compression::kNone, 1, &value);
    if (i == damage_chunk) value[kChunkHeaderSize + value.size() / 3] ^= 0x10;
    EXPECT_TRUE(writer.Put(EncodeDataKey(k), value).ok());
    f.keys.push_back(k);
    f.raw.push_back(std::move(raw));
    f.values.push_back(std::move(value));
  }
  rocksdb::ExternalSstFileInfo info;
  EXPECT_TRUE(writer.Finish(&info).ok());
  f.smallest = info.smallest_key;
  f.largest = info.largest_key;
  f.bytes = ReadFile(path);
  return f;
}

class SstObjectTest : public ::ckptdb::testing::S3ServerTest {
 protected:

  void Put(const std::string& key, const std::string& data) {
    auto etag = client_->PutObject(bucket_, key, data);
    ASSERT_TRUE(etag.ok()) << etag.status();
  }

  // Puts `bytes` at `key` and opens it as the one object of a source, its
  // size given (no HEAD) and its key range f's.
  StatusOr<std::unique_ptr<SstObjectSource>> PutAndOpen(const std::string& key, const std::string& bytes,
                                                        const SstFile& f) {
    Put(key, bytes);
    return SstObjectSource::Open(client_.get(), bucket_, {{key, bytes.size(), f.smallest, f.largest}});
  }

  // A client of the test server through `proxy`.
  std::unique_ptr<s3::S3Client> ClientThrough(const ::ckptdb::testing::S3FaultProxy& proxy,
                                              const s3::S3ClientOptions& options) {
    s3::S3Settings settings = Server().settings;
    settings.endpoint = proxy.endpoint();
    auto client = s3::S3Client::Create(settings, options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  // Get of chunk i of `f` through `runs`: DataLoss naming the object `key`
  // for chunk `bad`, the chunk's value for any other.
  void ExpectGet(ChunkRuns& runs, const SstFile& f, size_t i, size_t bad = SIZE_MAX, const std::string& key = "") {
    rocksdb::PinnableSlice v;
    Status s = runs.Get(f.keys[i], &v);
    if (i == bad) {
      EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
      EXPECT_NE(s.message().find(ObjectPath(bucket_, key)), std::string::npos) << s;
    } else {
      ASSERT_OK(s);
      EXPECT_TRUE(v.ToString() == f.values[i]) << i;
    }
  }
};

TEST_F(SstObjectTest, ReadsEveryChunkBitForBitWithOneGetEach) {
  TempDir dir;
  const SstFile f = WriteSst(dir, 9, 200 << 10);
  const std::string key = prefix_ + "rank-1-0.sst";
  Put(key, f.bytes);

  auto source = SstObjectSource::Open(client_.get(), bucket_, {{key, 0, f.smallest, f.largest}});
  ASSERT_TRUE(source.ok()) << source.status();
  const ObjectReadStats opened = (*source)->stats();
  // The size by one HEAD; the footer, index and properties by one GET.
  EXPECT_EQ(opened.heads, 1u);
  EXPECT_EQ(opened.gets, 1u);
  EXPECT_LE(opened.bytes, ObjectReadOptions().tail_bytes);

  auto chunks = (*source)->ReadChunks(f.keys);
  ASSERT_TRUE(chunks.ok()) << chunks.status();
  ASSERT_EQ(chunks->size(), f.raw.size());
  for (size_t i = 0; i < f.raw.size(); ++i) EXPECT_TRUE((*chunks)[i] == f.raw[i]) << "chunk " << i;

  const ObjectReadStats read = (*source)->stats();
  EXPECT_EQ(read.heads, 1u);
  EXPECT_EQ(read.gets - opened.gets, f.keys.size());  // exactly one GET per chunk
  EXPECT_LE(read.bytes - opened.bytes, 1.1 * f.stored_bytes());
  EXPECT_GE(read.bytes - opened.bytes, f.stored_bytes());
  std::printf(
      "SST object of %zu bytes, %zu chunks (%llu stored bytes): open %llu HEAD + %llu GET (%llu bytes); "
      "chunks %llu GETs, %llu bytes (%.2fx)\n",
      f.bytes.size(), f.keys.size(), static_cast<unsigned long long>(f.stored_bytes()),
      static_cast<unsigned long long>(opened.heads), static_cast<unsigned long long>(opened.gets),
      static_cast<unsigned long long>(opened.bytes), static_cast<unsigned long long>(read.gets - opened.gets),
      static_cast<unsigned long long>(read.bytes - opened.bytes),
      static_cast<double>(read.bytes - opened.bytes) / f.stored_bytes());

  // A key the object does not hold: NotFound naming the chunk, and no GET
  // when it is outside the object's key range.
  DataKey other = f.keys.back();
  other.step = 8;
  auto missing = (*source)->ReadChunks({other});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status();
  EXPECT_NE(missing.status().message().find("step 8"), std::string::npos) << missing.status();
  EXPECT_EQ((*source)->stats().gets, read.gets);
}

// The local store's own files (DatabaseOptions()'s block policy: small
// chunks share blocks of up to 4 KiB) read just as correctly.
TEST_F(SstObjectTest, ReadsTheLocalStoresBlockLayoutToo) {
  TempDir dir;
  const SstFile f = WriteSst(dir, 9, 200 << 10, -1, DatabaseOptions());
  const std::string key = prefix_ + "local-layout.sst";
  auto source = PutAndOpen(key, f.bytes, f);
  ASSERT_TRUE(source.ok()) << source.status();
  const ObjectReadStats opened = (*source)->stats();
  auto chunks = (*source)->ReadChunks(f.keys);
  ASSERT_TRUE(chunks.ok()) << chunks.status();
  for (size_t i = 0; i < f.raw.size(); ++i) EXPECT_TRUE((*chunks)[i] == f.raw[i]) << "chunk " << i;
  const ObjectReadStats read = (*source)->stats();
  EXPECT_LE(read.gets - opened.gets, f.keys.size());
  std::printf("DatabaseOptions() layout: %zu chunks (%llu stored bytes) fetched %llu bytes in %llu GETs (%.2fx)\n",
              f.keys.size(), static_cast<unsigned long long>(f.stored_bytes()),
              static_cast<unsigned long long>(read.bytes - opened.bytes),
              static_cast<unsigned long long>(read.gets - opened.gets),
              static_cast<double>(read.bytes - opened.bytes) / f.stored_bytes());
}

TEST_F(SstObjectTest, AKnownSizeCostsNoHeadAndChunksReadInParallel) {
  TempDir dir;
  // The last chunk is a large one: its block starts before the object's
  // cached tail, so every chunk costs its GET.
  const SstFile f = WriteSst(dir, 13, 64 << 10);
  const std::string key = prefix_ + "rank-1-0.sst";
  auto source = PutAndOpen(key, f.bytes, f);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->stats().heads, 0u);
  EXPECT_EQ((*source)->stats().gets, 1u);

  std::vector<std::thread> threads;
  std::atomic<int> same{0};
  for (size_t i = 0; i < f.keys.size(); ++i) {
    threads.emplace_back([&, i] {
      rocksdb::PinnableSlice value;
      Status s = (*source)->Get(f.keys[i], &value);
      if (s.ok() && value.ToString() == f.values[i]) same.fetch_add(1);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(same.load(), static_cast<int>(f.keys.size()));
  EXPECT_EQ((*source)->stats().gets, 1u + f.keys.size());
}

// A StorageReader whose metadata comes from a local store and whose chunks
// come from that store's SST files uploaded into the bucket: the chunk read
// path of a bucket store.
class BucketChunksReader : public StorageReader {
 public:
  BucketChunksReader(StorageReader* metadata, const SstObjectSource* chunks, bool runs)
      : metadata_(metadata), chunks_(chunks), runs_(runs) {}
  StatusOr<StepMetadata> ReadMetadata(int64_t step) override { return metadata_->ReadMetadata(step); }
  StatusOr<ReadStats> Read(const StepMetadata& md, const std::vector<ReadItem>& items) override {
    StatusOr<ReadStats> r =
        ReadChunksFrom(chunks_->Getter(), md, items, 4, runs_ ? chunks_->Planner() : ChunkRunPlanner());
    if (r.ok()) {
      total.chunks_read += r->chunks_read;
      total.stored_bytes_read += r->stored_bytes_read;
    }
    return r;
  }
  ReadStats total;

 private:
  StorageReader* metadata_;
  const SstObjectSource* chunks_;
  bool runs_;
};

// Saves `saved` as step 5 of a local store (one rank).
void SaveStep(const std::string& store, const StateDict& saved, Compression compression) {
  StoreOptions o;
  o.chunk_bytes = 64 << 10;
  o.compression = compression;
  auto w = OpenStoreWriter(store, o);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_OK(::ckptdb::testing::SaveNoDist(saved, **w, 5));
}

// Every live SST file of the store's database with its key range, as it is
// or rewritten with SstObjectWriteOptions() (one chunk per block), and its
// bytes.
void StoreFiles(const std::string& store, bool one_chunk_per_block, const TempDir& scratch,
                std::vector<SstObject>* objects, std::vector<std::string>* contents) {
  rocksdb::DB* raw_db = nullptr;
  ASSERT_TRUE(rocksdb::DB::OpenForReadOnly(DatabaseOptions(), store + "/db", &raw_db).ok());
  std::unique_ptr<rocksdb::DB> db(raw_db);
  std::vector<rocksdb::LiveFileMetaData> files;
  db->GetLiveFilesMetaData(&files);
  ASSERT_FALSE(files.empty());
  for (const rocksdb::LiveFileMetaData& m : files) {
    std::string path = m.db_path + m.name;
    if (one_chunk_per_block) {
      rocksdb::SstFileReader reader(DatabaseOptions());
      ASSERT_TRUE(reader.Open(path).ok());
      const std::string rewritten = scratch.Sub("reblocked-" + m.name.substr(m.name.rfind('/') + 1));
      rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), SstObjectWriteOptions());
      ASSERT_TRUE(writer.Open(rewritten).ok()) << rewritten;
      std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(rocksdb::ReadOptions()));
      for (it->SeekToFirst(); it->Valid(); it->Next()) ASSERT_TRUE(writer.Put(it->key(), it->value()).ok());
      ASSERT_TRUE(it->status().ok());
      ASSERT_TRUE(writer.Finish().ok());
      path = rewritten;
    }
    contents->push_back(ReadFile(path));
    objects->push_back({"db" + m.name, contents->back().size(), m.smallestkey, m.largestkey});
  }
}

struct BucketLoad {
  ObjectReadStats opened;  // by opening the objects
  ObjectReadStats loaded;  // by the load alone
  ReadStats chunks;
};

class SstObjectLoadTest : public SstObjectTest {
 protected:
  // Uploads the store's files (see StoreFiles) under their own prefix and
  // loads step 5 into a copy of `saved` through them (metadata from the
  // local store), checking it bit for bit; with `runs`, as a bucket store
  // loads (adjacent chunks fetched together: SstObjectSource::PlanRuns).
  void LoadThroughBucket(const std::string& store, const StateDict& saved, bool one_chunk_per_block, BucketLoad* out,
                         bool runs = false) {
    TempDir scratch;
    std::vector<SstObject> objects;
    std::vector<std::string> contents;
    StoreFiles(store, one_chunk_per_block, scratch, &objects, &contents);
    for (size_t i = 0; i < objects.size(); ++i) {
      objects[i].key = prefix_ + (one_chunk_per_block ? "one-per-block/" : "as-is/") + objects[i].key;
      Put(objects[i].key, contents[i]);
    }
    auto source = SstObjectSource::Open(client_.get(), bucket_, objects);
    ASSERT_TRUE(source.ok()) << source.status();
    out->opened = (*source)->stats();
    EXPECT_EQ(out->opened.heads, 0u);
    EXPECT_EQ(out->opened.gets, objects.size());

    auto local = OpenStoreReader(store);
    ASSERT_TRUE(local.ok()) << local.status();
    BucketChunksReader reader(local->get(), source->get(), runs);
    StateDict loaded;
    for (const auto& [fqn, entry] : saved.entries()) {
      if (const Tensor* t = std::get_if<Tensor>(&entry)) {
        ASSERT_OK(loaded.Add(fqn, ::ckptdb::testing::ZerosLike(*t)));
      } else {
        ASSERT_OK(loaded.AddBytes(fqn, ""));
      }
    }
    ASSERT_OK(::ckptdb::testing::LoadNoDist(loaded, reader, 5));
    EXPECT_TRUE(::ckptdb::testing::SameContents(saved, loaded));
    const ObjectReadStats after = (*source)->stats();
    out->loaded = {after.heads - out->opened.heads, after.gets - out->opened.gets, after.bytes - out->opened.bytes};
    out->chunks = reader.total;
    std::printf(
        "%s%s: %zu SST objects, open %llu GETs (%llu bytes); load of %llu chunks (%llu stored bytes): %llu GETs, "
        "%llu bytes (%.3fx)\n",
        one_chunk_per_block ? "one chunk per block" : "the store's own files", runs ? ", in runs" : "", objects.size(),
        static_cast<unsigned long long>(out->opened.gets), static_cast<unsigned long long>(out->opened.bytes),
        static_cast<unsigned long long>(out->chunks.chunks_read),
        static_cast<unsigned long long>(out->chunks.stored_bytes_read),
        static_cast<unsigned long long>(out->loaded.gets), static_cast<unsigned long long>(out->loaded.bytes),
        static_cast<double>(out->loaded.bytes) / out->chunks.stored_bytes_read);
  }
};

TEST_F(SstObjectLoadTest, LoadsARealStepFromItsUploadedSstFiles) {
  TempDir dir;
  const std::string store = dir.Sub("store");
  StateDict saved;
  ASSERT_OK(saved.Add("layer.weight", ::ckptdb::testing::PatternTensor(DType::kF32, {256, 512}, 1)));
  ASSERT_OK(saved.Add("layer.bias", ::ckptdb::testing::PatternTensor(DType::kBF16, {512}, 2)));
  ASSERT_OK(saved.Add("steps", ::ckptdb::testing::PatternTensor(DType::kI64, {30000}, 3)));
  ASSERT_OK(saved.AddBytes("extra", RandomBytes(70000, 4)));
  SaveStep(store, saved, Compression::kNone);
  BucketLoad load;
  LoadThroughBucket(store, saved, false, &load);
  if (HasFatalFailure()) return;
  EXPECT_GT(load.chunks.chunks_read, 10u);
  // One GET per chunk at most: a chunk whose block lies in an object's
  // cached tail costs none.
  EXPECT_LE(load.loaded.gets, load.chunks.chunks_read);
  EXPECT_LE(load.loaded.bytes, 1.1 * load.chunks.stored_bytes_read);
}

// Compressed zeros (an optimizer's fresh moments) and small pieces make
// chunks of a few bytes next to large ones: neither the store's own files
// (where small chunks share blocks of at most 4 KiB, never a large chunk's)
// nor files written with one chunk per block fetch much more than is stored.
TEST_F(SstObjectLoadTest, SmallChunksCostOnlyTheirBytesWithOneChunkPerBlock) {
  TempDir dir;
  const std::string store = dir.Sub("store");
  StateDict saved;
  for (int layer = 0; layer < 3; ++layer) {
    const std::string name = "layer" + std::to_string(layer);
    ASSERT_OK(saved.Add(name + ".bias", ::ckptdb::testing::PatternTensor(DType::kF32, {64}, 10 + layer)));
    ASSERT_OK(saved.Add(name + ".exp_avg",
                        ::ckptdb::testing::ZerosLike(::ckptdb::testing::PatternTensor(DType::kF32, {128, 512}, 0))));
    ASSERT_OK(saved.AddBytes(name + ".rng", RandomBytes(100000, 20 + layer)));
  }
  SaveStep(store, saved, Compression::kZstd);
  BucketLoad as_is, one_per_block;
  LoadThroughBucket(store, saved, false, &as_is);
  if (HasFatalFailure()) return;
  LoadThroughBucket(store, saved, true, &one_per_block);
  if (HasFatalFailure()) return;
  EXPECT_EQ(one_per_block.chunks.chunks_read, as_is.chunks.chunks_read);
  EXPECT_LE(as_is.loaded.gets, as_is.chunks.chunks_read);
  EXPECT_LE(one_per_block.loaded.gets, one_per_block.chunks.chunks_read);
  EXPECT_LE(one_per_block.loaded.bytes, 1.1 * one_per_block.chunks.stored_bytes_read);
  EXPECT_LE(as_is.loaded.bytes, 1.1 * as_is.chunks.stored_bytes_read);

  // As a bucket store loads: the files say where their blocks lie, and the
  // load fetches adjacent chunks together, no byte more.
  BucketLoad runs;
  LoadThroughBucket(store, saved, true, &runs, /*runs=*/true);
  if (HasFatalFailure()) return;
  EXPECT_EQ(runs.chunks.chunks_read, one_per_block.chunks.chunks_read);
  EXPECT_LE(runs.loaded.gets * 4, one_per_block.loaded.gets);
  EXPECT_LE(runs.loaded.bytes, one_per_block.loaded.bytes);
  // The store's own files say nothing of their blocks: chunk by chunk.
  BucketLoad as_is_runs;
  LoadThroughBucket(store, saved, false, &as_is_runs, /*runs=*/true);
  if (HasFatalFailure()) return;
  EXPECT_EQ(as_is_runs.loaded.gets, as_is.loaded.gets);
}

// The table property that says where each key's block lies: the blocks
// tile the data blocks in key order, each holding its key's value.
TEST(BlockStartsTest, SaysWhereEveryChunksBlockLies) {
  TempDir dir;
  const SstFile f = WriteSst(dir, 10, 50 << 10);
  rocksdb::SstFileReader reader(SstObjectWriteOptions());
  ASSERT_TRUE(reader.Open(dir.Sub("chunks.sst")).ok());
  std::shared_ptr<const rocksdb::TableProperties> props = reader.GetTableProperties();
  auto p = props->user_collected_properties.find(kBlockStartsProperty);
  ASSERT_NE(p, props->user_collected_properties.end());
  std::optional<BlockStarts> blocks = BlockStarts::Parse(p->second, props->data_size);
  ASSERT_TRUE(blocks.has_value());
  ASSERT_EQ(blocks->size(), f.keys.size());
  EXPECT_EQ(blocks->Begin(0), 0u);
  for (size_t i = 0; i < f.keys.size(); ++i) {
    ASSERT_EQ(blocks->Find(EncodeDataKey(f.keys[i])), static_cast<int64_t>(i));
    const uint64_t end = i + 1 < f.keys.size() ? blocks->Begin(i + 1) : props->data_size;
    EXPECT_EQ(blocks->End(i), end) << i;
    const std::string block = f.bytes.substr(blocks->Begin(i), end - blocks->Begin(i));
    EXPECT_NE(block.find(f.values[i]), std::string::npos) << i;
    EXPECT_LE(block.size(), f.values[i].size() + 64) << i;  // the key, the entry's lengths, the trailer
  }
  DataKey other = f.keys[0];
  other.chunk = 99;
  EXPECT_EQ(blocks->Find(EncodeDataKey(other)), -1);
  // Damaged, cut, or beyond the data blocks: not used.
  EXPECT_FALSE(BlockStarts::Parse("", props->data_size).has_value());
  EXPECT_FALSE(BlockStarts::Parse(p->second.substr(0, p->second.size() - 1), props->data_size).has_value());
  EXPECT_FALSE(BlockStarts::Parse(p->second, blocks->Begin(f.keys.size() - 1)).has_value());
  std::string other_format = p->second;
  other_format[0] = 2;
  EXPECT_FALSE(BlockStarts::Parse(other_format, props->data_size).has_value());
}

// A read of adjacent chunks fetches each run of them by one GET of their
// blocks' bytes, up to the cap; chunks with gaps between them are fetched
// alone; a value stays valid after its run is done and the runs are gone.
TEST_F(SstObjectTest, AdjacentChunksAreFetchedByOneGetPerRun) {
  TempDir dir;
  // 25 chunks: the last one is 1 MiB of random bytes, so no chunk's block
  // lies in the object's cached tail (those are read without a GET, alone).
  const SstFile f = WriteSst(dir, 25, 1 << 20);
  const std::string key = prefix_ + "runs.sst";
  auto source = PutAndOpen(key, f.bytes, f);
  ASSERT_TRUE(source.ok()) << source.status();
  ObjectReadStats before = (*source)->stats();

  // One thread: runs of at most a quarter of the read (at least 2 MiB, at
  // most 16), of adjacent chunks in key order, as few as fit, a GET each.
  const uint64_t cap = SstObjectSource::RunCap(f.stored_bytes(), 1);
  EXPECT_EQ(cap, f.stored_bytes() / 4);
  EXPECT_EQ(SstObjectSource::RunCap(1ull << 30, 8), 16u << 20);
  EXPECT_EQ(SstObjectSource::RunCap(1u << 20, 8), 2u << 20);
  auto one = (*source)->PlanRuns(f.keys, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  const std::vector<std::vector<size_t>>& planned = (*one)->runs();
  size_t next = 0;
  for (const std::vector<size_t>& run : planned) {
    for (size_t i : run) EXPECT_EQ(i, next++);
  }
  EXPECT_EQ(next, f.keys.size());
  const uint64_t framing = 64 << 10, largest = (1 << 20) + framing;
  EXPECT_GE(planned.size(), (f.stored_bytes() + cap + framing - 1) / (cap + framing));
  EXPECT_LE(planned.size(), f.stored_bytes() / (cap - largest) + 1);
  std::vector<rocksdb::PinnableSlice> values(f.keys.size());
  for (size_t i = 0; i < f.keys.size(); ++i) ASSERT_OK((*one)->Get(f.keys[i], &values[i]));
  ObjectReadStats after = (*source)->stats();
  EXPECT_EQ(after.gets - before.gets, planned.size());
  EXPECT_GE(after.bytes - before.bytes, f.stored_bytes());
  EXPECT_LE(after.bytes - before.bytes, f.stored_bytes() + 64 * f.keys.size());
  for (size_t r = 0; r < planned.size(); ++r) (*one)->Done(r);
  one->reset();
  for (size_t i = 0; i < f.keys.size(); ++i) EXPECT_TRUE(values[i].ToString() == f.values[i]) << i;
  values.clear();

  // Four threads: runs of at most 2 MiB (a sixteenth is less), a GET each.
  before = (*source)->stats();
  auto four = (*source)->PlanRuns(f.keys, 4);
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_GE((*four)->runs().size(), 4u);
  EXPECT_LE((*four)->runs().size(), 8u);
  for (size_t r = 0; r < (*four)->runs().size(); ++r) {
    for (size_t i : (*four)->runs()[r]) {
      rocksdb::PinnableSlice v;
      ASSERT_OK((*four)->Get(f.keys[i], &v));
      EXPECT_TRUE(v.ToString() == f.values[i]) << i;
    }
    (*four)->Done(r);
  }
  after = (*source)->stats();
  EXPECT_EQ(after.gets - before.gets, (*four)->runs().size());
  EXPECT_LE(after.bytes - before.bytes, f.stored_bytes() + 64 * f.keys.size());
  // A key of a run that is done is fetched alone.
  rocksdb::PinnableSlice again;
  ASSERT_OK((*four)->Get(f.keys[0], &again));
  EXPECT_TRUE(again.ToString() == f.values[0]);
  EXPECT_EQ((*source)->stats().gets, after.gets + 1);

  // Every other chunk: gaps between them, a GET each, no byte between.
  std::vector<DataKey> even;
  uint64_t even_bytes = 0;
  for (size_t i = 0; i < f.keys.size(); i += 2) {
    even.push_back(f.keys[i]);
    even_bytes += f.values[i].size();
  }
  before = (*source)->stats();
  auto gaps = (*source)->PlanRuns(even, 1);
  ASSERT_TRUE(gaps.ok()) << gaps.status();
  EXPECT_EQ((*gaps)->runs().size(), even.size());
  for (const DataKey& k : even) {
    rocksdb::PinnableSlice v;
    ASSERT_OK((*gaps)->Get(k, &v));
  }
  after = (*source)->stats();
  EXPECT_EQ(after.gets - before.gets, even.size());
  EXPECT_LE(after.bytes - before.bytes, even_bytes + 64 * even.size());

  // A key no object holds is a run of its own, and NotFound.
  DataKey missing = f.keys[0];
  missing.step = 99;
  auto lone = (*source)->PlanRuns({missing, f.keys[1]}, 1);
  ASSERT_TRUE(lone.ok()) << lone.status();
  EXPECT_EQ((*lone)->runs().size(), 2u);
  rocksdb::PinnableSlice v;
  EXPECT_EQ((*lone)->Get(missing, &v).code(), StatusCode::kNotFound);
}

// Objects that do not say where their blocks lie (written before the
// property, or by the local store) are read chunk by chunk, as before.
TEST_F(SstObjectTest, ObjectsWithoutBlockStartsAreReadChunkByChunk) {
  TempDir dir;
  const SstFile f = WriteSst(dir, 8, 200 << 10, -1, DatabaseOptions());
  const std::string key = prefix_ + "no-starts.sst";
  auto source = PutAndOpen(key, f.bytes, f);
  ASSERT_TRUE(source.ok()) << source.status();
  const ObjectReadStats before = (*source)->stats();
  auto runs = (*source)->PlanRuns(f.keys, 1);
  ASSERT_TRUE(runs.ok()) << runs.status();
  EXPECT_EQ((*runs)->runs().size(), f.keys.size());
  for (size_t i = 0; i < f.keys.size(); ++i) {
    rocksdb::PinnableSlice v;
    ASSERT_OK((*runs)->Get(f.keys[i], &v));
    EXPECT_TRUE(v.ToString() == f.values[i]) << i;
  }
  EXPECT_LE((*source)->stats().gets - before.gets, f.keys.size());
}

TEST_F(SstObjectTest, ATruncatedObjectIsDataLossNamingIt) {
  TempDir dir;
  const SstFile f = WriteSst(dir, 4, 32 << 10);
  const std::string key = prefix_ + "truncated.sst";
  Put(key, f.bytes.substr(0, f.bytes.size() / 2));
  auto source = SstObjectSource::Open(client_.get(), bucket_, {{key, 0, f.smallest, f.largest}});
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kDataLoss) << source.status();
  EXPECT_NE(source.status().message().find(ObjectPath(bucket_, key)), std::string::npos) << source.status();

  // Shorter than the size a record gives for it: the read that finds the
  // end missing names the object and both sizes.
  const std::string cut = prefix_ + "cut.sst";
  Put(cut, f.bytes.substr(0, f.bytes.size() - 100));
  auto short_source = SstObjectSource::Open(client_.get(), bucket_, {{cut, f.bytes.size(), f.smallest, f.largest}});
  ASSERT_FALSE(short_source.ok());
  EXPECT_EQ(short_source.status().code(), StatusCode::kDataLoss) << short_source.status();
  EXPECT_NE(short_source.status().message().find(ObjectPath(bucket_, cut) + " at " + Server().settings.endpoint +
                                                 " is truncated"),
            std::string::npos)
      << short_source.status();
  EXPECT_NE(short_source.status().message().find(std::to_string(f.bytes.size())), std::string::npos);
}

TEST_F(SstObjectTest, AFlippedByteInAChunkIsDataLoss) {
  TempDir dir;
  // The chunk's own checksum: the damage is inside a valid RocksDB block.
  {
    const SstFile f = WriteSst(dir, 4, 32 << 10, /*damage_chunk=*/2);
    const std::string key = prefix_ + "bad-chunk.sst";
    Put(key, f.bytes);
    auto source = SstObjectSource::Open(client_.get(), bucket_, {{key, 0, f.smallest, f.largest}});
    ASSERT_TRUE(source.ok()) << source.status();
    auto good = (*source)->ReadChunks({f.keys[0], f.keys[1], f.keys[3]});
    ASSERT_TRUE(good.ok()) << good.status();
    auto bad = (*source)->ReadChunks({f.keys[2]});
    EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss) << bad.status();
    EXPECT_NE(bad.status().message().find(ObjectPath(bucket_, key)), std::string::npos) << bad.status();
    EXPECT_NE(bad.status().message().find("chunk 2 of step 7"), std::string::npos) << bad.status();
  }
  // A byte flipped in the object: RocksDB's block checksum, on the one read
  // that touches it.
  {
    const SstFile f = WriteSst(dir, 4, 32 << 10);
    std::string bytes = f.bytes;
    const size_t at = bytes.find(f.values[1].substr(kChunkHeaderSize, 64));
    ASSERT_NE(at, std::string::npos);
    bytes[at + 10] ^= 0x01;
    const std::string key = prefix_ + "bad-block.sst";
    Put(key, bytes);
    auto source = SstObjectSource::Open(client_.get(), bucket_, {{key, 0, f.smallest, f.largest}});
    ASSERT_TRUE(source.ok()) << source.status();
    auto good = (*source)->ReadChunks({f.keys[0], f.keys[2], f.keys[3]});
    ASSERT_TRUE(good.ok()) << good.status();
    auto bad = (*source)->ReadChunks({f.keys[1]});
    EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss) << bad.status();
    EXPECT_NE(bad.status().message().find(ObjectPath(bucket_, key)), std::string::npos) << bad.status();
  }
}

// A byte flipped in one block of a run: RocksDB's block checksum still
// finds it where the window serves the block; the run's other chunks read.
TEST_F(SstObjectTest, AFlippedByteInARunIsDataLossForItsChunkOnly) {
  TempDir dir;
  const SstFile f = WriteSst(dir, 7, 64 << 10);  // the last chunk's block before the cached tail
  std::string bytes = f.bytes;
  const size_t at = bytes.find(f.values[2].substr(kChunkHeaderSize, 64));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 10] ^= 0x01;
  const std::string key = prefix_ + "bad-run.sst";
  auto source = PutAndOpen(key, bytes, f);
  ASSERT_TRUE(source.ok()) << source.status();
  const uint64_t gets = (*source)->stats().gets;
  auto runs = (*source)->PlanRuns(f.keys, 1);
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ((*runs)->runs().size(), 1u);
  for (size_t i = 0; i < f.keys.size(); ++i) ExpectGet(**runs, f, i, 2, key);
  EXPECT_EQ((*source)->stats().gets, gets + 1);
}

// Chunks that land need no window: a run of them may hold up to
// LandedRunCap (fewer GETs), and a run with a chunk that does not land
// stays within RunCap, as every run did before.
TEST_F(SstObjectTest, RunsOfChunksThatLandMayBeLarger) {
  TempDir dir;
  const SstFile f = WriteSst(dir, 25, 1 << 20);
  auto source = PutAndOpen(prefix_ + "landed-runs.sst", f.bytes, f);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(SstObjectSource::LandedRunCap(1ull << 30, 8), 32u << 20);
  EXPECT_EQ(SstObjectSource::LandedRunCap(64u << 20, 1), 32u << 20);  // RunCap: 16 MiB
  EXPECT_EQ(SstObjectSource::LandedRunCap(1u << 20, 8), 2u << 20);
  const uint64_t cap = SstObjectSource::RunCap(f.stored_bytes(), 1);
  const uint64_t landed_cap = SstObjectSource::LandedRunCap(f.stored_bytes(), 1);
  ASSERT_GT(landed_cap, cap);
  const auto bytes = [&](const std::vector<size_t>& run) {
    uint64_t n = 0;
    for (size_t i : run) n += f.values[i].size();
    return n;
  };
  auto plain = (*source)->PlanRuns(f.keys, 1);
  ASSERT_TRUE(plain.ok()) << plain.status();
  std::vector<bool> lands(f.keys.size(), true);
  auto landing = (*source)->PlanRuns(f.keys, 1, lands);
  ASSERT_TRUE(landing.ok()) << landing.status();
  EXPECT_LT((*landing)->runs().size(), (*plain)->runs().size());
  for (const std::vector<size_t>& run : (*landing)->runs()) EXPECT_LE(bytes(run), landed_cap + (64 << 10));
  lands[12] = false;
  auto mixed = (*source)->PlanRuns(f.keys, 1, lands);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  for (const std::vector<size_t>& run : (*mixed)->runs()) {
    const bool all = std::find(run.begin(), run.end(), size_t{12}) == run.end();
    EXPECT_LE(bytes(run), (all ? landed_cap : cap) + (64 << 10));
  }
  // Every chunk still comes, one GET a run.
  const uint64_t gets = (*source)->stats().gets;
  for (const std::vector<size_t>& run : (*landing)->runs()) {
    for (size_t i : run) ExpectGet(**landing, f, i);
  }
  EXPECT_EQ((*source)->stats().gets - gets, (*landing)->runs().size());
}

// Land: a run's raw chunks are written straight into their places, checked,
// by the run's one GET; the compressed ones (WriteSst's odd chunks) come
// from that same GET through Get, as do chunks given a place of the wrong
// size, or none. A run none of whose chunks has a place is not fetched:
// Get fetches it.
TEST_F(SstObjectTest, ARunsRawChunksLandInTheirPlacesByItsOneGet) {
  TempDir dir;
  const SstFile f = WriteSst(dir, 7, 64 << 10);
  auto source = PutAndOpen(prefix_ + "land.sst", f.bytes, f);
  ASSERT_TRUE(source.ok()) << source.status();
  for (const bool one_wrong_size : {false, true}) {
    SCOPED_TRACE(one_wrong_size ? "chunk 4 given the wrong size, 6 none" : "every chunk given its size");
    const uint64_t gets = (*source)->stats().gets;
    auto runs = (*source)->PlanRuns(f.keys, 1);
    ASSERT_TRUE(runs.ok()) << runs.status();
    ASSERT_EQ((*runs)->runs().size(), 1u);
    const std::vector<size_t>& run = (*runs)->runs()[0];
    std::vector<std::string> places(f.keys.size(), std::string(64 << 10, '\0'));
    std::vector<ChunkLanding> spots;
    for (size_t i : run) {
      const uint64_t raw = f.raw[i].size() - (one_wrong_size && i == 4 ? 8 : 0);
      spots.push_back({BoxPlace{one_wrong_size && i == 6 ? nullptr : places[i].data(), raw, raw}, raw});
    }
    const std::vector<bool> landed = (*runs)->Land(0, spots);
    ASSERT_EQ(landed.size(), run.size());
    for (size_t k = 0; k < run.size(); ++k) {
      const size_t i = run[k];
      const bool raw = i % 2 == 0 && !(one_wrong_size && (i == 4 || i == 6));
      EXPECT_EQ(landed[k], raw) << i;
      if (raw) {
        EXPECT_TRUE(places[i] == f.raw[i]) << i;
        continue;
      }
      ExpectGet(**runs, f, i);
    }
    EXPECT_EQ((*source)->stats().gets, gets + 1);
    // A chunk that landed, asked for all the same, is read again alone.
    ASSERT_EQ(run[0], 0u);
    ExpectGet(**runs, f, 0);
    EXPECT_EQ((*source)->stats().gets, gets + 2);
    (*runs)->Done(0);
  }

  const uint64_t gets = (*source)->stats().gets;
  auto runs = (*source)->PlanRuns(f.keys, 1);
  ASSERT_TRUE(runs.ok()) << runs.status();
  std::string place(64 << 10, '\0');
  std::vector<ChunkLanding> spots((*runs)->runs()[0].size(), ChunkLanding{BoxPlace{place.data(), 64 << 10, 64 << 10},
                                                                         64 << 10});
  for (ChunkLanding& spot : spots) spot.place.dest = nullptr;
  EXPECT_EQ((*runs)->Land(0, spots), std::vector<bool>(spots.size(), false));
  EXPECT_EQ((*source)->stats().gets, gets);
  for (size_t i : (*runs)->runs()[0]) ExpectGet(**runs, f, i);
  EXPECT_EQ((*source)->stats().gets, gets + 1);
}

// Every byte of a landed block counts: one flipped anywhere in chunk 2's
// block (its key, its type, the chunk's header, its raw bytes, the restart
// array, the trailer) keeps that chunk from landing, and Get then gives
// RocksDB's DataLoss for it, from the same GET; the others land.
TEST_F(SstObjectTest, AFlippedByteAnywhereInABlockKeepsItsChunkFromLanding) {
  TempDir dir;
  const SstFile f = WriteSst(dir, 7, 64 << 10);
  const size_t v = f.bytes.find(f.values[2]);
  ASSERT_NE(v, std::string::npos);
  const size_t end = v + f.values[2].size();
  const std::vector<std::pair<const char*, size_t>> places = {
      {"the key", v - 12},          {"the type", v - 8},        {"the chunk header", v + 4},
      {"the checksum", v + 9},      {"a raw byte", v + 16 + 1000}, {"the restarts", end + 1},
      {"their count", end + 4},     {"the compression", end + 8},  {"the block checksum", end + 10}};
  for (const auto& [what, at] : places) {
    SCOPED_TRACE(what);
    std::string bytes = f.bytes;
    bytes[at] ^= 0x01;
    const std::string key = prefix_ + "land-flipped-" + std::to_string(at) + ".sst";
    auto source = PutAndOpen(key, bytes, f);
    ASSERT_TRUE(source.ok()) << source.status();
    const uint64_t gets = (*source)->stats().gets;
    auto runs = (*source)->PlanRuns(f.keys, 1);
    ASSERT_TRUE(runs.ok()) << runs.status();
    ASSERT_EQ((*runs)->runs().size(), 1u);
    const std::vector<size_t>& run = (*runs)->runs()[0];
    // In runs of 1000 bytes, 1024 apart: the block that fails is gathered
    // from its runs to be read again.
    std::vector<std::string> dest(f.keys.size(), std::string(66 * 1024, '\0'));
    std::vector<ChunkLanding> spots;
    for (size_t i : run) spots.push_back({BoxPlace{dest[i].data(), 1000, 1024}, f.raw[i].size()});
    const std::vector<bool> landed = (*runs)->Land(0, spots);
    for (size_t k = 0; k < run.size(); ++k) {
      const size_t i = run[k];
      EXPECT_EQ(landed[k], i % 2 == 0 && i != 2) << i;
      if (!landed[k]) ExpectGet(**runs, f, i, 2, key);
    }
    EXPECT_EQ((*source)->stats().gets, gets + 1);
  }
}

// A run's GET cut off mid-body and retried hands the bytes over again from
// the first: every raw chunk still lands, whole and checked.
TEST_F(SstObjectTest, ALandedRunsGetRetriedMidBodyLandsEveryChunk) {
  using Action = ::ckptdb::testing::S3FaultProxy::Action;
  TempDir dir;
  const SstFile f = WriteSst(dir, 7, 64 << 10);
  const std::string key = prefix_ + "land-retried.sst";
  Put(key, f.bytes);
  ::ckptdb::testing::S3FaultProxy proxy(Server().port);
  s3::S3ClientOptions options;
  options.http.stall_timeout_s = 1;
  std::unique_ptr<s3::S3Client> client = ClientThrough(proxy, options);
  ASSERT_NE(client, nullptr);
  auto source = SstObjectSource::Open(client.get(), bucket_, {{key, f.bytes.size(), f.smallest, f.largest}});
  ASSERT_TRUE(source.ok()) << source.status();
  auto runs = (*source)->PlanRuns(f.keys, 1);
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ((*runs)->runs().size(), 1u);
  const std::vector<size_t>& run = (*runs)->runs()[0];
  // Each chunk's raw bytes land in runs of 4 KiB, 6 KiB apart (a tile of a
  // wider tensor).
  constexpr uint64_t kRun = 4096, kStride = 6144;
  std::vector<std::string> dest(f.keys.size(), std::string((64 << 10) / kRun * kStride, '\0'));
  std::vector<ChunkLanding> spots;
  for (size_t i : run) spots.push_back({BoxPlace{dest[i].data(), kRun, kStride}, f.raw[i].size()});
  const auto landed_bytes = [&](size_t i) {
    std::string out;
    for (uint64_t x = 0; x < f.raw[i].size(); x += kRun) out.append(dest[i], x / kRun * kStride, kRun);
    return out;
  };
  proxy.Script({Action::kStallMidBody});
  const uint64_t gets = (*source)->stats().gets;
  const std::vector<bool> landed = (*runs)->Land(0, spots);
  for (size_t k = 0; k < run.size(); ++k) {
    const size_t i = run[k];
    EXPECT_EQ(landed[k], i % 2 == 0) << i;
    if (landed[k]) {
      EXPECT_TRUE(landed_bytes(i) == f.raw[i]) << i;
    } else {
      ExpectGet(**runs, f, i);
    }
  }
  EXPECT_EQ((*source)->stats().gets, gets + 1);
}

TEST_F(SstObjectTest, AMissingObjectIsNotFoundNamingIt) {
  const std::string key = prefix_ + "never-written.sst";
  auto source = SstObjectSource::Open(client_.get(), bucket_, {{key, 0, "", ""}});
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kNotFound) << source.status();
  EXPECT_NE(source.status().message().find(ObjectPath(bucket_, key)), std::string::npos) << source.status();
}

// A server that keeps answering 503: Unavailable naming the object, through
// RocksDB's table reader; a failed tail GET is not kept, so the same source
// reads once the server answers again.
TEST_F(SstObjectTest, AServerThatKeepsFailingIsUnavailableNamingTheObject) {
  using Action = ::ckptdb::testing::S3FaultProxy::Action;
  TempDir dir;
  const SstFile f = WriteSst(dir, 4, 32 << 10);
  const std::string key = prefix_ + "slow.sst";
  Put(key, f.bytes);
  ::ckptdb::testing::S3FaultProxy proxy(Server().port);
  s3::S3ClientOptions options;
  options.max_attempts = 2;
  options.initial_backoff_ms = 1;
  options.max_backoff_ms = 5;
  std::unique_ptr<s3::S3Client> client = ClientThrough(proxy, options);
  ASSERT_NE(client, nullptr);

  // (RocksDB ignores a failed prefetch of the tail and reads it again.)
  proxy.Script(std::vector<Action>(8, Action::kServiceUnavailable));
  auto failed = SstObjectSource::Open(client.get(), bucket_, {{key, f.bytes.size(), f.smallest, f.largest}});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable) << failed.status();
  EXPECT_NE(failed.status().message().find(ObjectPath(bucket_, key)), std::string::npos) << failed.status();
  EXPECT_NE(failed.status().message().find("SlowDown"), std::string::npos) << failed.status();
  proxy.Script({});

  auto source = SstObjectSource::Open(client.get(), bucket_, {{key, f.bytes.size(), f.smallest, f.largest}});
  ASSERT_TRUE(source.ok()) << source.status();
  // Chunk 0's block starts before the cached tail: its read is a GET.
  proxy.Script(std::vector<Action>(8, Action::kResetBeforeSending));
  auto bad = (*source)->ReadChunks({f.keys[0]});
  proxy.Script({});
  EXPECT_EQ(bad.status().code(), StatusCode::kUnavailable) << bad.status();
  EXPECT_NE(bad.status().message().find(ObjectPath(bucket_, key)), std::string::npos) << bad.status();
  auto good = (*source)->ReadChunks(f.keys);
  ASSERT_TRUE(good.ok()) << good.status();
  for (size_t i = 0; i < f.raw.size(); ++i) EXPECT_TRUE((*good)[i] == f.raw[i]) << "chunk " << i;
}

TEST(ObjectPathTest, ParsesOnlyBucketObjectPaths) {
  std::string bucket, key;
  EXPECT_TRUE(ParseObjectPath("s3://b/dir/rank-0-0.sst", &bucket, &key));
  EXPECT_EQ(bucket, "b");
  EXPECT_EQ(key, "dir/rank-0-0.sst");
  EXPECT_EQ(ObjectPath(bucket, key), "s3://b/dir/rank-0-0.sst");
  EXPECT_FALSE(ParseObjectPath("/tmp/x.sst", &bucket, &key));
  EXPECT_FALSE(ParseObjectPath("s3://bucket-only", &bucket, &key));
  EXPECT_FALSE(ParseObjectPath("s3:///key", &bucket, &key));
  EXPECT_FALSE(ParseObjectPath("s3://b/", &bucket, &key));
}

}  // namespace
}  // namespace bucket
}  // namespace ckptdb
