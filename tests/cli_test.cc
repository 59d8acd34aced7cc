// The `ckptdb` command, run as a user would: output (golden text and JSON)
// and exit codes, on a small store the test builds.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <thread>

#include <rocksdb/db.h>

#include "ckptdb/ckptdb.h"
#include "format/keys.h"
#include "format/metadata_codec.h"
#include "test_util.h"

namespace ckptdb {
namespace {

using CliRun = testing::CommandResult;

// stdout and stderr of `ckptdb ARGS`, unless asked for stdout alone.
CliRun Ckptdb(const std::string& args, bool stdout_only = false) {
  return testing::RunCommand(std::string(CKPTDB_CLI) + " " + args + (stdout_only ? " 2>/dev/null" : " 2>&1"));
}

// Commit times vary: replace them by placeholders of the same width.
std::string MaskTimes(const std::string& s) {
  static const std::regex iso(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)");
  static const std::regex ms(R"("created_unix_ms": \d+)");
  return std::regex_replace(std::regex_replace(s, iso, "YYYY-MM-DDTHH:MM:SSZ"), ms, "\"created_unix_ms\": MS");
}

Tensor F32(Shape shape, std::vector<float> v) {
  return Tensor::Copy(DType::kF32, std::move(shape), v.data(), v.size() * 4).value();
}

// Step 4 and step 12 of a small training run; `later` is step 12, which
// changes some values, the dtype of one entry, and adds and drops one.
StateDict MakeStep(bool later) {
  StateDict sd;
  EXPECT_OK(sd.Add("layer.weight", F32({2, 3}, {0.5f, later ? -1.0f : -1.25f, 3.0f, 1e-8f,
                                                later ? 100.5f : 100.0f, -0.0f})));
  std::vector<uint16_t> bf = {0x3f80, 0xc000, 0x3e80};  // 1, -2, 0.25 in bf16
  EXPECT_OK(sd.Add("layer.bias", Tensor::Copy(DType::kBF16, {3}, bf.data(), 6).value()));
  std::vector<int64_t> big(5000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<int64_t>(i);
  EXPECT_OK(sd.Add("counter", Tensor::Copy(DType::kI64, {5000}, big.data(), big.size() * 8).value()));
  int64_t step = later ? 12 : 7;
  EXPECT_OK(sd.Add("step", Tensor::Copy(DType::kI64, {}, &step, 8).value()));
  EXPECT_OK(sd.AddBytes("meta", later ? "{\"lr\": 0.2}\x01" : "{\"lr\": 0.1}\x01"));
  // Rows [0, 2) and [2, 4) of a [4, 2] tensor holding 0..7.
  EXPECT_OK(sd.Add("emb", ShardedTensor::Create(DType::kF32, {4, 2},
                                                {Shard{{0, 0}, F32({2, 2}, {0, 1, 2, 3})},
                                                 Shard{{2, 0}, F32({2, 2}, {4, 5, 6, 7})}})
                              .value()));
  uint8_t mask[3] = {1, 0, 1};
  EXPECT_OK(sd.Add("mask", Tensor::Copy(later ? DType::kBool : DType::kU8, {3}, mask, 3).value()));
  if (later) {
    uint16_t h[2] = {0x3c00, 0x4000};  // 1, 2 in f16
    EXPECT_OK(sd.Add("new.entry", Tensor::Copy(DType::kF16, {2}, h, 4).value()));
  } else {
    int32_t v[2] = {1, 2};
    EXPECT_OK(sd.Add("old.entry", Tensor::Copy(DType::kI32, {2}, v, 8).value()));
  }
  return sd;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto w = OpenStoreWriter(store_);
    ASSERT_TRUE(w.ok());
    ASSERT_OK(testing::SaveNoDist(MakeStep(false), **w, 4));
    ASSERT_OK(testing::SaveNoDist(MakeStep(true), **w, 12));
    ASSERT_TRUE((*w)->Tag(12, "best").ok());
  }
  std::vector<int64_t> StepsInStore() {
    std::vector<int64_t> out;
    auto r = OpenStoreReader(store_);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return out;
    auto steps = (*r)->ListSteps();
    EXPECT_TRUE(steps.ok()) << steps.status();
    if (!steps.ok()) return out;
    for (const StepInfo& s : *steps) out.push_back(s.step);
    return out;
  }
  testing::TempDir dir_;
  std::string store_ = dir_.Sub("store");
};

TEST_F(CliTest, LsListsStepsWithTags) {
  CliRun r = Ckptdb("ls " + store_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(MaskTimes(r.out),
            "STEP  CREATED               WORLD  ENTRIES  BYTES     ADDED     TAGS\n"
            "4     YYYY-MM-DDTHH:MM:SSZ  1      8        39.2 KiB  39.3 KiB\n"
            // counter, layer.bias and emb are unchanged: step 12 shares them.
            "12    YYYY-MM-DDTHH:MM:SSZ  1      8        39.1 KiB  131 B     best\n");
  CliRun j = Ckptdb("ls " + store_ + " --json");
  ASSERT_EQ(j.code, 0) << j.out;
  EXPECT_EQ(MaskTimes(j.out),
            "[\n"
            " {\"step\": 4, \"created\": \"YYYY-MM-DDTHH:MM:SSZ\", \"created_unix_ms\": MS, \"world_size\": 1, "
            "\"entries\": 8, \"bytes\": 40093, \"stored_bytes\": 40237, \"tags\": [], \"metrics\": {}, \"note\": \"\"},\n"
            " {\"step\": 12, \"created\": \"YYYY-MM-DDTHH:MM:SSZ\", \"created_unix_ms\": MS, \"world_size\": 1, "
            "\"entries\": 8, \"bytes\": 40089, \"stored_bytes\": 131, \"tags\": [\"best\"], \"metrics\": {}, \"note\": \"\"}\n"
            "]\n");
}

TEST_F(CliTest, LsStepListsEntriesAndShards) {
  CliRun r = Ckptdb("ls " + store_ + " 4");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out,
            "FQN           KIND            DTYPE  SHAPE   SHARDS  BYTES\n"
            "layer.weight  tensor          f32    [2, 3]  1       24 B\n"
            "layer.bias    tensor          bf16   [3]     1       6 B\n"
            "counter       tensor          i64    [5000]  1       39.1 KiB\n"
            "step          tensor          i64    []      1       8 B\n"
            "meta          bytes           -      -       1       12 B\n"
            "emb           sharded_tensor  f32    [4, 2]  2       32 B\n"
            "mask          tensor          u8     [3]     1       3 B\n"
            "old.entry     tensor          i32    [2]     1       8 B\n");
  CliRun s = Ckptdb("ls " + store_ + " best --shards");
  ASSERT_EQ(s.code, 0) << s.out;
  EXPECT_EQ(s.out,
            "FQN           SHARD  OFFSETS  SIZES   RANK  ITEM  CHUNKS  SHARED  BYTES     ADDED\n"
            "layer.weight  0      [0, 0]   [2, 3]  0     0     1       0       24 B      40 B\n"
            "layer.bias    0      [0]      [3]     0     1     1       1       6 B       0 B\n"
            "counter       0      [0]      [5000]  0     2     1       1       39.1 KiB  0 B\n"
            "step          0      []       []      0     3     1       0       8 B       24 B\n"
            "meta          0      [0]      [12]    0     4     1       0       12 B      28 B\n"
            "emb           0      [0, 0]   [2, 2]  0     5     1       1       16 B      0 B\n"
            "emb           1      [2, 0]   [2, 2]  0     6     1       1       16 B      0 B\n"
            "mask          0      [0]      [3]     0     7     1       0       3 B       19 B\n"
            "new.entry     0      [0]      [2]     0     8     1       0       4 B       20 B\n");
  CliRun j = Ckptdb("ls " + store_ + " latest --json --shards");
  ASSERT_EQ(j.code, 0) << j.out;
  EXPECT_NE(j.out.find("{\"fqn\": \"emb\", \"kind\": \"sharded_tensor\", \"dtype\": \"f32\", \"shape\": [4,2], "
                       "\"shards\": 2, \"bytes\": 32, \"stored_bytes\": 0, \"pieces\": [{\"offsets\": [0,0], "
                       "\"sizes\": [2,2], \"rank\": 0, \"item\": 5, \"chunks\": 1, \"chunk_bytes\": 4194304, "
                       "\"chunk_shape\": [], \"bytes\": 16, \"stored_bytes\": 0, \"shared_chunks\": 1}, {\"offsets\": [2,0], \"sizes\": [2,2], \"rank\": 0, "
                       "\"item\": 6, \"chunks\": 1, \"chunk_bytes\": 4194304, \"chunk_shape\": [], \"bytes\": 16, \"stored_bytes\": 0, "
                       "\"shared_chunks\": 1}]}"),
            std::string::npos)
      << j.out;
}

TEST_F(CliTest, CatFormatsValuesPerDType) {
  CliRun r = Ckptdb("cat " + store_ + " 4 layer.weight");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "layer.weight: f32 [2, 3]\n[[0.5, -1.25, 3],\n [9.99999994e-09, 100, -0]]\n");
  EXPECT_EQ(Ckptdb("cat " + store_ + " latest layer.bias").out, "layer.bias: bf16 [3]\n[1, -2, 0.25]\n");
  EXPECT_EQ(Ckptdb("cat " + store_ + " 4 step").out, "step: i64 []\n7\n");
  EXPECT_EQ(Ckptdb("cat " + store_ + " 4 counter").out, "counter: i64 [5000]\n[0, 1, 2, ..., 4997, 4998, 4999]\n");
  EXPECT_EQ(Ckptdb("cat " + store_ + " 4 meta").out, "meta: bytes, 12 bytes\n{\"lr\": 0.1}\\x01\n");
  EXPECT_EQ(Ckptdb("cat " + store_ + " best emb").out, "emb: f32 [4, 2]\n[[0, 1],\n [2, 3],\n [4, 5],\n [6, 7]]\n");
  EXPECT_EQ(Ckptdb("cat " + store_ + " best mask").out, "mask: bool [3]\n[True, False, True]\n");
  EXPECT_EQ(Ckptdb("cat " + store_ + " best new.entry").out, "new.entry: f16 [2]\n[1, 2]\n");
}

// cat reads only the pieces of the entry it shows: with another entry's
// pieces record gone, an entry still prints (and the damaged one is named).
TEST(CliCat, ReadsOnlyThePiecesOfItsEntry) {
  testing::TempDir dir;
  const std::string store = dir.Sub("s");
  {
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok()) << w.status();
    StateDict sd;
    ASSERT_TRUE(sd.Add("a", testing::PatternTensor(DType::kI32, {3}, 1)).ok());
    ASSERT_TRUE(sd.Add("b", testing::PatternTensor(DType::kI32, {3}, 2)).ok());
    ASSERT_TRUE(testing::SaveNoDist(sd, **w, 1).ok());
  }
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), store + "/db", &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), PiecesKey(1, 1)).ok());  // b's pieces
  }
  CliRun a = Ckptdb("cat " + store + " 1 a");
  EXPECT_EQ(a.code, 0) << a.out;
  EXPECT_EQ(a.out.rfind("a: i32 [3]\n", 0), 0u) << a.out;
  CliRun b = Ckptdb("cat " + store + " 1 b");
  EXPECT_NE(b.code, 0) << b.out;
  EXPECT_NE(b.out.find("'b'"), std::string::npos) << b.out;
}

