// Single-process (no_dist) save and load through the real RocksDB store.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <rocksdb/db.h>

#include <cstring>
#include <functional>

#include "ckptdb/ckptdb.h"
#include "format/keys.h"
#include "format/metadata_codec.h"
#include "test_util.h"

namespace ckptdb {
namespace {

using testing::LoadNoDist;
using testing::PatternTensor;
using testing::SaveNoDist;
using testing::TempDir;
using testing::ZerosLike;

class SaveLoadTest : public ::testing::Test {
 protected:
  std::unique_ptr<StoreWriter> Writer(StoreOptions o = {}) {
    auto w = OpenStoreWriter(store_, o);
    EXPECT_TRUE(w.ok()) << w.status();
    return std::move(w).value();
  }
  std::unique_ptr<StoreReader> Reader() {
    auto r = OpenStoreReader(store_);
    EXPECT_TRUE(r.ok()) << r.status();
    return std::move(r).value();
  }
  // A target with the same entries as `sd`, zero-filled.
  static StateDict TargetLike(const StateDict& sd) {
    StateDict out;
    for (const auto& [fqn, e] : sd.entries()) {
      if (const Tensor* t = std::get_if<Tensor>(&e)) {
        EXPECT_TRUE(out.Add(fqn, ZerosLike(*t)).ok());
      } else {
        EXPECT_TRUE(out.Add(fqn, Bytes{}).ok());
      }
    }
    return out;
  }
  static void ExpectSame(const StateDict& want, const StateDict& got) {
    ASSERT_EQ(want.size(), got.size());
    for (const auto& [fqn, e] : want.entries()) {
      const Entry* g = got.Find(fqn);
      ASSERT_NE(g, nullptr) << fqn;
      if (const Tensor* t = std::get_if<Tensor>(&e)) {
        EXPECT_TRUE(std::get<Tensor>(*g).BitwiseEquals(*t)) << fqn;
      } else {
        EXPECT_EQ(std::get<Bytes>(*g).data, std::get<Bytes>(e).data) << fqn;
      }
    }
  }
  void RoundTrip(const StateDict& sd, int64_t step, StoreOptions o = {}) {
    auto w = Writer(o);
    ASSERT_OK(SaveNoDist(sd, *w, step));
    auto r = Reader();
    StateDict target = TargetLike(sd);
    ASSERT_OK(LoadNoDist(target, *r, step));
    ExpectSame(sd, target);
  }

