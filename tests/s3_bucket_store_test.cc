// A bucket store (src/bucket/bucket_store.h) against the real SeaweedFS
// server of the S3Server fixture, ranks as threads: saves on 4 ranks loaded
// on 3 with another sharding and on 1, bit for bit; a failed save leaves
// nothing visible and its objects deleted; two jobs racing for one step;
// damaged records and missing data objects.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bucket/bucket_store.h"
#include "bucket/checksum_probe.h"
#include "bucket/conditional_probe.h"
#include "ckptdb/ckptdb.h"
#include "format/metadata_codec.h"
#include "s3/s3_client.h"
#include "s3_fault_proxy.h"
#include "s3_test_server.h"
#include "test_util.h"
#include "thread_communicator.h"

namespace ckptdb {
namespace bucket {
namespace {

using ::ckptdb::testing::PatternTensor;

const ::ckptdb::testing::S3TestServer& Server() { return ::ckptdb::testing::TestS3Server(); }

// Box (offsets, sizes) of the row-major 2-d `full`.
Tensor Slice(const Tensor& full, const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes) {
  Tensor out = Tensor::Zeros(full.dtype(), sizes).value();
  const size_t es = DTypeSize(full.dtype());
  const int64_t cols = full.shape()[1];
  for (int64_t r = 0; r < sizes[0]; ++r) {
    std::memcpy(static_cast<char*>(out.data()) + r * sizes[1] * es,
                static_cast<const char*>(full.data()) + ((offsets[0] + r) * cols + offsets[1]) * es, sizes[1] * es);
  }
  return out;
}

// Rank `rank` of `world`'s shard of `full`, cut into rows or columns.
ShardedTensor Shard2d(const Tensor& full, int rank, int world, bool by_rows, bool zeros) {
  const int64_t rows = full.shape()[0], cols = full.shape()[1];
  std::vector<int64_t> off{0, 0}, size{rows, cols};
  const int d = by_rows ? 0 : 1;
  size[d] = full.shape()[d] / world;
  off[d] = size[d] * rank;
  Tensor t = Slice(full, off, size);
  std::vector<Shard> shards{Shard{off, zeros ? ::ckptdb::testing::ZerosLike(t) : t}};
  return ShardedTensor::Create(full.dtype(), full.shape(), std::move(shards)).value();
}

// Forwards to a writer, failing Write on `fail_rank` and holding Finish
// until `finish_gate` (when set) lets it through.
class WrappedWriter : public StorageWriter {
 public:
  WrappedWriter(std::unique_ptr<StorageWriter> inner, int fail_rank, std::function<void()> finish_gate,
                std::function<void(int rank, const WriteResult&)> after_write)
      : inner_(std::move(inner)),
        fail_rank_(fail_rank),
        finish_gate_(std::move(finish_gate)),
        after_write_(std::move(after_write)) {}
  FileDelivery delivery() const override { return inner_->delivery(); }
  StatusOr<uint64_t> Prepare(int64_t step) override { return inner_->Prepare(step); }
  StatusOr<std::vector<ReuseCandidate>> FindReusable(const SaveContext& ctx, const StepMetadata& md) override {
    return inner_->FindReusable(ctx, md);
  }
  Status PrepareStorage(const SaveContext& ctx, const std::vector<WriteItem>& items) override {
    return inner_->PrepareStorage(ctx, items);
  }
  StatusOr<WriteResult> Write(const SaveContext& ctx, const std::vector<WriteItem>& items) override {
    if (ctx.rank == fail_rank_) return Status::Unavailable("injected failure of rank " + std::to_string(ctx.rank));
    StatusOr<WriteResult> r = inner_->Write(ctx, items);
    if (r.ok() && after_write_) after_write_(ctx.rank, *r);
    return r;
  }
  StatusOr<std::string> ReceivedFilePath(const SaveContext& ctx, int rank, const std::string& name) override {
    return inner_->ReceivedFilePath(ctx, rank, name);
  }
  void DiscardLocalFiles(const SaveContext& ctx) override { inner_->DiscardLocalFiles(ctx); }
  Status Finish(const SaveContext& ctx, const StepMetadata& md, const std::vector<WriteResult>& results) override {
    if (finish_gate_) finish_gate_();
    return inner_->Finish(ctx, md, results);
  }
  void Abort(const SaveContext& ctx) override { inner_->Abort(ctx); }

 private:
  std::unique_ptr<StorageWriter> inner_;
  int fail_rank_;
  std::function<void()> finish_gate_;
  std::function<void(int rank, const WriteResult&)> after_write_;
};

class BucketStoreTest : public ::ckptdb::testing::S3ServerTest {
 protected:
  void SetUp() override {
    S3ServerTest::SetUp();
    options_.chunk_bytes = 4096;
  }

  // A reader of this test's store whose requests go through `proxy` (which
  // counts them).
  // Saves `sd` as step 1 from one process (no deduplication); gives the
  // step record's key and bytes.
  void SaveStepOne(const StateDict& sd, std::string* key, std::string* value) {
    StoreOptions so = options_;
    so.deduplicate = false;
    auto w = OpenBucketStoreWriter(client_, bucket_, prefix_, so);
    ASSERT_TRUE(w.ok()) << w.status();
    SaveOptions o;
    o.step = 1;
    o.no_dist = true;
    ASSERT_TRUE(Save(sd, **w, o).ok());
    const std::vector<std::string> records = Keys(prefix_ + "steps/");
    ASSERT_EQ(records.size(), 1u);
    auto got = client_->GetObject(bucket_, records[0]);
    ASSERT_TRUE(got.ok()) << got.status();
    *key = records[0];
    *value = std::move(*got);
  }