// Steps of two entries: "a" (i32 [3], holding `a0`, a0 + 1, a0 + 2) and
// "b" (f32 of `b_rows` rows of 2, in two shards).
void SaveTwoEntries(const std::string& store, int64_t step, int32_t a0, int64_t b_rows) {
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok()) << w.status();
  StateDict sd;
  std::vector<int32_t> a = {a0, a0 + 1, a0 + 2};
  ASSERT_OK(sd.Add("a", Tensor::Copy(DType::kI32, {3}, a.data(), 12).value()));
  const int64_t half = b_rows / 2;
  std::vector<float> top(static_cast<size_t>(half * 2), 1.0f), bottom(static_cast<size_t>((b_rows - half) * 2), 2.0f);
  ASSERT_OK(sd.Add("b", ShardedTensor::Create(DType::kF32, {b_rows, 2},
                                              {Shard{{0, 0}, F32({half, 2}, top)},
                                               Shard{{half, 0}, F32({b_rows - half, 2}, bottom)}})
                            .value()));
  ASSERT_OK(testing::SaveNoDist(sd, **w, step));
}

// Deletes records of a store (closed) by key.
void DeleteKeys(const std::string& store, const std::vector<std::string>& keys) {
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), store + "/db", &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  for (const std::string& k : keys) ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), k).ok());
}

// ls, info STEP and info STEP FQN read the step's summary and at most the
// entry they show: with another entry's pieces record gone, they still
// work and print what they did; the commands that read every entry (ls
// --shards, verify, export) name the damaged entry, and verify still checks
// the others.
TEST(CliAtScale, ListingsReadNoOtherEntrysPieces) {
  testing::TempDir dir;
  const std::string store = dir.Sub("s");
  SaveTwoEntries(store, 1, 10, 4);
  const std::string entries = Ckptdb("ls " + store + " 1").out;
  const std::string entries_json = Ckptdb("ls " + store + " 1 --json").out;
  const std::string step_info = Ckptdb("info " + store + " 1").out;
  DeleteKeys(store, {PiecesKey(1, 1)});  // b's pieces
  EXPECT_EQ(entries,
            "FQN  KIND            DTYPE  SHAPE   SHARDS  BYTES\n"
            "a    tensor          i32    [3]     1       12 B\n"
            "b    sharded_tensor  f32    [4, 2]  2       32 B\n");
  CliRun ls = Ckptdb("ls " + store + " 1");
  EXPECT_EQ(ls.code, 0) << ls.out;
  EXPECT_EQ(ls.out, entries);
  CliRun ls_json = Ckptdb("ls " + store + " 1 --json");
  EXPECT_EQ(ls_json.code, 0) << ls_json.out;
  EXPECT_EQ(ls_json.out, entries_json);
  EXPECT_NE(entries_json.find("{\"fqn\": \"b\", \"kind\": \"sharded_tensor\", \"dtype\": \"f32\", \"shape\": [4,2], "
                              "\"shards\": 2, \"bytes\": 32, \"stored_bytes\": "),
            std::string::npos)
      << entries_json;
  CliRun steps = Ckptdb("ls " + store);
  EXPECT_EQ(steps.code, 0) << steps.out;
  EXPECT_NE(steps.out.find("\n1 "), std::string::npos) << steps.out;
  CliRun info = Ckptdb("info " + store + " 1");
  EXPECT_EQ(info.code, 0) << info.out;
  EXPECT_EQ(info.out, step_info);
  CliRun a = Ckptdb("info " + store + " 1 a");
  EXPECT_EQ(a.code, 0) << a.out;
  EXPECT_EQ(a.out,
            "step    1\n"
            "entry   a\n"
            "kind    tensor\n"
            "dtype   i32\n"
            "shape   [3]\n"
            "shards  1 (written by 1 rank)\n"
            "chunks  1\n"
            "bytes   12 B\n"
            "added   28 B\n");
  EXPECT_EQ(Ckptdb("info " + store + " 1 a --json").out,
            "{\"step\": 1, \"fqn\": \"a\", \"kind\": \"tensor\", \"dtype\": \"i32\", \"shape\": [3], \"shards\": 1, "
            "\"ranks\": 1, \"chunks\": 1, \"shared_chunks\": 0, \"bytes\": 12, \"stored_bytes\": 28}\n");
  for (const std::string& args : {"info " + store + " 1 b", "ls " + store + " 1 --shards"}) {
    CliRun b = Ckptdb(args);
    EXPECT_EQ(b.code, 1) << args << ": " << b.out;
    EXPECT_NE(b.out.find("the pieces record of entry 'b' of step 1 is missing"), std::string::npos) << b.out;
  }
  CliRun missing = Ckptdb("info " + store + " 1 c");
  EXPECT_EQ(missing.code, 1) << missing.out;
  EXPECT_NE(missing.out.find("entry 'c' is not in step 1"), std::string::npos) << missing.out;
  // verify names b, and still reads and checks a's chunk.
  CliRun v = Ckptdb("verify " + store + " 1 --json");
  EXPECT_EQ(v.code, 1) << v.out;
  EXPECT_NE(v.out.find("\"ok\": false, \"entries\": 2, \"chunks\": 1, "), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("the pieces record of entry 'b' of step 1 is missing"), std::string::npos) << v.out;
  EXPECT_EQ(v.out.find("entry 'a'"), std::string::npos) << v.out;
  const std::string out = dir.Sub("out.safetensors");
  CliRun e = Ckptdb("export " + store + " 1 --format safetensors " + out);
  EXPECT_EQ(e.code, 1) << e.out;
  EXPECT_NE(e.out.find("entry 'b'"), std::string::npos) << e.out;
  EXPECT_FALSE(std::filesystem::exists(out));
}