  TempDir dir_;
  std::string store_ = dir_.Sub("store");
};

TEST_F(SaveLoadTest, EveryDTypeRoundTripsBitExact) {
  StateDict sd;
  uint32_t seed = 0;
  for (DType d : kAllDTypes) ASSERT_OK(sd.Add(std::string("t.") + DTypeName(d), PatternTensor(d, {7, 13}, ++seed)));
  RoundTrip(sd, 0);
}

TEST_F(SaveLoadTest, ScalarsAndZeroSizeTensors) {
  StateDict sd;
  ASSERT_OK(sd.Add("scalar.f64", PatternTensor(DType::kF64, {}, 1)));
  ASSERT_OK(sd.Add("scalar.bool", PatternTensor(DType::kBool, {}, 2)));
  ASSERT_OK(sd.Add("empty.rows", PatternTensor(DType::kF32, {0, 16}, 3)));
  ASSERT_OK(sd.Add("empty.mid", PatternTensor(DType::kBF16, {4, 0, 2}, 4)));
  ASSERT_OK(sd.AddBytes("empty.bytes", ""));
  RoundTrip(sd, 3);
  auto md = Reader()->ReadMetadata(3);
  ASSERT_TRUE(md.ok());
  EXPECT_EQ(md->Find("empty.rows")->pieces[0].num_chunks, 0u);
  EXPECT_EQ(md->Find("scalar.f64")->shape, Shape{});
}

TEST_F(SaveLoadTest, TensorSpanningManyChunks) {
  StateDict sd;
  ASSERT_OK(sd.Add("big", PatternTensor(DType::kF32, {1000, 37}, 9)));  // 148000 bytes
  StoreOptions o;
  o.chunk_bytes = 4096;
  // As runs of bytes: 37 chunks of 4 KiB.
  o.chunk_layout = ChunkLayout::kRows;
  RoundTrip(sd, 1, o);
  auto md = Reader()->ReadMetadata(1);
  ASSERT_TRUE(md.ok());
  EXPECT_EQ(md->Find("big")->pieces[0].num_chunks, 37u);
  EXPECT_EQ(md->Find("big")->pieces[0].chunk_bytes, 4096u);
  EXPECT_TRUE(md->Find("big")->pieces[0].chunk_shape.empty());
  // As boxes of 32 x 32 (4 KiB): 32 x 2 of them, the last column of boxes 5
  // wide and the last row of them 8 high.
  o.chunk_layout = ChunkLayout::kBoxes;
  RoundTrip(sd, 2, o);
  md = Reader()->ReadMetadata(2);
  ASSERT_TRUE(md.ok());
  const StoredPiece& p = md->Find("big")->pieces[0];
  EXPECT_EQ(p.chunk_shape, (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(p.num_chunks, 64u);
  EXPECT_EQ(p.chunk_bytes, 4096u);
  EXPECT_EQ(p.chunk_raw_bytes(63), 8u * 5 * 4);
}

TEST_F(SaveLoadTest, CompressionRoundTripsAndShrinksRedundantData) {
  StoreOptions o;
  o.compression = Compression::kZstd;
  o.chunk_bytes = 1 << 16;
  StateDict sd;
  ASSERT_OK(sd.Add("zeros", Tensor::Zeros(DType::kF32, {256, 256}).value()));
  ASSERT_OK(sd.Add("noise", PatternTensor(DType::kU8, {100000}, 5)));
  RoundTrip(sd, 2, o);
  auto steps = Reader()->ListSteps();
  ASSERT_TRUE(steps.ok());
  EXPECT_LT((*steps)[0].stored_bytes, (*steps)[0].logical_bytes / 2);
}

TEST_F(SaveLoadTest, BytesEntries) {
  StateDict sd;
  std::string binary(1000, '\0');
  for (size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<char>(i * 31);
  ASSERT_OK(sd.AddBytes("rng", binary));
  ASSERT_OK(sd.AddBytes("hparams", "{\"lr\": 0.001}"));
  RoundTrip(sd, 5);
}

TEST_F(SaveLoadTest, EmptyStateDict) {
  StateDict sd;
  RoundTrip(sd, 0);
  auto steps = Reader()->ListSteps();
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_EQ((*steps)[0].entries, 0u);
}

TEST_F(SaveLoadTest, ViewsOverCallerMemory) {
  std::vector<int32_t> mem(24);
  for (int i = 0; i < 24; ++i) mem[i] = i * i;
  StateDict sd;
  ASSERT_OK(sd.Add("v", Tensor::View(DType::kI32, {4, 6}, mem.data(), mem.size() * 4).value()));
  auto w = Writer();
  ASSERT_OK(SaveNoDist(sd, *w, 0));
  std::vector<int32_t> out(24, -1);
  StateDict target;
  ASSERT_OK(target.Add("v", Tensor::View(DType::kI32, {4, 6}, out.data(), out.size() * 4).value()));
  ASSERT_OK(LoadNoDist(target, *Reader(), 0));
  EXPECT_EQ(out, mem);
}

TEST_F(SaveLoadTest, SavingACommittedStepFailsAndKeepsTheOldStep) {
  StateDict first;
  ASSERT_OK(first.Add("w", PatternTensor(DType::kF32, {8}, 1)));
  auto w = Writer();
  ASSERT_OK(SaveNoDist(first, *w, 7));
  StateDict second;
  ASSERT_OK(second.Add("w", PatternTensor(DType::kF32, {8}, 2)));
  Status st = SaveNoDist(second, *w, 7);
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st;
  EXPECT_NE(st.ToString().find("step 7 already exists"), std::string::npos) << st;
  EXPECT_NE(st.ToString().find("failed to prepare storage"), std::string::npos) << st;
  StateDict target = TargetLike(first);
  ASSERT_OK(LoadNoDist(target, *Reader(), 7));
  ExpectSame(first, target);
}

TEST_F(SaveLoadTest, LoadingAMissingStepIsNotFoundNamingTheStep) {
  StateDict sd;
  ASSERT_OK(sd.Add("w", PatternTensor(DType::kF32, {8}, 1)));
  auto w = Writer();
  ASSERT_OK(SaveNoDist(sd, *w, 3));
  StateDict target = TargetLike(sd);
  Status st = LoadNoDist(target, *Reader(), 4);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st;
  EXPECT_NE(st.ToString().find("step 4 not found"), std::string::npos) << st;
  EXPECT_NE(st.ToString().find("latest step is 3"), std::string::npos) << st;
}

TEST_F(SaveLoadTest, CorruptedChunkIsDataLossNamingTheFqn) {
  // A raw chunk of a recognisable pattern, so the test can find its bytes in
  // the store's SST files and flip one.
  Tensor t = Tensor::Zeros(DType::kU8, {8192}).value();
  for (int i = 0; i < 8192; ++i) t.data_as<uint8_t>()[i] = static_cast<uint8_t>((i * 7 + 3) % 251);
  StateDict sd;
  ASSERT_OK(sd.Add("layers.0.weight", t));
  ASSERT_OK(sd.Add("layers.1.weight", PatternTensor(DType::kF32, {16}, 2)));
  {
    auto w = Writer();
    ASSERT_OK(SaveNoDist(sd, *w, 0));
  }
  std::string needle(reinterpret_cast<const char*>(t.data()) + 4000, 64);
  ASSERT_TRUE(testing::FlipByteOf(store_ + "/db", ".sst", needle));
  StateDict target = TargetLike(sd);
  Status st = LoadNoDist(target, *Reader(), 0);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
  EXPECT_NE(st.ToString().find("'layers.0.weight'"), std::string::npos) << st;
  EXPECT_NE(st.ToString().find("checksum mismatch"), std::string::npos) << st;
  // The intact entry still loads alone.
  StateDict other;
  ASSERT_OK(other.Add("layers.1.weight", ZerosLike(std::get<Tensor>(*sd.Find("layers.1.weight")))));
  EXPECT_OK(LoadNoDist(other, *Reader(), 0));
}

// A load of thousands of small entries beside large ones (more than a
// small read: the workers share it, in batches of small chunks): every
// entry lands, and a damaged chunk among them is DataLoss naming its entry.
TEST_F(SaveLoadTest, ThousandsOfSmallEntriesLoadTogetherAndADamagedOneIsNamed) {
  StateDict sd;
  ASSERT_OK(sd.Add("big.0", PatternTensor(DType::kF32, {768, 1024}, 1)));  // 3 MiB each
  for (int i = 0; i < 3000; ++i) {
    ASSERT_OK(sd.Add("small." + std::to_string(i), PatternTensor(DType::kF32, {16}, static_cast<uint32_t>(i + 10))));
  }
  // In a block of its own (more than 4 KiB), with bytes the test can find.
  Tensor marked = Tensor::Zeros(DType::kU8, {8192}).value();
  for (int i = 0; i < 8192; ++i) marked.data_as<uint8_t>()[i] = static_cast<uint8_t>((i * 11 + 5) % 253);
  ASSERT_OK(sd.Add("small.marked", marked));
  for (int i = 3000; i < 6000; ++i) {
    ASSERT_OK(sd.Add("small." + std::to_string(i), PatternTensor(DType::kF32, {16}, static_cast<uint32_t>(i + 10))));
  }
  ASSERT_OK(sd.Add("big.1", PatternTensor(DType::kF32, {768, 1024}, 2)));
  {
    auto w = Writer();
    ASSERT_OK(SaveNoDist(sd, *w, 1));
  }
  StateDict target = TargetLike(sd);
  ASSERT_OK(LoadNoDist(target, *Reader(), 1));
  ExpectSame(sd, target);

  std::string needle(reinterpret_cast<const char*>(marked.data()) + 4000, 64);
  ASSERT_TRUE(testing::FlipByteOf(store_ + "/db", ".sst", needle));
  StateDict again = TargetLike(sd);
  Status st = LoadNoDist(again, *Reader(), 1);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
  EXPECT_NE(st.ToString().find("'small.marked'"), std::string::npos) << st;
}

TEST_F(SaveLoadTest, CorruptedMetadataIsDataLoss) {
  StateDict sd;
  ASSERT_OK(sd.Add("w", PatternTensor(DType::kF32, {8}, 1)));
  auto w = Writer();
  ASSERT_OK(SaveNoDist(sd, *w, 0));
  ASSERT_OK(SaveNoDist(sd, *w, 1));
  w.reset();  // release the database
  // Overwrite step 1's metadata with bytes that are not a chunk value, and
  // step 0's with a valid header over a payload that fails its checksum.
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), store_ + "/db", &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), MetadataKey(1), "garbage").ok());
    std::string v;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), MetadataKey(0), &v).ok());
    v[v.size() - 3] ^= 0x01;
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), MetadataKey(0), v).ok());
  }
  StateDict target = TargetLike(sd);
  Status st = LoadNoDist(target, *Reader(), 1);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
  EXPECT_NE(st.ToString().find("step 1: metadata"), std::string::npos) << st;
  st = LoadNoDist(target, *Reader(), 0);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
  EXPECT_NE(st.ToString().find("checksum mismatch"), std::string::npos) << st;
}