  StatusOr<std::unique_ptr<StoreReader>> ReaderThrough(const ::ckptdb::testing::S3FaultProxy& proxy) {
    s3::S3Settings settings = Server().settings;
    settings.endpoint = proxy.endpoint();
    auto made = s3::S3Client::Create(settings);
    if (!made.ok()) return made.status();
    return OpenBucketStoreReader(std::move(*made), bucket_, prefix_);
  }

  // Saves `full` as step `step` on `world` ranks (threads), cut into rows;
  // returns each rank's status.
  std::vector<Status> SaveRows(const Tensor& full, int world, int64_t step, int fail_rank = -1,
                               const BucketWriteOptions& wo = {}, std::function<void()> finish_gate = {},
                               std::shared_ptr<s3::S3Client> coordinator_client = nullptr,
                               std::function<void(int rank, const WriteResult&)> after_write = {}) {
    std::vector<Status> statuses(world);
    std::mutex mu;
    ::ckptdb::testing::RunRanksAsThreads(world, [&](int rank, Communicator& comm) {
      std::shared_ptr<s3::S3Client> client = rank == 0 && coordinator_client != nullptr ? coordinator_client : client_;
      auto w = OpenBucketStoreWriter(client, bucket_, prefix_, options_, wo);
      Status st = w.status();
      if (w.ok()) {
        WrappedWriter wrapped(std::move(*w), fail_rank, finish_gate, after_write);
        StateDict sd;
        (void)sd.Add("t", Shard2d(full, rank, world, /*by_rows=*/true, false));
        SaveOptions o;
        o.step = step;
        o.communicator = &comm;
        st = Save(sd, wrapped, o);
      }
      std::lock_guard<std::mutex> lock(mu);
      statuses[rank] = st;
    });
    return statuses;
  }

  std::vector<std::string> Keys(const std::string& under) {
    auto objects = client_->ListAll(bucket_, under);
    EXPECT_TRUE(objects.ok()) << objects.status();
    std::vector<std::string> keys;
    if (objects.ok()) {
      for (const s3::ObjectInfo& o : *objects) keys.push_back(o.key);
    }
    return keys;
  }

  std::string DataDir(int64_t step) {
    return SaveDataPrefix(prefix_, step, 0).substr(0, SaveDataPrefix(prefix_, step, 0).size() - 17);
  }

  // The steps a reader lists, by number.

  StoreOptions options_;
};

TEST_F(BucketStoreTest, SavedOnFourRanksLoadsOnThreeColumnsAndOnOneBitForBit) {
  const Tensor full = PatternTensor(DType::kF32, {128, 96}, 11);
  for (const Status& st : SaveRows(full, 4, 3)) ASSERT_TRUE(st.ok()) << st;

  // One object per rank, under the save's own id.
  const std::vector<std::string> data = Keys(DataDir(3));
  ASSERT_EQ(data.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_NE(data[r].find("/rank-" + std::to_string(r) + "-0.sst"), std::string::npos) << data[r];
  }
  const std::string save_id = data[0].substr(DataDir(3).size(), 16);
  EXPECT_EQ(Keys(prefix_ + "steps/"), std::vector<std::string>{StepRecordKey(prefix_, 3, std::stoull(save_id, nullptr, 16))});
  EXPECT_EQ(Keys(prefix_ + "pending/"), std::vector<std::string>{});  // the save's marker went with it

  // Three ranks, columns.
  std::vector<StateDict> targets(3);
  std::vector<Status> statuses(3);
  std::mutex mu;
  ::ckptdb::testing::RunRanksAsThreads(3, [&](int rank, Communicator& comm) {
    auto r = OpenBucketStoreReader(client_, bucket_, prefix_);
    (void)targets[rank].Add("t", Shard2d(full, rank, 3, /*by_rows=*/false, /*zeros=*/true));
    LoadOptions o;
    o.step = 3;
    o.communicator = &comm;
    Status st = r.ok() ? Load(targets[rank], **r, o) : r.status();
    std::lock_guard<std::mutex> lock(mu);
    statuses[rank] = st;
  });
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_TRUE(statuses[rank].ok()) << statuses[rank];
    const Shard& got = std::get<ShardedTensor>(*targets[rank].Find("t")).local_shards()[0];
    EXPECT_TRUE(got.tensor.BitwiseEquals(Slice(full, got.offsets, got.tensor.shape()))) << "rank " << rank;
  }