// diff finds added, removed and reshaped entries from the steps' summaries
// and reads the pieces of an entry only to compare its values: with a
// reshaped entry's pieces records gone in both steps, diff still reports
// it, and compares the other.
TEST(CliAtScale, DiffReadsPiecesOnlyToCompareValues) {
  testing::TempDir dir;
  const std::string store = dir.Sub("s");
  SaveTwoEntries(store, 1, 10, 4);
  SaveTwoEntries(store, 2, 11, 6);
  DeleteKeys(store, {PiecesKey(1, 1), PiecesKey(2, 1)});
  CliRun d = Ckptdb("diff " + store + " 1 2");
  EXPECT_EQ(d.code, 0) << d.out;
  EXPECT_EQ(d.out,
            "step 1 -> step 2: 0 added, 0 removed, 2 changed, 0 unchanged\n"
            "~  a  3 of 3 elements differ, max abs diff 1\n"
            "~  b  sharded_tensor f32 [4, 2] -> sharded_tensor f32 [6, 2]\n");
  // An entry whose values need comparing and whose pieces are unreadable
  // is named.
  SaveTwoEntries(store, 3, 11, 6);
  DeleteKeys(store, {PiecesKey(3, 0)});
  CliRun bad = Ckptdb("diff " + store + " 2 3");
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.out.find("the pieces record of entry 'a' of step 3 is missing"), std::string::npos) << bad.out;
}

// A format-6 step saved before its M record stated each entry's piece count
// and stored bytes: ls STEP reads them from the entries' pieces records
// instead, and prints the same.
TEST(CliAtScale, LsStepOfAStepWithoutRecordedTotals) {
  testing::TempDir dir;
  const std::string store = dir.Sub("s");
  SaveTwoEntries(store, 1, 10, 4);
  const std::string entries = Ckptdb("ls " + store + " 1").out;
  const std::string entries_json = Ckptdb("ls " + store + " 1 --json").out;
  {
    auto r = OpenStoreReader(store);
    ASSERT_TRUE(r.ok()) << r.status();
    auto md = (*r)->ReadStepSummary(1);
    ASSERT_TRUE(md.ok()) << md.status();
    ASSERT_TRUE(md->entries[1].pieces_omitted);
    for (EntryMetadata& e : md->entries) e.recorded_totals.reset();
    r->reset();
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), store + "/db", &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), MetadataKey(1), EncodeMetadataRecord(*md)).ok());
  }
  EXPECT_EQ(Ckptdb("ls " + store + " 1").out, entries);
  EXPECT_EQ(Ckptdb("ls " + store + " 1 --json").out, entries_json);
  DeleteKeys(store, {PiecesKey(1, 1)});
  CliRun ls = Ckptdb("ls " + store + " 1");
  EXPECT_EQ(ls.code, 1) << ls.out;
  EXPECT_NE(ls.out.find("the pieces record of entry 'b' of step 1 is missing"), std::string::npos) << ls.out;
}