TEST_F(SaveLoadTest, BadInputLeavesTheStoreAsItWas) {
  StateDict good;
  ASSERT_OK(good.Add("w", PatternTensor(DType::kF32, {8}, 1)));
  auto w = Writer();
  ASSERT_OK(SaveNoDist(good, *w, 0));

  // A step out of range.
  Status st = SaveNoDist(good, *w, -1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("step -1 is out of range"), std::string::npos) << st;
  // A sharded tensor whose shards leave a hole.
  StateDict holes;
  ASSERT_OK(holes.Add("s", ShardedTensor::Create(DType::kF32, {10}, {{{0}, PatternTensor(DType::kF32, {4}, 1)}}).value()));
  st = SaveNoDist(holes, *w, 1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("hold 4 of 10 elements"), std::string::npos) << st;

  auto steps = Reader()->ListSteps();
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_EQ(testing::CountDataKeys(store_), 1u);
}

TEST_F(SaveLoadTest, PathThatIsAFileOrNotAStoreIsRefused) {
  std::string file = dir_.Sub("file");
  std::ofstream(file) << "hello";
  auto w = OpenStoreWriter(file);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(w.status().message().find("is a file, not a ckptdb store"), std::string::npos) << w.status();
  EXPECT_EQ(OpenStoreReader(file).status().code(), StatusCode::kFailedPrecondition);

  std::string other = dir_.Sub("photos");
  std::filesystem::create_directories(other);
  std::ofstream(other + "/cat.jpg") << "meow";
  w = OpenStoreWriter(other);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("is not a ckptdb store"), std::string::npos) << w.status();
  EXPECT_TRUE(std::filesystem::exists(other + "/cat.jpg"));
  EXPECT_FALSE(std::filesystem::exists(other + "/db"));

  auto missing = OpenStoreReader(dir_.Sub("nothing-here"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST_F(SaveLoadTest, BadStoreOptionsAreRefused) {
  StoreOptions o;
  o.chunk_bytes = 100;
  auto w = OpenStoreWriter(store_, o);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("chunk_bytes 100"), std::string::npos);
}

// Options that would fail later or mean nothing are refused when the writer
// is opened, naming the option and its value; nothing is created.
TEST_F(SaveLoadTest, OutOfRangeCompressionAndRetentionAreRefused) {
  struct Case {
    std::function<void(StoreOptions&)> set;
    std::string want;
  };
  const Case cases[] = {
      {[](StoreOptions& o) { o.compression = static_cast<Compression>(7); }, "StoreOptions.compression 7"},
      {[](StoreOptions& o) { o.compression = static_cast<Compression>(-1); }, "StoreOptions.compression -1"},
      {[](StoreOptions& o) { o.retention.keep_last = -1; }, "StoreOptions.retention.keep_last is -1"},
      {[](StoreOptions& o) { o.retention.keep_every = -5; }, "StoreOptions.retention.keep_every is -5"},
  };
  for (const Case& c : cases) {
    StoreOptions o;
    c.set(o);
    auto w = OpenStoreWriter(store_, o);
    ASSERT_FALSE(w.ok()) << c.want;
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument) << w.status();
    EXPECT_NE(w.status().message().find(c.want), std::string::npos) << w.status();
  }
  EXPECT_FALSE(std::filesystem::exists(store_));
  for (Compression ok : {Compression::kNone, Compression::kZstd, Compression::kAuto}) {
    StoreOptions o;
    o.compression = ok;
    o.retention.keep_last = 2;
    EXPECT_TRUE(OpenStoreWriter(store_, o).ok());
  }
}