  // One rank, whole.
  auto reader = OpenBucketStoreReader(client_, bucket_, prefix_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto whole = LoadWhole(**reader, 3);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(std::get<Tensor>(*whole->Find("t")).BitwiseEquals(full));
  EXPECT_EQ(::ckptdb::testing::Steps(**reader), std::vector<int64_t>{3});

  // A committed step is refused before anything is written.
  for (const Status& st : SaveRows(full, 4, 3)) EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st;
  EXPECT_EQ(Keys(DataDir(3)), data);
}

// A load lands the chunks that lie whole and unconverted in its target
// straight from the GET (LoadStats::chunks_landed), contiguous or strided,
// and copies the others; either way the target is the saved tensor, bit for
// bit. (Chunks of 4 KiB are tiles of 32 x 32; the chunks in an object's
// cached tail, its last 64 KiB, are read from it without a GET: at most 16
// an object here, 32 in all.)
TEST_F(BucketStoreTest, ChunksThatLieWholeInTheTargetLandThereAndTheOthersAreCopied) {
  const Tensor full = PatternTensor(DType::kF32, {1024, 1024}, 5);  // 2 MiB a rank
  for (const Status& st : SaveRows(full, 2, 4)) ASSERT_TRUE(st.ok()) << st;
  auto reader = OpenBucketStoreReader(client_, bucket_, prefix_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  LoadOptions o;
  o.step = 4;
  o.no_dist = true;
  constexpr uint64_t kInTails = 32;

  StateDict whole;
  (void)whole.Add("t", ::ckptdb::testing::ZerosLike(full));
  LoadStats stats;
  ASSERT_OK(Load(whole, **reader, o, &stats));
  EXPECT_TRUE(std::get<Tensor>(*whole.Find("t")).BitwiseEquals(full));
  EXPECT_EQ(stats.chunks_read, 1024u);
  EXPECT_GE(stats.chunks_landed, stats.chunks_read - kInTails);

  // Columns [0, 500) and [500, 1024): each tile lands in rows 4 KiB apart,
  // but for the 32 tiles that column 500 cuts, copied into both.
  for (const int64_t first : {int64_t{0}, int64_t{500}}) {
    const std::vector<int64_t> offsets{0, first}, sizes{1024, first == 0 ? 500 : 524};
    StateDict part;
    std::vector<Shard> shards{Shard{offsets, ::ckptdb::testing::ZerosLike(Slice(full, offsets, sizes))}};
    (void)part.Add("t", ShardedTensor::Create(DType::kF32, full.shape(), std::move(shards)).value());
    LoadStats part_stats;
    ASSERT_OK(Load(part, **reader, o, &part_stats));
    const Shard& got = std::get<ShardedTensor>(*part.Find("t")).local_shards()[0];
    EXPECT_TRUE(got.tensor.BitwiseEquals(Slice(full, offsets, sizes))) << first;
    EXPECT_LE(part_stats.chunks_landed, part_stats.chunks_read - 32) << first;
    EXPECT_GE(part_stats.chunks_landed, part_stats.chunks_read - 32 - kInTails) << first;
  }

  // Converted on the way in: copied.
  StateDict wide;
  (void)wide.Add("t", Tensor::Zeros(DType::kF64, full.shape()).value());
  LoadOptions convert = o;
  convert.convert_dtype = true;
  LoadStats wide_stats;
  ASSERT_OK(Load(wide, **reader, convert, &wide_stats));
  const Tensor& w = std::get<Tensor>(*wide.Find("t"));
  for (int64_t i = 0; i < full.numel(); i += 4099) {
    EXPECT_EQ(static_cast<const double*>(w.data())[i], static_cast<const float*>(full.data())[i]) << i;
  }
  EXPECT_EQ(wide_stats.chunks_read, 1024u);
  EXPECT_EQ(wide_stats.chunks_landed, 0u);
}

// A one-dimensional tensor's chunks are byte ranges: they land too.
TEST_F(BucketStoreTest, TheChunksOfAOneDimensionalTensorLandInItsTarget) {
  const Tensor v = PatternTensor(DType::kF32, {262144}, 9);  // 1 MiB: 256 chunks
  StateDict sd;
  (void)sd.Add("v", v);
  std::string key, record;
  SaveStepOne(sd, &key, &record);
  auto reader = OpenBucketStoreReader(client_, bucket_, prefix_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  StateDict target;
  (void)target.Add("v", ::ckptdb::testing::ZerosLike(v));
  LoadOptions o;
  o.step = 1;
  o.no_dist = true;
  LoadStats stats;
  ASSERT_OK(Load(target, **reader, o, &stats));
  EXPECT_TRUE(std::get<Tensor>(*target.Find("v")).BitwiseEquals(v));
  EXPECT_EQ(stats.chunks_read, 256u);
  EXPECT_GE(stats.chunks_landed, 256u - 16);  // (the object's cached tail: its last 64 KiB)
}

// A file of more than one part goes up in parts (in parallel) while it is
// written: 11 MiB in parts of 5 MiB, S3's (and SeaweedFS's) smallest but the
// last.
TEST_F(BucketStoreTest, ALargeFileIsUploadedInParts) {
  const Tensor full = PatternTensor(DType::kF32, {2816, 1024}, 4);
  options_.chunk_bytes = 1 << 20;
  BucketWriteOptions wo;
  wo.part_bytes = 5 << 20;
  for (const Status& st : SaveRows(full, 1, 1, -1, wo)) ASSERT_TRUE(st.ok()) << st;
  auto head = client_->HeadObject(bucket_, Keys(DataDir(1)).at(0));
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_GT(head->size, full.nbytes());
  EXPECT_NE(head->etag.find("-3"), std::string::npos) << head->etag;  // assembled from 3 parts
  auto reader = OpenBucketStoreReader(client_, bucket_, prefix_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto whole = LoadWhole(**reader, 1);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(std::get<Tensor>(*whole->Find("t")).BitwiseEquals(full));
}

TEST_F(BucketStoreTest, AFailedRankLeavesTheStepInvisibleAndItsObjectsDeleted) {
  const Tensor full = PatternTensor(DType::kF32, {64, 48}, 5);
  for (const Status& st : SaveRows(full, 4, 1)) ASSERT_TRUE(st.ok()) << st;
  for (const Status& st : SaveRows(full, 4, 2, /*fail_rank=*/2)) EXPECT_FALSE(st.ok());

  auto reader = OpenBucketStoreReader(client_, bucket_, prefix_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto md = (*reader)->ReadMetadata(2);
  EXPECT_EQ(md.status().code(), StatusCode::kNotFound) << md.status();
  EXPECT_NE(md.status().message().find("step 2"), std::string::npos) << md.status();
  EXPECT_EQ(::ckptdb::testing::Steps(**reader), std::vector<int64_t>{1});
  // The three ranks that wrote uploaded their files; Abort deleted them.
  EXPECT_TRUE(Keys(DataDir(2)).empty());
  EXPECT_EQ(Keys(DataDir(1)).size(), 4u);
  auto whole = LoadWhole(**reader, 1);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(std::get<Tensor>(*whole->Find("t")).BitwiseEquals(full));
}

// An object that is not what its rank uploaded when the coordinator checks
// it (here: cut to half its size after the upload) keeps the step from being
// committed.
TEST_F(BucketStoreTest, AnObjectOfTheWrongSizeIsNotCommitted) {
  const Tensor full = PatternTensor(DType::kF32, {64, 48}, 6);
  std::string cut;
  auto truncate = [&](int rank, const WriteResult& r) {
    if (rank != 1) return;
    cut = r.files.at(0).substr(0, r.files.at(0).find(' '));
    auto bytes = client_->GetObject(bucket_, cut);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    ASSERT_TRUE(client_->PutObject(bucket_, cut, bytes->substr(0, bytes->size() / 2)).ok());
  };
  const std::vector<Status> statuses = SaveRows(full, 2, 8, -1, {}, {}, nullptr, truncate);
  for (const Status& st : SaveRows(full, 2, 9)) ASSERT_TRUE(st.ok()) << st;  // (a store to read)
  EXPECT_EQ(statuses[0].code(), StatusCode::kDataLoss) << statuses[0];
  EXPECT_NE(statuses[0].ToString().find(cut), std::string::npos) << statuses[0];
  auto reader = OpenBucketStoreReader(client_, bucket_, prefix_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->ReadMetadata(8).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Keys(DataDir(8)).empty());
}

TEST_F(BucketStoreTest, TwoJobsRacingForOneStepExactlyOneCommits) {
  const Tensor a = PatternTensor(DType::kF32, {32, 64}, 1);
  const Tensor b = PatternTensor(DType::kF32, {32, 64}, 2);
  // Both coordinators reach Finish (both passed Prepare, both uploaded)
  // before either writes the step record.
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  auto gate = [&] {
    std::unique_lock<std::mutex> lock(mu);
    ++arrived;
    cv.notify_all();
    cv.wait_for(lock, std::chrono::seconds(30), [&] { return arrived >= 2; });
  };
  std::vector<Status> job_a, job_b;
  std::thread ta([&] { job_a = SaveRows(a, 2, 7, -1, {}, gate); });
  std::thread tb([&] { job_b = SaveRows(b, 2, 7, -1, {}, gate); });
  ta.join();
  tb.join();
  ASSERT_EQ(arrived, 2);
  const bool a_won = job_a[0].ok();
  const std::vector<Status>& loser = a_won ? job_b : job_a;
  EXPECT_NE(job_a[0].ok(), job_b[0].ok()) << job_a[0] << " / " << job_b[0];
  EXPECT_EQ(loser[0].code(), StatusCode::kAlreadyExists) << loser[0];
  EXPECT_NE(loser[0].ToString().find("step 7 was committed"), std::string::npos) << loser[0];

  auto reader = OpenBucketStoreReader(client_, bucket_, prefix_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto whole = LoadWhole(**reader, 7);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(std::get<Tensor>(*whole->Find("t")).BitwiseEquals(a_won ? a : b));
  // Only the winner's objects remain: the loser's Abort deleted its own.
  std::set<std::string> saves;
  const std::string dir = DataDir(7);
  for (const std::string& k : Keys(dir)) saves.insert(k.substr(dir.size(), 16));
  EXPECT_EQ(saves.size(), 1u);
}

// A rank that loads its own rows of a step 8 ranks saved opens the object
// that holds them, not one per rank: its requests do not grow with the
// world that saved (before: a tail GET of every rank's object).
TEST_F(BucketStoreTest, ALoadOfOneRanksRowsReadsOnlyTheObjectThatHoldsThem) {
  const Tensor full = PatternTensor(DType::kF32, {64, 32}, 23);
  for (const Status& st : SaveRows(full, 8, 1)) ASSERT_TRUE(st.ok()) << st;
  ::ckptdb::testing::S3FaultProxy proxy(Server().port);
  auto reader = ReaderThrough(proxy);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const int opened = proxy.requests();
  StateDict target;
  (void)target.Add("t", Shard2d(full, 3, 8, /*by_rows=*/true, /*zeros=*/true));
  LoadOptions o;
  o.step = 1;
  o.no_dist = true;
  ASSERT_TRUE(Load(target, **reader, o).ok());
  const Shard& got = std::get<ShardedTensor>(*target.Find("t")).local_shards()[0];
  EXPECT_TRUE(got.tensor.BitwiseEquals(Slice(full, got.offsets, got.tensor.shape())));
  // The step's record, the tail of rank 3's object and its chunk (which the
  // tail's GET may hold already): at most 3, where it was 1 + 8 + 1.
  EXPECT_LE(proxy.requests() - opened, 3);
}

// The commit's answer lost (the server wrote the index, the connection
// broke, no retry left): Finish reads the index back and finds its own
// save. When that read fails too, the save fails, but Abort keeps the
// objects of a step that may be this save's.
TEST_F(BucketStoreTest, ACommitWhoseAnswerIsLostIsReadBackAndNeverAborted) {
  using Action = ::ckptdb::testing::S3FaultProxy::Action;
  ::ckptdb::testing::S3FaultProxy proxy(Server().port);
  s3::S3Settings settings = Server().settings;
  settings.endpoint = proxy.endpoint();
  s3::S3ClientOptions co;
  co.max_attempts = 1;
  auto made = s3::S3Client::Create(settings, co);
  ASSERT_TRUE(made.ok()) << made.status();
  std::shared_ptr<s3::S3Client> coordinator = std::move(*made);
  // The server's conditional writes and its checks of CRCs were probed once
  // (a writer's first write does it, and the verdict is kept): not among the
  // requests counted.
  ASSERT_TRUE(ConditionalWriteVerdict(coordinator.get(), bucket_, prefix_).ok());
  ASSERT_TRUE(Crc32cVerdict(coordinator.get(), bucket_, prefix_));
  options_.deduplicate = false;
  const Tensor full = PatternTensor(DType::kF32, {32, 32}, 21);
  for (const Status& st : SaveRows(full, 1, 0)) ASSERT_TRUE(st.ok()) << st;  // the index exists
  // The coordinator's requests: GET of the index and PUT of its pending
  // marker (Prepare), PUT of its data object and the HEAD checking it
  // (Write), HEAD of it again and PUT of the record (Finish), GET of the
  // index, then its conditional PUT.
  const std::vector<Action> commit(7, Action::kPass);
  std::vector<Action> script = commit;
  script.push_back(Action::kLoseResponse);
  proxy.Script(script);
  for (const Status& st : SaveRows(full, 1, 1, -1, {}, {}, coordinator)) ASSERT_TRUE(st.ok()) << st;
  // ... and then the read-back fails as well.
  script.push_back(Action::kResetBeforeSending);
  proxy.Script(script);
  for (const Status& st : SaveRows(full, 1, 2, -1, {}, {}, coordinator)) {
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st;
  }
  auto reader = OpenBucketStoreReader(client_, bucket_, prefix_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  for (int64_t step : {1, 2}) {
    auto whole = LoadWhole(**reader, step);
    ASSERT_TRUE(whole.ok()) << "step " << step << ": " << whole.status();
    EXPECT_TRUE(std::get<Tensor>(*whole->Find("t")).BitwiseEquals(full)) << "step " << step;
  }
}

TEST_F(BucketStoreTest, ADamagedRecordIsDataLossAndAMissingObjectIsNamed) {
  const Tensor full = PatternTensor(DType::kF32, {32, 32}, 9);
  options_.deduplicate = false;  // (step 5 writes its own objects)
  for (const Status& st : SaveRows(full, 2, 4)) ASSERT_TRUE(st.ok()) << st;
  for (const Status& st : SaveRows(full, 2, 5)) ASSERT_TRUE(st.ok()) << st;

  // Step 4's record with one byte of its payload flipped.
  const std::vector<std::string> records = Keys(prefix_ + "steps/00000000000000000004/");
  ASSERT_EQ(records.size(), 1u);
  const std::string record = records[0];
  auto value = client_->GetObject(bucket_, record);
  ASSERT_TRUE(value.ok()) << value.status();
  std::string damaged = *value;
  damaged[damaged.size() / 2] ^= 0x04;
  ASSERT_TRUE(client_->PutObject(bucket_, record, damaged).ok());
  auto reader = OpenBucketStoreReader(client_, bucket_, prefix_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto md = (*reader)->ReadMetadata(4);
  EXPECT_EQ(md.status().code(), StatusCode::kDataLoss) << md.status();
  EXPECT_NE(md.status().message().find(record), std::string::npos) << md.status();

  // One of step 5's data objects deleted: the load fails naming it.
  const std::vector<std::string> data = Keys(DataDir(5));
  ASSERT_EQ(data.size(), 2u);
  ASSERT_TRUE(client_->DeleteObject(bucket_, data[1]).ok());
  auto whole = LoadWhole(**reader, 5);
  ASSERT_FALSE(whole.ok());
  EXPECT_NE(whole.status().message().find(data[1]), std::string::npos) << whole.status();
}

// A step of several entries: a load of one reads the record's head and that
// entry's pieces only (two requests), so damage in another entry's pieces
// does not stop it; reading the damaged entry, or the whole step, names it.
// A record of the earlier layout (version 1, stores written before) loads
// as before.
TEST_F(BucketStoreTest, ALoadOfOneEntryReadsItsPiecesAloneAndOldRecordsStillLoad) {
  StateDict sd;
  for (int i = 0; i < 6; ++i) (void)sd.Add("e" + std::to_string(i), PatternTensor(DType::kF32, {16, 8}, 30 + i));
  std::string record;
  std::string value;
  ASSERT_NO_FATAL_FAILURE(SaveStepOne(sd, &record, &value));
  auto head_end = StepRecordHeadEnd(value);
  ASSERT_TRUE(head_end.ok()) << head_end.status();
  ASSERT_GT(*head_end, 0u) << "a new step's record has a head (version 3)";
  auto head = DecodeStepRecordHead(value);
  ASSERT_TRUE(head.ok()) << head.status();
  ASSERT_EQ(head->pieces.size(), 6u);

  // Entry e4's pieces value damaged in place.
  std::string damaged = value;
  damaged[head->pieces[4][0].offset + head->pieces[4][0].size / 2] ^= 0x10;
  ASSERT_TRUE(client_->PutObject(bucket_, record, damaged).ok());

  ::ckptdb::testing::S3FaultProxy proxy(Server().port);
  auto reader = ReaderThrough(proxy);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const int opened = proxy.requests();
  auto one = (*reader)->ReadMetadataOf(1, {"e2"});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(proxy.requests() - opened, 2) << "the head, then e2's pieces";
  for (const EntryMetadata& e : one->entries) EXPECT_EQ(e.pieces_omitted, e.fqn != "e2") << e.fqn;
  StateDict target;
  (void)target.Add("e2", Tensor::Zeros(DType::kF32, {16, 8}).value());
  LoadOptions lo;
  lo.step = 1;
  lo.no_dist = true;
  ASSERT_TRUE(Load(target, **reader, lo).ok());
  EXPECT_TRUE(std::get<Tensor>(*target.Find("e2")).BitwiseEquals(PatternTensor(DType::kF32, {16, 8}, 32)));

  auto bad = (*reader)->ReadMetadataOf(1, {"e4"});
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss) << bad.status();
  EXPECT_NE(bad.status().message().find("'e4'"), std::string::npos) << bad.status();
  auto whole = (*reader)->ReadMetadata(1);
  EXPECT_EQ(whole.status().code(), StatusCode::kDataLoss) << whole.status();
  EXPECT_NE(whole.status().message().find("'e4'"), std::string::npos) << whole.status();

  // The same step in a version-1 record, as an earlier release wrote it.
  auto undamaged = DecodeWholeStepRecord(value);
  ASSERT_TRUE(undamaged.ok()) << undamaged.status();
  StepRecord v1;
  v1.metadata_value = EncodeMetadataValue(undamaged->metadata);
  v1.objects = undamaged->objects;
  ASSERT_TRUE(client_->PutObject(bucket_, record, EncodeStepRecord(v1)).ok());
  auto old_reader = OpenBucketStoreReader(client_, bucket_, prefix_);
  ASSERT_TRUE(old_reader.ok()) << old_reader.status();
  auto all = LoadWhole(**old_reader, 1);
  ASSERT_TRUE(all.ok()) << all.status();
  for (int i = 0; i < 6; ++i) {
    EXPECT_TRUE(std::get<Tensor>(*all->Find("e" + std::to_string(i)))
                    .BitwiseEquals(PatternTensor(DType::kF32, {16, 8}, 30 + i)))
        << i;
  }
  auto of = (*old_reader)->ReadMetadataOf(1, {"e4"});
  ASSERT_TRUE(of.ok()) << of.status();
  EXPECT_FALSE(of->Find("e4")->pieces_omitted);
}

// Version-3 records: an entry of 300 one-row pieces is kept in 5 pages,
// and a load of rows 130-139 GETs the head and page 2 alone (2 requests),
// so it works with page 0 damaged, while a whole read fails DataLoss naming
// that page. The same step in a version-2 record (one pieces value per
// entry, as written before pages) loads whole and by region.
TEST_F(BucketStoreTest, AnEntryOfManyPiecesLoadsOnlyThePagesItsRegionsMeet) {
  const Tensor full = PatternTensor(DType::kF32, {300, 8}, 41);
  auto rows = [&](int64_t begin, int64_t end, int64_t per, bool zero) {
    std::vector<Shard> shards;
    for (int64_t r = begin; r < end; r += per) {
      Tensor t = Tensor::Zeros(DType::kF32, {per, 8}).value();
      if (!zero) std::memcpy(t.data(), static_cast<const char*>(full.data()) + r * 8 * 4, per * 8 * 4);
      shards.push_back(Shard{{r, 0}, t});
    }
    return ShardedTensor::Create(DType::kF32, {300, 8}, std::move(shards)).value();
  };
  StateDict sd;
  (void)sd.Add("w", rows(0, 300, 1, false));
  (void)sd.Add("s", PatternTensor(DType::kI32, {4}, 42));
  std::string record;
  std::string value;
  ASSERT_NO_FATAL_FAILURE(SaveStepOne(sd, &record, &value));
  auto head = DecodeStepRecordHead(value);
  ASSERT_TRUE(head.ok()) << head.status();
  ASSERT_EQ(head->pages.size(), 2u);
  EXPECT_EQ(head->pages[0].size(), 5u);
  EXPECT_EQ(head->pieces[0].size(), 5u);
  EXPECT_TRUE(head->pages[1].empty());
  EXPECT_EQ(head->pieces[1].size(), 1u);
  auto load_rows = [&](StoreReader& r, int64_t begin, int64_t end) -> Status {
    StateDict target;
    (void)target.Add("w", rows(begin, end, end - begin, true));
    LoadOptions lo;
    lo.step = 1;
    lo.no_dist = true;
    if (Status loaded = Load(target, r, lo); !loaded.ok()) return loaded;
    const Shard& got = std::get<ShardedTensor>(*target.Find("w")).local_shards()[0];
    EXPECT_EQ(std::memcmp(got.tensor.data(), static_cast<const char*>(full.data()) + begin * 8 * 4, (end - begin) * 8 * 4),
              0);
    return Status::OK();
  };

  // Page 0's value damaged in place.
  std::string damaged = value;
  damaged[head->pieces[0][0].offset + head->pieces[0][0].size / 2] ^= 0x10;
  ASSERT_TRUE(client_->PutObject(bucket_, record, damaged).ok());
  ::ckptdb::testing::S3FaultProxy proxy(Server().port);
  auto reader = ReaderThrough(proxy);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const int opened = proxy.requests();
  auto some = (*reader)->ReadMetadataFor(1, {"w"}, {EntryRegion{"w", {130, 0}, {10, 8}}});
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_EQ(proxy.requests() - opened, 2) << "the head, then page 2";
  EXPECT_TRUE(some->Find("w")->pieces_partial);
  EXPECT_EQ(some->Find("w")->pieces.size(), 64u);
  { Status loaded = load_rows(**reader, 130, 140); ASSERT_TRUE(loaded.ok()) << loaded; }
  Status st = load_rows(**reader, 0, 10);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
  EXPECT_NE(st.ToString().find("page 0 of the pieces of entry 'w' of step 1"), std::string::npos) << st;
  st = (*reader)->ReadMetadata(1).status();
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;

  // Version 2, as written before pages.
  auto undamaged = DecodeWholeStepRecord(value);
  ASSERT_TRUE(undamaged.ok()) << undamaged.status();
  ASSERT_TRUE(client_->PutObject(bucket_, record,
                                 EncodeHeadedStepRecord(undamaged->metadata, undamaged->objects, 2))
                  .ok());
  auto old_reader = OpenBucketStoreReader(client_, bucket_, prefix_);
  ASSERT_TRUE(old_reader.ok()) << old_reader.status();
  auto of = (*old_reader)->ReadMetadataFor(1, {"w"}, {EntryRegion{"w", {130, 0}, {10, 8}}});
  ASSERT_TRUE(of.ok()) << of.status();
  EXPECT_FALSE(of->Find("w")->pieces_partial);
  EXPECT_EQ(of->Find("w")->pieces.size(), 300u);
  { Status loaded = load_rows(**old_reader, 130, 140); ASSERT_TRUE(loaded.ok()) << loaded; }
  { Status loaded = load_rows(**old_reader, 0, 300); ASSERT_TRUE(loaded.ok()) << loaded; }
}

// A load of a few rows of each of several entries kept in pages reads a
// page of each: pages that do not lie side by side in the record, a GET
// each. Against a server slow to answer they are fetched at once, not one
// after another (a rank's metadata read took a round trip per entry).
TEST_F(BucketStoreTest, ThePagesOfSeveralEntriesAreFetchedAtOnce) {
  const std::vector<std::string> names = {"a", "b", "c", "d"};
  StateDict sd;
  for (size_t i = 0; i < names.size(); ++i) {
    const Tensor full = PatternTensor(DType::kF32, {300, 8}, 50 + static_cast<int>(i));
    std::vector<Shard> shards;
    for (int64_t r = 0; r < 300; ++r) {
      Tensor t = Tensor::Zeros(DType::kF32, {1, 8}).value();
      std::memcpy(t.data(), static_cast<const char*>(full.data()) + r * 8 * 4, 8 * 4);
      shards.push_back(Shard{{r, 0}, t});
    }
    (void)sd.Add(names[i], ShardedTensor::Create(DType::kF32, {300, 8}, std::move(shards)).value());
  }
  std::string record, value;
  ASSERT_NO_FATAL_FAILURE(SaveStepOne(sd, &record, &value));
  ::ckptdb::testing::S3FaultProxy proxy(Server().port);
  auto reader = ReaderThrough(proxy);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const int opened = proxy.requests();
  using Action = ::ckptdb::testing::S3FaultProxy::Action;
  proxy.set_late_answer_ms(300);
  proxy.Script(std::vector<Action>(1 + names.size(), Action::kAnswerLate));
  std::vector<EntryRegion> regions;
  for (const std::string& n : names) regions.push_back(EntryRegion{n, {130, 0}, {10, 8}});
  auto some = (*reader)->ReadMetadataFor(1, names, regions);
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_EQ(proxy.requests() - opened, 1 + static_cast<int>(names.size())) << "the head, then page 2 of each";
  EXPECT_GE(proxy.most_in_flight(), 2);
  for (const std::string& n : names) {
    EXPECT_TRUE(some->Find(n)->pieces_partial) << n;
    EXPECT_EQ(some->Find(n)->pieces.size(), 64u) << n;
  }
}

TEST(BucketStepRecordTest, Version3RoundTripsAndRefusesDamage) {
  StateDict sd;
  (void)sd.Add("a", PatternTensor(DType::kF32, {4, 4}, 1));
  (void)sd.Add("b", PatternTensor(DType::kF32, {2}, 2));
  // A real step's metadata, as the save of these two makes it.
  ::ckptdb::testing::TempDir dir;
  auto w = OpenStoreWriter(dir.Sub("s"));
  ASSERT_TRUE(w.ok()) << w.status();
  SaveOptions o;
  o.step = 3;
  o.no_dist = true;
  ASSERT_TRUE(Save(sd, **w, o).ok());
  auto r = OpenStoreReader(dir.Sub("s"));
  ASSERT_TRUE(r.ok()) << r.status();
  auto md = (*r)->ReadMetadata(3);
  ASSERT_TRUE(md.ok()) << md.status();
  const std::vector<SstObject> objects{SstObject{"p/data/x/rank-0-0.sst", 123, "k0", "k9"}};
  const std::string v = EncodeHeadedStepRecord(*md, objects);
  auto whole = DecodeWholeStepRecord(v);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(EncodeMetadataValue(whole->metadata), EncodeMetadataValue(*md));
  ASSERT_EQ(whole->objects.size(), 1u);
  EXPECT_EQ(whole->objects[0].key, objects[0].key);
  auto head = DecodeStepRecordHead(std::string_view(v).substr(0, *StepRecordHeadEnd(v)));
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_TRUE(head->summary.Find("a")->pieces_omitted);
  EXPECT_EQ(head->pieces.size(), 2u);
  // Cut anywhere, or a byte of the head flipped: DataLoss, never a step.
  for (size_t cut : {size_t{5}, size_t{30}, v.size() / 2, v.size() - 1}) {
    EXPECT_EQ(DecodeWholeStepRecord(v.substr(0, cut)).status().code(), StatusCode::kDataLoss) << cut;
  }
  std::string flipped = v;
  flipped[40] ^= 0x01;
  EXPECT_EQ(DecodeWholeStepRecord(flipped).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(StepRecordHeadEnd("not a record").status().code(), StatusCode::kDataLoss);
}

TEST(BucketStepRecordTest, RoundTripsAndRefusesTruncation) {
  StepRecord r;
  r.metadata_value = "metadata";
  r.objects.push_back(SstObject{"p/data/x/rank-0-0.sst", 123, std::string("\0a", 2), "zz"});
  const std::string v = EncodeStepRecord(r);
  auto back = DecodeStepRecord(v);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->metadata_value, "metadata");
  ASSERT_EQ(back->objects.size(), 1u);
  EXPECT_EQ(back->objects[0].key, r.objects[0].key);
  EXPECT_EQ(back->objects[0].size, 123u);
  EXPECT_EQ(back->objects[0].smallest_key, r.objects[0].smallest_key);
  EXPECT_EQ(back->objects[0].largest_key, "zz");
  EXPECT_EQ(DecodeStepRecord(v.substr(0, v.size() - 1)).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(StepRecordKey("p/", 12, 0xab), "p/steps/00000000000000000012/00000000000000ab");
  EXPECT_EQ(SaveDataPrefix("p/", 12, 0xab), "p/data/00000000000000000012/00000000000000ab/");
}

}  // namespace
}  // namespace bucket
}  // namespace ckptdb

namespace ckptdb {
namespace bucket {
namespace {

// A rank's share is cut into objects of upload_file_bytes, streamed while
// they are written, with nothing written to the local disk (TMPDIR pointed
// at an empty directory stays empty); the step loads bit for bit.
TEST_F(BucketStoreTest, ARanksShareStreamsIntoObjectsWithNoLocalFile) {
  const Tensor full = PatternTensor(DType::kF32, {512, 512}, 12);  // 1 MiB
  ::ckptdb::testing::TempDir local;
  // Put back when the test ends, pass or fail: the tests after it in this
  // process make their temporary directories under TMPDIR.
  struct RestoreTmpdir {
    std::optional<std::string> was;
    ~RestoreTmpdir() { was.has_value() ? setenv("TMPDIR", was->c_str(), 1) : unsetenv("TMPDIR"); }
  } restore{std::getenv("TMPDIR") != nullptr ? std::optional<std::string>(std::getenv("TMPDIR")) : std::nullopt};
  setenv("TMPDIR", local.path().c_str(), 1);
  BucketWriteOptions wo;
  wo.upload_file_bytes = 64 << 10;
  for (const Status& st : SaveRows(full, 2, 1, -1, wo)) ASSERT_TRUE(st.ok()) << st;
  EXPECT_TRUE(std::filesystem::is_empty(local.path()));
  const std::vector<std::string> data = Keys(DataDir(1));
  EXPECT_GE(data.size(), 16u);  // 512 KiB a rank, in files of 64 KiB
  auto reader = OpenBucketStoreReader(client_, bucket_, prefix_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto whole = LoadWhole(**reader, 1);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(std::get<Tensor>(*whole->Find("t")).BitwiseEquals(full));
}

// The server goes away while a rank uploads: the save fails (Unavailable),
// nothing is visible, and gc takes what was uploaded.
TEST_F(BucketStoreTest, AnUploadThatFailsMidWayFailsTheSave) {
  using Action = ::ckptdb::testing::S3FaultProxy::Action;
  ::ckptdb::testing::S3FaultProxy proxy(Server().port);
  s3::S3Settings settings = Server().settings;
  settings.endpoint = proxy.endpoint();
  s3::S3ClientOptions co;
  co.max_attempts = 2;
  co.initial_backoff_ms = 1;
  auto made = s3::S3Client::Create(settings, co);
  ASSERT_TRUE(made.ok()) << made.status();
  std::shared_ptr<s3::S3Client> coordinator = std::move(*made);
  ASSERT_TRUE(ConditionalWriteVerdict(coordinator.get(), bucket_, prefix_).ok());  // (probed once, not counted)
  const Tensor full = PatternTensor(DType::kF32, {512, 512}, 13);
  options_.deduplicate = false;
  for (const Status& st : SaveRows(full, 1, 1)) ASSERT_TRUE(st.ok()) << st;
  BucketWriteOptions wo;
  wo.upload_file_bytes = 64 << 10;
  // Prepare and the first uploads pass; then every request is reset.
  std::vector<Action> script(6, Action::kPass);
  script.resize(200, Action::kResetBeforeSending);
  proxy.Script(script);
  const std::vector<Status> statuses = SaveRows(full, 1, 2, -1, wo, {}, coordinator);
  EXPECT_EQ(statuses[0].code(), StatusCode::kUnavailable) << statuses[0];
  auto reader = OpenBucketStoreReader(client_, bucket_, prefix_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(::ckptdb::testing::Steps(**reader), std::vector<int64_t>{1});
  StoreOptions o;
  o.abandoned_save_seconds = 0;
  auto w = OpenBucketStoreWriter(client_, bucket_, prefix_, o);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->Sweep().ok());
  EXPECT_TRUE(Keys(DataDir(2)).empty());
}

}  // namespace
}  // namespace bucket
}  // namespace ckptdb