TEST_F(CliTest, CatSlicesReadsRawAndJson) {
  EXPECT_EQ(Ckptdb("cat " + store_ + " 4 layer.weight --slice 1,0:2").out,
            "layer.weight[1,0:2]: f32 [2]\n[9.99999994e-09, 100]\n");
  EXPECT_EQ(Ckptdb("cat " + store_ + " 4 layer.weight --slice :,::2").out,
            "layer.weight[:,::2]: f32 [2, 2]\n[[0.5, 3],\n [9.99999994e-09, -0]]\n");
  // A slice across the two shards of a sharded tensor.
  EXPECT_EQ(Ckptdb("cat " + store_ + " 4 emb --slice 1:3,-1").out, "emb[1:3,-1]: f32 [2]\n[3, 5]\n");
  EXPECT_EQ(Ckptdb("cat " + store_ + " 4 counter --slice=4990:").out,
            "counter[4990:]: i64 [10]\n[4990, 4991, 4992, 4993, 4994, 4995, 4996, 4997, 4998, 4999]\n");
  EXPECT_EQ(Ckptdb("cat " + store_ + " 4 counter --slice 10:5").out, "counter[10:5]: i64 [0]\n[]\n");
  CliRun raw = Ckptdb("cat " + store_ + " 4 emb --raw", /*stdout_only=*/true);
  ASSERT_EQ(raw.code, 0);
  ASSERT_EQ(raw.out.size(), 32u);
  std::vector<float> v(8);
  std::memcpy(v.data(), raw.out.data(), 32);
  EXPECT_EQ(v, (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(Ckptdb("cat " + store_ + " 4 meta --raw", true).out, std::string("{\"lr\": 0.1}\x01"));
  EXPECT_EQ(Ckptdb("cat " + store_ + " 4 layer.weight --json").out,
            "{\"fqn\": \"layer.weight\", \"kind\": \"tensor\", \"dtype\": \"f32\", \"shape\": [2,3], "
            "\"values\": [[0.5, -1.25, 3], [9.99999994e-09, 100, -0]]}\n");
  EXPECT_EQ(Ckptdb("cat " + store_ + " best mask --json --slice 1:").out,
            "{\"fqn\": \"mask\", \"kind\": \"tensor\", \"dtype\": \"bool\", \"shape\": [2], \"slice\": \"1:\", "
            "\"values\": [false, true]}\n");
  EXPECT_EQ(Ckptdb("cat " + store_ + " 4 meta --json").out,
            "{\"fqn\": \"meta\", \"kind\": \"bytes\", \"length\": 12, \"text\": \"{\\\"lr\\\": 0.1}\\u0001\"}\n");
}

TEST_F(CliTest, CatSliceReadsOnlyTheChunksItTouches) {
  const std::string store = dir_.Sub("chunked");
  std::vector<float> v(10000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  {
    StoreOptions opts;
    opts.chunk_bytes = 4096;  // 10 chunks of 1024 elements
    auto w = OpenStoreWriter(store, opts);
    ASSERT_TRUE(w.ok());
    StateDict sd;
    ASSERT_OK(sd.Add("v", F32({10000}, v)));
    ASSERT_OK(testing::SaveNoDist(sd, **w, 1));
  }
  // Damage chunk 0 (elements 0..1023): a slice of the last chunk still reads.
  ASSERT_TRUE(testing::FlipByteOf(store + "/db", ".sst", std::string(reinterpret_cast<char*>(&v[100]), 64)));
  EXPECT_EQ(Ckptdb("cat " + store + " 1 v --slice 9998:").out, "v[9998:]: f32 [2]\n[9998, 9999]\n");
  CliRun whole = Ckptdb("cat " + store + " 1 v");
  EXPECT_EQ(whole.code, 1) << whole.out;
  EXPECT_NE(whole.out.find("chunk 0 of 10"), std::string::npos) << whole.out;
  CliRun first = Ckptdb("cat " + store + " 1 v --slice 0:2");
  EXPECT_EQ(first.code, 1) << first.out;
}

TEST_F(CliTest, InfoSummarisesTheStore) {
  CliRun r = Ckptdb("info " + store_);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* line : {"store        ", "steps        2 (first 4, latest 12)\n", "tags         best=12\n",
                           "bytes        78.3 KiB (tensor and bytes entries of every step)\n",
                           "distinct     39.2 KiB (raw bytes of the distinct chunks the steps use)\n",
                           "dedup        2.00x (bytes / distinct: shared between steps)\n",
                           "stored       39.4 KiB (chunk values the steps added, as stored)\n",
                           "compression  0.99x (the steps' own raw chunks / stored)\n", "sst files    ", "live data    ",
                           "wal          ", "staging      0 directories"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
  CliRun j = Ckptdb("info " + store_ + " --json");
  ASSERT_EQ(j.code, 0) << j.out;
  EXPECT_NE(j.out.find("\"steps\": 2, \"first_step\": 4, \"latest_step\": 12, \"tags\": {\"best\": 12}, "
                       "\"bytes\": 80182, \"distinct_bytes\": 40144, \"dedup_ratio\": 2.00, \"stored_bytes\": 40368, "
                       "\"compression_ratio\": 0.99, \"disk_bytes\": "),
            std::string::npos)
      << j.out;
  for (const char* key : {"\"sst_files\": ", "\"sst_bytes\": ", "\"sst_files_per_level\": [", "\"live_data_bytes\": ",
                          "\"estimated_keys\": ", "\"wal_files\": ", "\"staging_dirs\": 0}"}) {
    EXPECT_NE(j.out.find(key), std::string::npos) << key << "\n" << j.out;
  }
}

TEST_F(CliTest, VerifyReadsEveryChunk) {
  CliRun r = Ckptdb("verify " + store_);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out,
            "step 4: ok (8 entries, 9 chunks, 39.3 KiB)\n"
            "step 12: ok (8 entries, 9 chunks, 131 B, 4 chunks shared with steps verified before)\n"
            "intact: 2 steps, 18 chunks, 39.4 KiB verified\n");
  EXPECT_EQ(Ckptdb("verify " + store_ + " best").out,
            "step 12: ok (8 entries, 9 chunks, 131 B)\nintact: 1 step, 9 chunks, 131 B verified\n");
  CliRun j = Ckptdb("verify " + store_ + " --all --json");
  EXPECT_EQ(j.code, 0);
  EXPECT_EQ(j.out,
            "{\"ok\": true, \"steps\": [\n"
            " {\"step\": 4, \"ok\": true, \"entries\": 8, \"chunks\": 9, \"bytes\": 40093, \"stored_bytes\": 40237, "
            "\"shared_chunks\": 0, \"errors\": []},\n"
            " {\"step\": 12, \"ok\": true, \"entries\": 8, \"chunks\": 9, \"bytes\": 40089, \"stored_bytes\": 131, "
            "\"shared_chunks\": 4, \"errors\": []}\n"
            "]}\n");
}

TEST_F(CliTest, VerifyDrawsAProgressBarOnlyOnATerminal) {
  EXPECT_EQ(Ckptdb("verify " + store_).out.find('\r'), std::string::npos);
  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "no 'script' to make a terminal";
  // script(1) runs the command with a pseudo-terminal as its stderr.
  CliRun r = testing::RunCommand("script -qc '" + std::string(CKPTDB_CLI) + " verify " + store_ + " >/dev/null' /dev/null");
  const std::string& out = r.out;
  EXPECT_EQ(r.code, 0) << out;
  EXPECT_NE(out.find("\r[##############################] 100%"), std::string::npos) << out;
}

TEST_F(CliTest, VerifyReportsDamageAndExitsOne) {
  // Corrupt counter's chunk in step 4 only: its values 1000..1003 as stored.
  int64_t needle[4] = {1000, 1001, 1002, 1003};
  ASSERT_TRUE(testing::FlipByteOf(store_ + "/db", ".sst", std::string(reinterpret_cast<char*>(needle), 32)));
  CliRun r = Ckptdb("verify " + store_);
  EXPECT_EQ(r.code, 1) << r.out;
  // Small entries share one RocksDB block, whose checksum fails first: each
  // entry in it is named, with the file.
  EXPECT_NE(r.out.find("step 4: DAMAGED\n  DataLoss: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("entry 'counter' (step 4, rank 0 item 2) chunk 0 of 1: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(".sst"), std::string::npos) << r.out;
  // Step 12 shares counter's chunk (unchanged since step 4): it is damaged
  // too, and says so.
  EXPECT_NE(r.out.find("step 12: DAMAGED\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("entry 'counter' chunk 0 (shared with another step): "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 of 2 steps damaged"), std::string::npos) << r.out;
  CliRun alone = Ckptdb("verify " + store_ + " 12");
  EXPECT_EQ(alone.code, 1);
  EXPECT_NE(alone.out.find("(shared: stored with step 4, rank 0 item 2 chunk 0)"), std::string::npos) << alone.out;
  CliRun j = Ckptdb("verify " + store_ + " 4 --json", true);
  EXPECT_EQ(j.code, 1);
  EXPECT_EQ(j.out.rfind("{\"ok\": false, \"steps\": [\n {\"step\": 4, \"ok\": false, ", 0), 0u) << j.out;
}

// A tensor cut into n-d boxes: shown, printed raw (rows gathered out of the
// boxes), sliced and verified box by box; a damaged box is named.
TEST(CliBoxes, CatSliceAndVerifyReadBoxes) {
  testing::TempDir dir;
  const std::string store = dir.Sub("s");
  const Tensor t = testing::PatternTensor(DType::kI32, {256, 512}, 3);  // 512 KiB: 8 boxes of 128 x 128
  StoreOptions o;
  o.chunk_bytes = 64 << 10;
  o.deduplicate = false;
  {
    auto w = OpenStoreWriter(store, o);
    ASSERT_TRUE(w.ok()) << w.status();
    StateDict sd;
    ASSERT_OK(sd.Add("w", t));
    ASSERT_OK(testing::SaveNoDist(sd, **w, 1));
  }
  CliRun ls = Ckptdb("ls " + store + " 1 --shards --json", true);
  ASSERT_EQ(ls.code, 0) << ls.out;
  EXPECT_NE(ls.out.find("\"chunks\": 8, \"chunk_bytes\": 65536, \"chunk_shape\": [128,128]"), std::string::npos)
      << ls.out;
  CliRun raw = Ckptdb("cat " + store + " 1 w --raw", true);
  ASSERT_EQ(raw.code, 0);
  EXPECT_EQ(raw.out, std::string(static_cast<const char*>(t.data()), t.nbytes()));
  // Row 200, columns 126..129: across two boxes.
  const int32_t* v = t.data_as<int32_t>() + 200 * 512;
  EXPECT_EQ(Ckptdb("cat " + store + " 1 w --slice 200,126:130", true).out,
            "w[200,126:130]: i32 [4]\n[" + std::to_string(v[126]) + ", " + std::to_string(v[127]) + ", " +
                std::to_string(v[128]) + ", " + std::to_string(v[129]) + "]\n");
  CliRun ok = Ckptdb("verify " + store);
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_NE(ok.out.find("8 chunks"), std::string::npos) << ok.out;
  // Damage box 5 (rows 128..255, columns 128..255): its first row's bytes.
  ASSERT_TRUE(testing::FlipByteOf(store + "/db", ".sst",
                                  std::string(reinterpret_cast<const char*>(t.data_as<int32_t>() + 128 * 512 + 128),
                                              128 * 4)));
  CliRun bad = Ckptdb("verify " + store);
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.out.find("entry 'w' (step 1, rank 0 item 0) chunk 5 of 8"), std::string::npos) << bad.out;
}

TEST_F(CliTest, DiffShowsAddedRemovedAndChanged) {
  CliRun r = Ckptdb("diff " + store_ + " 4 best");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out,
            "step 4 -> step 12: 1 added, 1 removed, 4 changed, 3 unchanged\n"
            "+  new.entry     tensor f16 [2]\n"
            "-  old.entry     tensor i32 [2]\n"
            "~  layer.weight  2 of 6 elements differ, max abs diff 0.5\n"
            "~  step          1 of 1 elements differ, max abs diff 5\n"
            "~  meta          1 of 12 bytes differ\n"
            "~  mask          tensor u8 [3] -> tensor bool [3]\n");
  CliRun j = Ckptdb("diff " + store_ + " 4 12 --json");
  ASSERT_EQ(j.code, 0) << j.out;
  EXPECT_EQ(j.out,
            "{\"a\": 4, \"b\": 12, \"added\": [{\"fqn\": \"new.entry\", \"kind\": \"tensor\", \"dtype\": \"f16\", "
            "\"shape\": [2]}], \"removed\": [{\"fqn\": \"old.entry\", \"kind\": \"tensor\", \"dtype\": \"i32\", "
            "\"shape\": [2]}], \"changed\": [\n"
            " {\"fqn\": \"layer.weight\", \"what\": \"values\", \"a\": {\"fqn\": \"layer.weight\", \"kind\": "
            "\"tensor\", \"dtype\": \"f32\", \"shape\": [2,3]}, \"b\": {\"fqn\": \"layer.weight\", \"kind\": "
            "\"tensor\", \"dtype\": \"f32\", \"shape\": [2,3]}, \"differing\": 2, \"total\": 6, "
            "\"max_abs_diff\": 0.5},\n"
            " {\"fqn\": \"step\", \"what\": \"values\", \"a\": {\"fqn\": \"step\", \"kind\": \"tensor\", \"dtype\": "
            "\"i64\", \"shape\": []}, \"b\": {\"fqn\": \"step\", \"kind\": \"tensor\", \"dtype\": \"i64\", \"shape\": "
            "[]}, \"differing\": 1, \"total\": 1, \"max_abs_diff\": 5},\n"
            " {\"fqn\": \"meta\", \"what\": \"bytes\", \"a\": {\"fqn\": \"meta\", \"kind\": \"bytes\", \"dtype\": "
            "\"u8\", \"shape\": [12]}, \"b\": {\"fqn\": \"meta\", \"kind\": \"bytes\", \"dtype\": \"u8\", \"shape\": "
            "[12]}, \"differing\": 1, \"total\": 12},\n"
            " {\"fqn\": \"mask\", \"what\": \"dtype\", \"a\": {\"fqn\": \"mask\", \"kind\": \"tensor\", \"dtype\": "
            "\"u8\", \"shape\": [3]}, \"b\": {\"fqn\": \"mask\", \"kind\": \"tensor\", \"dtype\": \"bool\", \"shape\": "
            "[3]}}\n"
            "], \"unchanged\": 3, \"unchanged_by_hash\": 3}\n");
  EXPECT_EQ(Ckptdb("diff " + store_ + " 12 12").out,
            "step 12 -> step 12: 0 added, 0 removed, 0 changed, 8 unchanged\n");
}

TEST_F(CliTest, DiffComparesBigTensorsBlockByBlockAcrossShardings) {
  // 48 MiB, rows of 16 MiB: read in blocks of rows, the same block of both
  // steps at a time; step 1 holds it as two shards, step 2 whole.
  const int64_t cols = 4 << 20;
  Tensor full = testing::PatternTensor(DType::kF32, {3, cols}, 5);
  Tensor changed = Tensor::Copy(DType::kF32, {3, cols}, full.data(), full.nbytes()).value();
  changed.data_as<float>()[0] += 0.25f;             // first block
  changed.data_as<float>()[3 * cols - 1] += 2.0f;   // last block, last element
  const std::string big = dir_.Sub("big");
  auto w = OpenStoreWriter(big);
  ASSERT_TRUE(w.ok());
  StateDict a, b;
  ASSERT_OK(a.Add("w", ShardedTensor::Create(
                           DType::kF32, {3, cols},
                           {{{0, 0}, Tensor::Copy(DType::kF32, {2, cols}, full.data(), 2 * cols * 4).value()},
                            {{2, 0}, Tensor::Copy(DType::kF32, {1, cols}, full.data_as<float>() + 2 * cols, cols * 4)
                                         .value()}})
                           .value()));
  ASSERT_OK(b.Add("w", changed));
  ASSERT_OK(testing::SaveNoDist(a, **w, 1));
  ASSERT_OK(testing::SaveNoDist(b, **w, 2));
  w->reset();
  CliRun r = Ckptdb("diff " + big + " 1 2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out,
            "step 1 -> step 2: 0 added, 0 removed, 1 changed, 0 unchanged\n"
            "~  w  2 of 12582912 elements differ, max abs diff 2\n");
}

// Reads a safetensors file with Python's standard library only (an
// independent reader): prints one line per tensor, "name dtype shape hex",
// then the metadata as JSON.
std::string ReadSafetensorsWithPython(const std::string& path) {
  const std::string script =
      "import json,struct,sys\n"
      "b=open(sys.argv[1],'rb').read()\n"
      "n=struct.unpack('<Q',b[:8])[0]\n"
      "h=json.loads(b[8:8+n].decode('utf-8'))\n"
      "meta=h.pop('__metadata__',{})\n"
      "data=b[8+n:]\n"
      "size={'F64':8,'F32':4,'F16':2,'BF16':2,'F8_E4M3':1,'F8_E5M2':1,'I64':8,'I32':4,'I16':2,'I8':1,'U8':1,'BOOL':1}\n"
      "end=0\n"
      "for k,v in sorted(h.items(),key=lambda kv:kv[1]['data_offsets']):\n"
      "  s,e=v['data_offsets']\n"
      "  assert s==end, (k,s,end)\n"
      "  numel=1\n"
      "  for d in v['shape']: numel*=d\n"
      "  assert e-s==numel*size[v['dtype']], k\n"
      "  end=e\n"
      "  print(k,v['dtype'],v['shape'],data[s:e].hex())\n"
      "assert end==len(data)\n"
      "assert n%8==0\n"
      "print(json.dumps(meta,sort_keys=True))\n";
  std::ofstream(path + ".py") << script;
  CliRun r = testing::RunCommand("python3 " + path + ".py " + path + " 2>&1");
  EXPECT_EQ(r.code, 0) << r.out;
  return r.out;
}

std::string Hex(const void* data, size_t n) {
  std::string out;
  char b[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof b, "%02x", static_cast<const unsigned char*>(data)[i]);
    out += b;
  }
  return out;
}

TEST_F(CliTest, ExportWritesSafetensorsThatAnIndependentReaderReads) {
  const std::string out = dir_.Sub("step4.safetensors");
  CliRun r = Ckptdb("export " + store_ + " 4 --format safetensors " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("exported step 4 to " + out + ": 7 tensors, 1 bytes entries in __metadata__, ", 0), 0u)
      << r.out;
  const std::string py = ReadSafetensorsWithPython(out);
  // Compare with what the store holds, read through the library.
  auto reader = OpenStoreReader(store_);
  ASSERT_TRUE(reader.ok());
  auto sd = LoadWhole(**reader, 4);
  ASSERT_TRUE(sd.ok()) << sd.status();
  const char* names[] = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I64", "I32", "I16", "I8", "U8", "BOOL"};
  std::string expected;
  for (const auto& [fqn, entry] : sd->entries()) {
    const Tensor* t = std::get_if<Tensor>(&entry);
    if (t == nullptr) continue;
    std::string shape = "[";
    for (size_t i = 0; i < t->shape().size(); ++i) shape += (i ? ", " : "") + std::to_string(t->shape()[i]);
    expected += fqn + " " + names[static_cast<int>(t->dtype()) - 1] + " " + shape + "] " +
                Hex(t->data(), t->nbytes()) + "\n";
  }
  // Not valid UTF-8 (\x01 is, but a lone \xff below is not): here it is text.
  expected += "{\"ckptdb.step\": \"4\", \"meta\": \"{\\\"lr\\\": 0.1}\\u0001\"}\n";
  EXPECT_EQ(py, expected);
  // The step as one file: every tensor whole, sharded ones assembled.
  EXPECT_NE(py.find("emb F32 [4, 2] 000000000000803f0000004000004040000080400000a0400000c0400000e040"),
            std::string::npos)
      << py;
}

TEST_F(CliTest, ExportEncodesNonUtf8BytesAsBase64) {
  const std::string store = dir_.Sub("bin");
  {
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok());
    StateDict sd;
    ASSERT_OK(sd.AddBytes("rng", std::string("\xff\x00\x01", 3)));
    ASSERT_OK(sd.Add("x", F32({}, {2.5f})));
    ASSERT_OK(testing::SaveNoDist(sd, **w, 1));
  }
  const std::string out = dir_.Sub("bin.safetensors");
  CliRun r = Ckptdb("export " + store + " latest --format safetensors " + out + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("{\"step\": 1, \"path\": \"" + out + "\", \"tensors\": 1, \"bytes_entries\": 1, ", 0), 0u)
      << r.out;
  EXPECT_EQ(ReadSafetensorsWithPython(out),
            "x F32 [] 00002040\n"
            "{\"ckptdb.base64\": \"[\\\"rng\\\"]\", \"ckptdb.step\": \"1\", \"rng\": \"/wAB\"}\n");
}