// A write failure: nothing is committed and nothing is left behind.
TEST_F(SaveLoadTest, WriteFailureCommitsNothingAndLeavesNoData) {
  auto w = Writer();
  testing::FaultyWriter faulty(w.get());
  faulty.on_write = [](const std::vector<WriteItem>&) { return Status::IOError("injected: disk full"); };
  StateDict sd;
  ASSERT_OK(sd.Add("w", PatternTensor(DType::kF32, {64}, 1)));
  Status st = SaveNoDist(sd, faulty, 0);
  EXPECT_EQ(st.code(), StatusCode::kIOError) << st;
  EXPECT_NE(st.ToString().find("Failed to write data"), std::string::npos) << st;
  EXPECT_NE(st.ToString().find("rank 0: IOError: injected: disk full"), std::string::npos) << st;
  EXPECT_EQ(faulty.aborts, 1);
  // A finish failure after the data was written: also nothing.
  faulty.on_write = nullptr;
  faulty.on_finish = [] { return Status::Unavailable("injected: commit lost"); };
  st = SaveNoDist(sd, faulty, 0);
  EXPECT_NE(st.ToString().find("Failed to finish checkpoint"), std::string::npos) << st;
  w.reset();
  EXPECT_EQ(testing::CountDataKeys(store_), 0u);
  auto steps = Reader()->ListSteps();
  ASSERT_TRUE(steps.ok());
  EXPECT_TRUE(steps->empty());
  EXPECT_TRUE(std::filesystem::is_empty(store_ + "/staging"));
}