TEST_F(CliTest, TagRmAndGcChangeTheStore) {
  CliRun t = Ckptdb("tag " + store_ + " 4 release-1");
  EXPECT_EQ(t.code, 0) << t.out;
  EXPECT_EQ(t.out, "tagged step 4 as 'release-1'\n");
  EXPECT_EQ(Ckptdb("tag " + store_ + " release-1 best").out, "moved tag 'best' from step 12 to step 4\n");
  EXPECT_EQ(Ckptdb("cat " + store_ + " best step").out, "step: i64 []\n7\n");
  EXPECT_EQ(Ckptdb("tag " + store_ + " --delete release-1").out, "deleted tag 'release-1' (it named step 4)\n");
  EXPECT_EQ(MaskTimes(Ckptdb("ls " + store_).out),
            "STEP  CREATED               WORLD  ENTRIES  BYTES     ADDED     TAGS\n"
            "4     YYYY-MM-DDTHH:MM:SSZ  1      8        39.2 KiB  39.3 KiB  best\n"
            "12    YYYY-MM-DDTHH:MM:SSZ  1      8        39.1 KiB  131 B\n");
  {
    auto w = OpenStoreWriter(store_);
    ASSERT_TRUE(w.ok());
    for (int64_t s : {20, 30, 40, 50}) ASSERT_OK(testing::SaveNoDist(MakeStep(true), **w, s));
  }
  CliRun dry = Ckptdb("gc " + store_ + " --keep-last 2 --keep-every 20 --dry-run");
  EXPECT_EQ(dry.code, 0) << dry.out;
  EXPECT_EQ(dry.out,
            "would sweep 0 failed save(s) and 0 staging dir(s)\n"
            "would remove 2 steps (they added 131 B): 12, 30\n"
            "would keep 4 steps: 4, 20, 40, 50\n");
  EXPECT_EQ(StepsInStore(), (std::vector<int64_t>{4, 12, 20, 30, 40, 50}));
  CliRun gc = Ckptdb("gc " + store_ + " --keep-last 2 --keep-every 20 --json");
  EXPECT_EQ(gc.code, 0) << gc.out;
  EXPECT_EQ(gc.out,
            "{\"dry_run\": false, \"failed_saves\": 0, \"staging_dirs\": 0, \"unaccounted_saves\": 0, "
            "\"deleted_saves_reclaimed\": 0, \"replaced_objects\": 0, "
            "\"removed_steps\": [12, 30], "
            "\"removed_stored_bytes\": 131, \"kept_steps\": [4, 20, 40, 50], \"rewritten_files\": 0, "
            "\"rewritten_bytes_before\": 0, \"rewritten_bytes_after\": 0, \"files_left\": 0, "
            "\"unused_bytes_left\": 0, \"saves_running\": 0}\n");
  EXPECT_EQ(StepsInStore(), (std::vector<int64_t>{4, 20, 40, 50}));
  CliRun rm = Ckptdb("rm " + store_ + " best 40");
  EXPECT_EQ(rm.code, 0) << rm.out;
  EXPECT_EQ(rm.out, "removed step 4 (and its tag 'best')\nremoved step 40\n");
  EXPECT_EQ(StepsInStore(), (std::vector<int64_t>{20, 50}));
  EXPECT_EQ(Ckptdb("gc " + store_).out,
            "swept 0 failed save(s) and 0 staging dir(s)\n"
            "no retention rule given (--keep-last, --keep-every, --keep-best): every step is kept\n"
            "kept 2 steps: 20, 50\n");
}

TEST_F(CliTest, WriteCommandsRefuseWhileATrainingJobHoldsTheStore) {
  auto w = OpenStoreWriter(store_);
  ASSERT_TRUE(w.ok());
  ASSERT_OK((*w)->OpenDatabase());  // holds RocksDB's lock, as a training job does
  for (std::string args : {"rm " + store_ + " 4", "gc " + store_ + " --keep-last 1", "tag " + store_ + " 4 x"}) {
    CliRun r = Ckptdb(args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("another process (a training job?) has it open; nothing was changed"), std::string::npos)
        << args << "\n" << r.out;
  }
  w->reset();
  EXPECT_EQ(StepsInStore(), (std::vector<int64_t>{4, 12}));
}

TEST_F(CliTest, ReadCommandsWorkWhileAWriterHoldsTheStoreOpen) {
  auto w = OpenStoreWriter(store_);
  ASSERT_TRUE(w.ok());
  ASSERT_OK((*w)->OpenDatabase());
  StateDict sd;
  ASSERT_OK(sd.AddBytes("x", "y"));
  ASSERT_OK(testing::SaveNoDist(sd, **w, 13));
  CliRun r = Ckptdb("ls " + store_ + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("{\"step\": 13, "), std::string::npos) << r.out;
  EXPECT_EQ(Ckptdb("cat " + store_ + " 13 x").out, "x: bytes, 1 bytes\ny\n");
  EXPECT_EQ(Ckptdb("verify " + store_ + " 13").code, 0);
  EXPECT_EQ(Ckptdb("info " + store_).code, 0);
  EXPECT_EQ(Ckptdb("diff " + store_ + " 12 13").code, 0);
}

// A writer commits steps in a loop (pruning old ones as it goes) while ls,
// cat and verify run: every command succeeds and sees whole steps only.
TEST_F(CliTest, ReadersSeeWholeStepsWhileAWriterCommits) {
  constexpr int64_t kFirst = 100, kSteps = 150;
  std::atomic<bool> done{false};
  Status writer_status;
  std::thread writer([&] {
    StoreOptions opts;
    opts.retention.keep_last = 5;
    auto w = OpenStoreWriter(store_, opts);
    if (!w.ok()) {
      writer_status = w.status();
      done = true;
      return;
    }
    for (int64_t s = kFirst; s < kFirst + kSteps && writer_status.ok(); ++s) {
      // Every element and the bytes entry hold the step: a torn read would mix them.
      std::vector<float> v(3000, static_cast<float>(s));
      StateDict sd;
      writer_status = sd.Add("w", Tensor::Copy(DType::kF32, {3000}, v.data(), v.size() * 4).value());
      if (writer_status.ok()) writer_status = sd.AddBytes("step", std::to_string(s));
      if (writer_status.ok()) writer_status = testing::SaveNoDist(sd, **w, s);
    }
    done = true;
  });
  int rounds = 0;
  const std::regex cat_re(R"(^w: f32 \[3000\]\n\[(\d+), \1, \1, \.\.\., \1, \1, \1\]\n$)");
  bool failed = false;
  while ((!done || rounds < 3) && !failed) {
    ++rounds;
    CliRun ls = Ckptdb("ls " + store_ + " --json");
    EXPECT_EQ(ls.code, 0) << ls.out;
    // Every listed step of the loop is whole: 2 entries, 12000 + 3 bytes.
    for (size_t pos = ls.out.find("\"entries\": 2, "); pos != std::string::npos;
         pos = ls.out.find("\"entries\": 2, ", pos + 1)) {
      EXPECT_EQ(ls.out.compare(pos, 30, "\"entries\": 2, \"bytes\": 12003, "), 0) << ls.out;
    }
    CliRun cat = Ckptdb("cat " + store_ + " latest w");
    if (cat.out.rfind("w: ", 0) == 0) {  // the first steps of the fixture have no 'w'
      EXPECT_EQ(cat.code, 0) << cat.out;
      EXPECT_TRUE(std::regex_match(cat.out, cat_re)) << cat.out;
    } else {
      EXPECT_NE(cat.out.find("entry 'w' is not in step 12"), std::string::npos) << cat.out;
    }
    CliRun verify = Ckptdb("verify " + store_);
    EXPECT_EQ(verify.code, 0) << verify.out;
    EXPECT_NE(verify.out.find("intact: "), std::string::npos) << verify.out;
    failed = ::testing::Test::HasFailure();
  }
  writer.join();
  ASSERT_OK(writer_status);
  // Step 4 was pruned too (retention covers the whole store); 12 is tagged.
  std::vector<int64_t> expected = {12};
  for (int64_t s = kFirst + kSteps - 5; s < kFirst + kSteps; ++s) expected.push_back(s);
  EXPECT_EQ(StepsInStore(), expected);
  EXPECT_GE(rounds, 3);
}

TEST_F(CliTest, BadInputGetsAClearMessageAndExitCode) {
  struct Case {
    std::string args;
    int code;
    std::string fragment;
  };
  std::ofstream(dir_.Sub("plain")) << "x";
  const Case cases[] = {
      {"ls " + store_ + " 5", 1, "step 5 not found in store '" + store_ + "' (latest step is 12)"},
      {"ls " + store_ + " abc", 1, "no tag 'abc' in store"},
      {"ls " + store_ + " a/b", 1, "invalid step 'a/b': expected a number, 'latest', a tag name or best:METRIC[:min|max]"},
      {"ls " + store_ + " 99999999999999999999", 1, "is out of range"},
      {"ls " + store_ + " -3", 1, "step -3 is out of range"},
      {"ls " + store_ + " --shards", 2, "--shards needs a STEP"},
      {"cat " + store_ + " 4 nope", 1, "entry 'nope' is not in step 4"},
      {"cat " + store_ + " nosuchtag meta", 1, "no tag 'nosuchtag'"},
      {"cat " + store_ + " 4 layer.weight --slice 1:x", 2, "invalid slice '1:x': 'x' is not an integer"},
      {"cat " + store_ + " 4 layer.weight --slice ::0", 2, "invalid slice '::0': step 0 must be positive"},
      {"cat " + store_ + " 4 layer.weight --slice 0,,1", 2, "dimension 1 is empty"},
      {"cat " + store_ + " 4 layer.weight --slice 0,0,0", 1,
       "slice '0,0,0' has 3 dimensions, but entry 'layer.weight' has shape [2, 3]"},
      {"cat " + store_ + " 4 layer.weight --slice 2", 1,
       "index 2 is out of range for dimension 0 of entry 'layer.weight' (size 2)"},
      {"cat " + store_ + " 4 meta --slice 0:1", 1, "--slice applies to tensors; entry 'meta' is a bytes entry"},
      {"cat " + store_ + " 4 meta --raw --json", 2, "--raw and --json exclude each other"},
      {"cat " + store_ + " 4 meta --slice", 2, "option --slice needs a value"},
      {"ls " + dir_.Sub("plain"), 1, "is a file, not a ckptdb store"},
      {"ls " + dir_.Sub("missing"), 1, "no store at"},
      {"info " + dir_.path(), 1, "is not a ckptdb store"},
      {"verify " + store_ + " 5", 1, "step 5 not found"},
      {"verify " + store_ + " 4 --all", 2, "give STEPs or --all, not both"},
      {"diff " + store_ + " 4", 2, "expected STORE A B"},
      {"diff " + store_ + " 4 7", 1, "step 7 not found"},
      {"export " + store_ + " 4 " + dir_.Sub("o"), 2, "--format is required"},
      {"export " + store_ + " 4 --format npz " + dir_.Sub("o"), 2, "unknown format 'npz'"},
      {"export " + store_ + " 4 --format safetensors " + dir_.Sub("no/such/dir/o"), 1, "cannot create"},
      {"rm " + store_ + " 4 5", 1, "step 5 not found in store '" + store_ + "'; nothing was removed"},
      {"rm " + store_ + " nosuchtag", 1, "no tag 'nosuchtag'"},
      {"rm " + dir_.Sub("missing") + " 1", 1, "no store at"},
      {"rm " + store_, 2, "expected STORE STEP..."},
      {"tag " + store_ + " 4 latest", 1, "'latest' is reserved"},
      {"tag " + store_ + " 4 9lives", 1, "tag name '9lives' must start with a letter"},
      {"tag " + store_ + " 5 good", 1, "step 5 not found"},
      {"tag " + store_ + " --delete nosuch", 1, "no tag 'nosuch'"},
      {"gc " + store_ + " --keep-last 0", 2, "--keep-last needs a positive integer, not '0'"},
      {"gc " + store_ + " --keep-every x", 2, "--keep-every needs a positive integer, not 'x'"},
      {"ls", 2, "expected STORE [STEP]"},
      {"ls " + store_ + " --frobnicate", 2, "unknown option --frobnicate"},
      {"ls " + store_ + " --json=1", 2, "option --json takes no value"},
      {"cat " + store_ + " 4", 2, "expected STORE STEP FQN"},
      {"", 2, "missing command"},
      {"explode", 2, "unknown command 'explode'"},
  };
  for (const Case& c : cases) {
    CliRun r = Ckptdb(c.args);
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.fragment), std::string::npos) << c.args << "\n" << r.out;
  }
  // Nothing above changed the store, and no command created one.
  EXPECT_EQ(StepsInStore(), (std::vector<int64_t>{4, 12}));
  EXPECT_FALSE(std::ifstream(dir_.Sub("missing")).good());
  EXPECT_FALSE(std::ifstream(dir_.Sub("o")).good());
}