TEST_F(SaveLoadTest, LoadValidatesTheTargetBeforeReading) {
  StateDict sd;
  ASSERT_OK(sd.Add("w", PatternTensor(DType::kF32, {4, 5}, 1)));
  ASSERT_OK(sd.AddBytes("b", "x"));
  auto w = Writer();
  ASSERT_OK(SaveNoDist(sd, *w, 0));
  auto r = Reader();
  struct Case {
    const char* fragment;
    StateDict target;
  };
  std::vector<Case> cases;
  {
    StateDict t;
    ASSERT_OK(t.Add("missing", Tensor::Zeros(DType::kF32, {4, 5}).value()));
    cases.push_back({"entry 'missing' is not in step 0", std::move(t)});
  }
  {
    StateDict t;
    ASSERT_OK(t.Add("w", Tensor::Zeros(DType::kF16, {4, 5}).value()));
    cases.push_back({"entry 'w': dtype mismatch: the target is f16, the step holds f32", std::move(t)});
  }
  {
    StateDict t;
    ASSERT_OK(t.Add("w", Tensor::Zeros(DType::kF32, {5, 4}).value()));
    cases.push_back({"entry 'w': shape mismatch: the target is [5, 4], the step holds [4, 5]", std::move(t)});
  }
  {
    StateDict t;
    ASSERT_OK(t.AddBytes("w", ""));
    cases.push_back({"entry 'w': kind mismatch: the target is bytes, the step holds tensor", std::move(t)});
  }
  {
    StateDict t;
    ASSERT_OK(t.Add("b", Tensor::Zeros(DType::kU8, {1}).value()));
    cases.push_back({"entry 'b': kind mismatch: the target is tensor, the step holds bytes", std::move(t)});
  }
  for (Case& c : cases) {
    Status st = LoadNoDist(c.target, *r, 0);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.ToString().find(c.fragment), std::string::npos) << st;
  }
}