// A private character device node (never a system file): /dev/full's
// numbers (1, 7) make one that every write fails on with ENOSPC, /dev/null's
// (1, 3) one that swallows everything. Removed when the guard goes, also
// when the test fails.
class DeviceNode {
 public:
  DeviceNode(std::string path, unsigned minor) : path_(std::move(path)) {
    ok_ = mknod(path_.c_str(), S_IFCHR | 0666, makedev(1, minor)) == 0;
    if (!ok_) error_ = std::strerror(errno);
  }
  ~DeviceNode() { unlink(path_.c_str()); }
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool ok_ = false;
  std::string error_;
};

// The read commands whose output is what they are for.
std::vector<std::string> ReadCommands(const std::string& store) {
  return {"ls " + store,
          "ls " + store + " --json",
          "ls " + store + " 4",
          "ls " + store + " 4 --shards",
          "info " + store,
          "verify " + store,
          "verify " + store + " --json",
          "cat " + store + " 4 layer.weight",
          "cat " + store + " 4 counter --raw",
          "cat " + store + " 4 meta --raw",
          "diff " + store + " 4 12",
          "--help"};
}

TEST_F(CliTest, OutputThatCannotBeWrittenIsAFailure) {
  DeviceNode full(dir_.Sub("full"), 7);
  if (!full.ok()) GTEST_SKIP() << "cannot make a device node here (mknod: " << full.error() << ")";
  for (const std::string& args : ReadCommands(store_)) {
    // stderr to the test, stdout to the full device.
    CliRun r = testing::RunCommand(std::string(CKPTDB_CLI) + " " + args + " 2>&1 >" + full.path());
    EXPECT_EQ(r.code, 1) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("ckptdb: IOError: cannot write to standard output: No space left on device"),
              std::string::npos)
        << args << "\n" << r.out;
    // Closed outright.
    r = testing::RunCommand(std::string(CKPTDB_CLI) + " " + args + " 2>&1 >&-");
    EXPECT_EQ(r.code, 1) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("cannot write to standard output: Bad file descriptor"), std::string::npos)
        << args << "\n" << r.out;
  }
  // A failed command still reports its own error (and its exit code).
  CliRun r = testing::RunCommand(std::string(CKPTDB_CLI) + " ls " + dir_.Sub("none") + " 2>&1 >" + full.path());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("NotFound"), std::string::npos) << r.out;
  // And a working stdout is still fine.
  EXPECT_EQ(Ckptdb("ls " + store_, /*stdout_only=*/true).code, 0);
}

// Runs `ckptdb ARGS` with stdout a pipe that nobody reads any more, and
// SIGPIPE at `disposition`. Returns the wait status; *err gets stderr.
int RunIntoAClosedPipe(const std::vector<std::string>& args, void (*disposition)(int), std::string* err) {
  int out[2], errp[2];
  if (pipe(out) != 0 || pipe(errp) != 0) return -1;
  close(out[0]);  // before the fork: no process can read it
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGPIPE, disposition);
    dup2(out[1], STDOUT_FILENO);
    dup2(errp[1], STDERR_FILENO);
    close(out[1]);
    close(errp[0]);
    close(errp[1]);
    std::vector<char*> argv{const_cast<char*>(CKPTDB_CLI)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(CKPTDB_CLI, argv.data());
    _exit(127);
  }
  close(out[1]);
  close(errp[1]);
  char buf[1024];
  ssize_t n;
  while ((n = read(errp[0], buf, sizeof buf)) > 0) err->append(buf, static_cast<size_t>(n));
  close(errp[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

// A reader that leaves early (`ckptdb ls STORE | head -1`): by default the
// command ends by SIGPIPE, silently, as cat or ls do; where SIGPIPE is
// ignored (a parent that ignores it passes that on), the failed write is a
// failure with a message. Never a success.
TEST_F(CliTest, APipeWhoseReaderLeftIsNeverASuccess) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"ls", store_}, {"cat", store_, "4", "counter", "--raw"}, {"verify", store_}}) {
    std::string err;
    int status = RunIntoAClosedPipe(args, SIG_DFL, &err);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGPIPE) << args[0] << " status " << status << ": " << err;
    EXPECT_EQ(err, "") << args[0];
    err.clear();
    status = RunIntoAClosedPipe(args, SIG_IGN, &err);
    ASSERT_TRUE(WIFEXITED(status)) << args[0] << " status " << status;
    EXPECT_EQ(WEXITSTATUS(status), 1) << args[0] << ": " << err;
    EXPECT_NE(err.find("ckptdb: IOError: cannot write to standard output: Broken pipe"), std::string::npos)
        << args[0] << ": " << err;
  }
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << data;
}

// Names under `dir` that look like an export's temporary.
std::vector<std::string> Temporaries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp") != std::string::npos) out.push_back(name);
  }
  return out;
}