// Loading into another sharding, within one process: the saved pieces of a
// sharded tensor are cut and reassembled.
TEST_F(SaveLoadTest, LoadsIntoAnotherShardingAndReadsOnlyNeededChunks) {
  StoreOptions o;
  o.chunk_bytes = 4096;
  Tensor full = PatternTensor(DType::kF32, {64, 32}, 3);  // 8 KiB per 16 rows
  auto rows = [&](int64_t begin, int64_t n) {
    return Tensor::Copy(DType::kF32, {n, 32}, full.data_as<float>() + begin * 32, n * 32 * 4).value();
  };
  StateDict sd;
  ASSERT_OK(sd.Add("w", ShardedTensor::Create(DType::kF32, {64, 32},
                                              {{{0, 0}, rows(0, 16)}, {{16, 0}, rows(16, 48)}})
                            .value()));
  auto w = Writer(o);
  ASSERT_OK(SaveNoDist(sd, *w, 0));
  auto r = Reader();

  // As one plain tensor.
  StateDict whole;
  ASSERT_OK(whole.Add("w", ZerosLike(full)));
  ASSERT_OK(LoadNoDist(whole, *r, 0));
  EXPECT_TRUE(std::get<Tensor>(*whole.Find("w")).BitwiseEquals(full));

  // As column shards.
  Tensor left = Tensor::Zeros(DType::kF32, {64, 10}).value();
  Tensor right = Tensor::Zeros(DType::kF32, {64, 22}).value();
  StateDict cols;
  ASSERT_OK(cols.Add("w", ShardedTensor::Create(DType::kF32, {64, 32}, {{{0, 0}, left}, {{0, 10}, right}}).value()));
  ASSERT_OK(LoadNoDist(cols, *r, 0));
  for (int i = 0; i < 64; ++i) {
    for (int j = 0; j < 32; ++j) {
      float want = full.data_as<float>()[i * 32 + j];
      float got = j < 10 ? left.data_as<float>()[i * 10 + j] : right.data_as<float>()[i * 22 + j - 10];
      ASSERT_EQ(want, got) << i << "," << j;
    }
  }

  // Rows 20..24 live in one 4 KiB chunk of the second saved shard.
  Tensor narrow = Tensor::Zeros(DType::kF32, {4, 32}).value();
  StateDict part;
  ASSERT_OK(part.Add("w", ShardedTensor::Create(DType::kF32, {64, 32}, {{{20, 0}, narrow}}).value()));
  LoadStats stats;
  ASSERT_OK(LoadNoDist(part, *r, 0, &stats));
  EXPECT_EQ(stats.chunks_read, 1u);
  EXPECT_EQ(0, std::memcmp(narrow.data(), full.data_as<float>() + 20 * 32, narrow.nbytes()));
}

TEST_F(SaveLoadTest, LoadWholeAssemblesEveryEntry) {
  StateDict sd;
  Tensor a = PatternTensor(DType::kI16, {6, 3}, 1);
  ASSERT_OK(sd.Add("a", ShardedTensor::Create(DType::kI16, {6, 3},
                                              {{{0, 0}, Tensor::Copy(DType::kI16, {2, 3}, a.data(), 12).value()},
                                               {{2, 0}, Tensor::Copy(DType::kI16, {4, 3}, a.data_as<int16_t>() + 6, 24).value()}})
                            .value()));
  ASSERT_OK(sd.AddBytes("b", "bytes"));
  auto w = Writer();
  ASSERT_OK(SaveNoDist(sd, *w, 9));
  auto got = LoadWhole(*Reader(), 9);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(std::get<Tensor>(*got->Find("a")).BitwiseEquals(a));
  EXPECT_EQ(std::get<Bytes>(*got->Find("b")).data, "bytes");
  auto none = LoadWhole(*Reader(), 9, {"nope"});
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
}