TEST_F(CliTest, ExportWritesOnlyRegularFilesAndNeverLeavesATemporary) {
  auto export_to = [&](const std::string& out) {
    return Ckptdb("export " + store_ + " 4 --format safetensors " + out);
  };
  // A symbolic link at OUT is refused: neither replaced nor followed.
  const std::string target = dir_.Sub("target.safetensors"), link = dir_.Sub("link.safetensors");
  WriteFile(target, "old");
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  CliRun r = export_to(link);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("'" + link + "' is a symbolic link"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(ReadFile(target), "old");
  // A dangling one too: nothing is created.
  const std::string dangling = dir_.Sub("dangling.safetensors");
  ASSERT_EQ(symlink(dir_.Sub("nowhere").c_str(), dangling.c_str()), 0);
  r = export_to(dangling);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(std::filesystem::is_symlink(dangling));
  EXPECT_FALSE(std::filesystem::exists(dir_.Sub("nowhere")));

  // A device, a FIFO, a directory: refused, and left as they are.
  {
    DeviceNode null(dir_.Sub("null"), 3);
    if (null.ok()) {
      r = export_to(null.path());
      EXPECT_EQ(r.code, 1) << r.out;
      EXPECT_NE(r.out.find("'" + null.path() + "' is a character device, not a regular file"), std::string::npos)
          << r.out;
      struct stat st;
      ASSERT_EQ(lstat(null.path().c_str(), &st), 0);
      EXPECT_TRUE(S_ISCHR(st.st_mode));
      EXPECT_EQ(major(st.st_rdev), 1u);
      EXPECT_EQ(minor(st.st_rdev), 3u);
    } else {
      ADD_FAILURE() << "cannot make a device node here (mknod: " << null.error() << ")";
    }
  }
  const std::string fifo = dir_.Sub("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  r = export_to(fifo);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("is a FIFO, not a regular file"), std::string::npos) << r.out;
  EXPECT_EQ(std::filesystem::status(fifo).type(), std::filesystem::file_type::fifo);
  r = export_to(dir_.path());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("is a directory, not a regular file"), std::string::npos) << r.out;

  // Writing fails half-way (a file size limit of 1 KiB or less, as a full
  // disk would): a failure with the reason; the file that was there is
  // untouched and no temporary is left.
  const std::string out = dir_.Sub("out.safetensors");
  WriteFile(out, "old");
  r = testing::RunCommand("sh -c 'ulimit -f 1; exec " + std::string(CKPTDB_CLI) + " export " + store_ +
                          " 4 --format safetensors " + out + "' 2>&1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("File too large"), std::string::npos) << r.out;
  EXPECT_EQ(ReadFile(out), "old");
  EXPECT_EQ(Temporaries(dir_.path()), std::vector<std::string>{});

  // A regular file is replaced, as before.
  r = export_to(out);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_GT(std::filesystem::file_size(out), 1000u);
  EXPECT_EQ(Temporaries(dir_.path()), std::vector<std::string>{});
}

TEST_F(CliTest, HelpEverywhere) {
  for (std::string args : {"--help", "help", "ls --help", "cat --help", "info --help", "verify --help",
                           "diff --help", "export --help", "rm --help", "gc --help", "tag --help"}) {
    CliRun r = Ckptdb(args);
    EXPECT_EQ(r.code, 0) << args;
    EXPECT_EQ(r.out.rfind("usage: ckptdb", 0), 0u) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("exit codes: 0 "), std::string::npos) << args;
    EXPECT_NE(r.out.find("2 usage error"), std::string::npos) << args;
  }
  for (std::string cmd : {"rm", "gc", "tag"}) {
    EXPECT_NE(Ckptdb(cmd + " --help").out.find("while a training job is saving to the store"), std::string::npos)
        << cmd;
  }
}

// Runs `ckptdb ARGS...` with stdout to /dev/null; returns its exit code and
// its peak resident memory in KiB (ru_maxrss of that process alone).
std::pair<int, long> CkptdbPeakRss(const std::vector<std::string>& args) {
  std::vector<std::string> argv_s = {CKPTDB_CLI};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  struct rusage ru {};
  if (wait4(pid, &status, 0, &ru) != pid) return {-1, 0};
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ru.ru_maxrss};
}

// cat --raw and export stream any tensor in a bounded buffer, a one-row
// tensor too, and read chunks without mapping the store's files (every
// mapped page touched counted in their resident memory: 600 MiB here).
TEST(CliMemoryTest, CatRawAndExportOfAOneRowTensorStayInBoundedMemory) {
  testing::TempDir dir;
  const std::string store = dir.Sub("big.ckptdb");
  constexpr int64_t kBytes = 512ll << 20;
  {
    auto t = Tensor::Zeros(DType::kU8, {1, kBytes});
    ASSERT_TRUE(t.ok()) << t.status();
    auto* p = static_cast<uint8_t*>(t->data());
    for (int64_t i = 0; i < kBytes; ++i) p[i] = static_cast<uint8_t>(i % 251);
    StateDict sd;
    ASSERT_OK(sd.Add("t", std::move(t).value()));
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_OK(testing::SaveNoDist(sd, **w, 0));
  }
  constexpr long kBoundKiB = 320l << 10;
  auto [cat_code, cat_rss] = CkptdbPeakRss({"cat", store, "0", "t", "--raw"});
  EXPECT_EQ(cat_code, 0);
  EXPECT_LT(cat_rss, kBoundKiB) << "cat --raw of a [1, 512 MiB] tensor peaked at " << cat_rss / 1024 << " MiB";
  const std::string out = dir.Sub("big.safetensors");
  auto [export_code, export_rss] = CkptdbPeakRss({"export", store, "0", "--format", "safetensors", out});
  EXPECT_EQ(export_code, 0);
  EXPECT_LT(export_rss, kBoundKiB) << "export of a [1, 512 MiB] tensor peaked at " << export_rss / 1024 << " MiB";
  // What export wrote ends with the tensor's bytes, in order.
  std::ifstream f(out, std::ios::binary | std::ios::ate);
  ASSERT_TRUE(f.good());
  const std::streamoff size = f.tellg();
  ASSERT_GT(size, kBytes);
  f.seekg(size - 4096);
  std::string tail(4096, '\0');
  f.read(tail.data(), 4096);
  for (int64_t i = 0; i < 4096; ++i) {
    ASSERT_EQ(static_cast<uint8_t>(tail[i]), static_cast<uint8_t>((kBytes - 4096 + i) % 251)) << i;
  }
}

// Steps saved with metrics: ls shows and sorts by them, info STEP shows all
// of a step's, best:METRIC names a step, gc --keep-best prunes by them.
TEST(CliMetricsTest, LsSortsInfoShowsBestResolvesAndGcKeepsTheBest) {
  testing::TempDir dir;
  const std::string store = dir.Sub("m.ckptdb");
  {
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok()) << w.status();
    const double loss[4] = {2.5, 1.5, 3.5, 2.0};
    for (int64_t step = 0; step < 4; ++step) {
      SaveOptions o;
      o.step = step;
      o.no_dist = true;
      o.metrics = {{"val_loss", loss[step]}, {"acc", 0.1 * static_cast<double>(step)}};
      o.note = "run " + std::to_string(step);
      ASSERT_OK(Save(MakeStep(false), **w, o));
    }
  }
  CliRun ls = Ckptdb("ls " + store + " --sort val_loss", true);
  ASSERT_EQ(ls.code, 0) << ls.out;
  std::istringstream lines(ls.out);
  std::string header, row;
  std::getline(lines, header);
  std::istringstream words(header);
  std::vector<std::string> columns{std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
  EXPECT_EQ(columns, (std::vector<std::string>{"STEP", "CREATED", "WORLD", "ENTRIES", "BYTES", "ADDED", "acc",
                                               "val_loss", "TAGS"}));
  std::vector<std::string> order;
  while (std::getline(lines, row)) order.push_back(row.substr(0, row.find(' ')));
  EXPECT_EQ(order, (std::vector<std::string>{"1", "3", "0", "2"}));
  CliRun rev = Ckptdb("ls " + store + " --sort val_loss --reverse --json", true);
  ASSERT_EQ(rev.code, 0);
  EXPECT_LT(rev.out.find("\"step\": 2"), rev.out.find("\"step\": 0")) << rev.out;
  EXPECT_NE(rev.out.find("\"metrics\": {\"acc\": 0.1, \"val_loss\": 1.5}, \"note\": \"run 1\""), std::string::npos)
      << rev.out;
  CliRun info = Ckptdb("info " + store + " best:val_loss", true);
  ASSERT_EQ(info.code, 0) << info.out;
  EXPECT_NE(info.out.find("step             1\n"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("metric val_loss  1.5\n"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("note\nrun 1\n"), std::string::npos) << info.out;
  EXPECT_NE(Ckptdb("info " + store + " best:acc:max --json", true).out.find("\"step\": 3,"), std::string::npos);
  CliRun none = Ckptdb("info " + store + " best:accuracy");
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.out.find("no step of store"), std::string::npos) << none.out;
  EXPECT_EQ(Ckptdb("info " + store + " best:val_loss:median").code, 1);
  // Usage errors change nothing.
  EXPECT_EQ(Ckptdb("gc " + store + " --keep-best 2").code, 2);
  EXPECT_EQ(Ckptdb("gc " + store + " --keep-best 2 --metric val_loss --mode best").code, 2);
  EXPECT_EQ(Ckptdb("gc " + store + " --metric val_loss").code, 2);
  EXPECT_EQ(Ckptdb("ls " + store + " --sort 'val loss'").code, 2);
  CliRun gc = Ckptdb("gc " + store + " --keep-best 2 --metric val_loss");
  ASSERT_EQ(gc.code, 0) << gc.out;
  // The two best (1, 3), and 3 is also the newest.
  CliRun left = Ckptdb("ls " + store + " --json", true);
  EXPECT_EQ(left.out.find("\"step\": 0"), std::string::npos) << left.out;
  EXPECT_EQ(left.out.find("\"step\": 2"), std::string::npos) << left.out;
  EXPECT_NE(left.out.find("\"step\": 1"), std::string::npos) << left.out;
  EXPECT_NE(left.out.find("\"step\": 3"), std::string::npos) << left.out;
}

}  // namespace
}  // namespace ckptdb