// A bytes entry records how its bytes encode the value (AddBytes: raw), and
// a load hands the encoding back with the bytes, whatever the target held.
TEST_F(SaveLoadTest, BytesEntriesRecordTheirEncoding) {
  StateDict sd;
  ASSERT_OK(sd.AddBytes("raw", std::string("\x80\x04K\x05.", 5)));  // bytes that happen to be a pickle
  ASSERT_OK(sd.AddBytes("obj", std::string("\x80\x04K\x05.", 5), BytesEncoding::kPickle));
  ASSERT_OK(sd.Add("ts", Bytes{"PK", BytesEncoding::kTorchSave}));
  ASSERT_OK(sd.Add("w", PatternTensor(DType::kF32, {4}, 1)));
  auto w = Writer();
  ASSERT_OK(SaveNoDist(sd, *w, 3));
  auto md = Reader()->ReadMetadata(3);
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_EQ(md->Find("raw")->bytes_encoding, BytesEncoding::kRaw);
  EXPECT_EQ(md->Find("obj")->bytes_encoding, BytesEncoding::kPickle);
  EXPECT_EQ(md->Find("ts")->bytes_encoding, BytesEncoding::kTorchSave);
  EXPECT_EQ(md->Find("w")->bytes_encoding, BytesEncoding::kUnrecorded);

  StateDict target;
  ASSERT_OK(target.Add("raw", Bytes{"placeholder", BytesEncoding::kPickle}));
  ASSERT_OK(target.Add("obj", Bytes{}));
  ASSERT_OK(target.Add("ts", Bytes{}));
  ASSERT_OK(LoadNoDist(target, *Reader(), 3));
  EXPECT_EQ(std::get<Bytes>(*target.Find("raw")).data, std::string("\x80\x04K\x05.", 5));
  EXPECT_EQ(std::get<Bytes>(*target.Find("raw")).encoding, BytesEncoding::kRaw);
  EXPECT_EQ(std::get<Bytes>(*target.Find("obj")).encoding, BytesEncoding::kPickle);
  EXPECT_EQ(std::get<Bytes>(*target.Find("ts")).encoding, BytesEncoding::kTorchSave);
  auto whole = LoadWhole(*Reader(), 3, {"obj"});
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(std::get<Bytes>(*whole->Find("obj")).encoding, BytesEncoding::kPickle);

  // An encoding this build does not know is refused, naming the entry.
  StateDict bad;
  ASSERT_OK(bad.Add("x", Bytes{"?", static_cast<BytesEncoding>(9)}));
  Status st = SaveNoDist(bad, *w, 4);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.ToString().find("entry 'x' has unknown bytes encoding 9"), std::string::npos) << st;
}

// Store format 6: a step of many entries round-trips whole, and one entry
// loads alone (a target of it, LoadOptions::keys, LoadWhole) from metadata
// that holds only its pieces.
TEST_F(SaveLoadTest, ManyEntriesLoadWholeOrOneByOne) {
  StateDict sd;
  for (int i = 0; i < 40; ++i) {
    const std::string fqn = "layer." + std::to_string(i);
    if (i % 5 == 4) {
      ASSERT_OK(sd.AddBytes(fqn, "bytes " + std::to_string(i), BytesEncoding::kPickle));
    } else {
      ASSERT_OK(sd.Add(fqn, PatternTensor(i % 2 ? DType::kBF16 : DType::kF32, {3, 5}, i)));
    }
  }
  RoundTrip(sd, 9);
  auto r = Reader();
  auto md = r->ReadMetadataOf(9, {"layer.7"});
  ASSERT_TRUE(md.ok()) << md.status();
  ASSERT_EQ(md->entries.size(), 40u);
  for (const EntryMetadata& e : md->entries) {
    EXPECT_EQ(e.pieces_omitted, e.fqn != "layer.7") << e.fqn;
    EXPECT_EQ(e.pieces.size(), e.fqn == "layer.7" ? 1u : 0u) << e.fqn;
  }
  StateDict one;
  ASSERT_OK(one.Add("layer.7", ZerosLike(std::get<Tensor>(*sd.Find("layer.7")))));
  LoadStats stats;
  LoadOptions lo;
  lo.step = 9;
  lo.no_dist = true;
  ASSERT_OK(Load(one, *r, lo, &stats));
  EXPECT_TRUE(std::get<Tensor>(*one.Find("layer.7")).BitwiseEquals(std::get<Tensor>(*sd.Find("layer.7"))));
  EXPECT_EQ(stats.chunks_read, 1u);
  StateDict all = TargetLike(sd);
  lo.keys = {"layer.9"};
  ASSERT_OK(Load(all, *r, lo));
  EXPECT_EQ(std::get<Bytes>(*all.Find("layer.9")).data, "bytes 9");
  EXPECT_EQ(std::get<Bytes>(*all.Find("layer.9")).encoding, BytesEncoding::kPickle);
  EXPECT_EQ(std::get<Bytes>(*all.Find("layer.14")).data, "");  // not loaded
  auto whole = LoadWhole(*r, 9, {"layer.3", "layer.4"});
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(std::get<Tensor>(*whole->Find("layer.3")).BitwiseEquals(std::get<Tensor>(*sd.Find("layer.3"))));
  EXPECT_EQ(std::get<Bytes>(*whole->Find("layer.4")).data, "bytes 4");
  auto everything = LoadWhole(*r, 9);
  ASSERT_TRUE(everything.ok()) << everything.status();
  ExpectSame(sd, *everything);
  // A name the step lacks is still NotFound (and allow_missing skips it).
  StateDict missing;
  ASSERT_OK(missing.Add("nope", Tensor::Zeros(DType::kF32, {1}).value()));
  lo.keys = {};
  EXPECT_EQ(Load(missing, *r, lo).code(), StatusCode::kNotFound);
}

// A step written before encodings and annotations were recorded (its
// metadata rewritten without them) loads as before: the same bytes, the
// encoding unrecorded, no annotations.
TEST_F(SaveLoadTest, StepsWrittenWithoutEncodingsOrAnnotationsStillLoad) {
  StateDict sd;
  ASSERT_OK(sd.AddBytes("b", "loader position 17", BytesEncoding::kPickle));
  ASSERT_OK(sd.Add("w", PatternTensor(DType::kF32, {8}, 1)));
  auto w = Writer();
  SaveOptions o;
  o.step = 0;
  o.no_dist = true;
  o.annotations["app"] = "x";
  ASSERT_OK(Save(sd, *w, o));
  w.reset();  // release the database
  {
    auto md = Reader()->ReadMetadata(0);
    ASSERT_TRUE(md.ok()) << md.status();
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), store_ + "/db", &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    // (Written as before store format 6 too: every piece in the M record.)
    proto::Metadata pm;
    ToProto(*md, &pm);
    for (proto::Entry& e : *pm.mutable_entries()) e.clear_bytes_encoding();
    pm.clear_annotations();
    auto old = FromProto(pm);
    ASSERT_TRUE(old.ok()) << old.status();
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), MetadataKey(0), EncodeMetadataValue(*old)).ok());
  }
  auto md = Reader()->ReadMetadata(0);
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_EQ(md->Find("b")->bytes_encoding, BytesEncoding::kUnrecorded);
  EXPECT_TRUE(md->annotations.empty());
  StateDict target = TargetLike(sd);
  ASSERT_OK(LoadNoDist(target, *Reader(), 0));
  ExpectSame(sd, target);
  EXPECT_EQ(std::get<Bytes>(*target.Find("b")).encoding, BytesEncoding::kUnrecorded);
}

// SaveOptions::annotations are stored with the step as they are (only the
// coordinator's); an empty name is refused and commits nothing.
TEST_F(SaveLoadTest, AnnotationsAreStoredWithTheStep) {
  StateDict sd;
  ASSERT_OK(sd.Add("w", PatternTensor(DType::kF32, {4}, 1)));
  auto w = Writer();
  SaveOptions o;
  o.step = 1;
  o.no_dist = true;
  o.annotations["torch.distributed.checkpoint"] = std::string("{\"a\":1}\0\xff", 9);
  o.annotations["other"] = "";
  ASSERT_OK(Save(sd, *w, o));
  auto md = Reader()->ReadMetadata(1);
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_EQ(md->annotations, o.annotations);

  o.step = 2;
  o.annotations[""] = "nameless";
  Status st = Save(sd, *w, o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.ToString().find("annotations: an empty name"), std::string::npos) << st;
  auto steps = Reader()->ListSteps();
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(steps->size(), 1u);
}

}  // namespace
}  // namespace ckptdb
