// gc rewriting a bucket's partly used objects (StoreWriter::ReclaimSpace on
// s3://, bucket/object_rewrite.h), against the tests' SeaweedFS:
//   - the fine-tuning case of issue 35: a frozen tensor saved once and an
//     adapter that changes every step, under keep_last 2, left 1.5x one
//     step's bytes in the bucket; after gc it is 1.25x, every kept step
//     loads bit for bit, and so does a later save that deduplicates against
//     them;
//   - the replaced objects stay for abandoned_save_seconds: a reader that
//     read the index before the rewrite still loads, a refreshed one reads
//     the new objects;
//   - nothing is rewritten while a save runs, and a save that read the
//     objects before a rewrite is refused at its commit (Aborted, nothing
//     committed);
//   - a failed rewrite's objects stay while its marker is young and go after,
//     and gc killed at any of its requests loses nothing and, once the
//     threshold passed, leaves nothing;
//   - the index's version 2 (with rewritten saves) round-trips, and an index
//     without them is still written as version 1.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bucket/bucket_index.h"
#include "bucket/bucket_store.h"
#include "ckptdb/ckptdb.h"
#include "format/chunk_codec.h"
#include "s3/s3_client.h"
#include "s3_fault_proxy.h"
#include "s3_test_server.h"
#include "test_util.h"
#include "thread_communicator.h"
#include "util/status_macros.h"

namespace ckptdb {
namespace bucket {
namespace {

using ::ckptdb::testing::FaultyWriter;
using ::ckptdb::testing::PatternTensor;

const ::ckptdb::testing::S3TestServer& Server() { return ::ckptdb::testing::TestS3Server(); }

// 3 MiB frozen, 1 MiB that changes every step (seeded by the step).
constexpr int64_t kFrozenRows = 768, kAdapterRows = 256, kCols = 1024;

StateDict FineTuningStep(int64_t step) {
  StateDict sd;
  (void)sd.Add("frozen", PatternTensor(DType::kF32, {kFrozenRows, kCols}, 7));
  (void)sd.Add("adapter", PatternTensor(DType::kF32, {kAdapterRows, kCols}, static_cast<uint32_t>(100 + step)));
  return sd;
}

class BucketRewriteTest : public ::ckptdb::testing::S3ServerTest {
 protected:
  void SetUp() override {
    S3ServerTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    prefix_ = StorePrefix(prefix_);
  }

  std::unique_ptr<StoreWriter> Writer(int64_t abandoned_save_seconds, std::shared_ptr<s3::S3Client> client = nullptr) {
    StoreOptions o;
    o.compression = Compression::kNone;
    o.chunk_bytes = 64 << 10;  // (a rewrite copies runs of many chunks)
    o.retention.keep_last = 2;
    o.abandoned_save_seconds = abandoned_save_seconds;
    auto w = OpenBucketStoreWriter(client != nullptr ? client : client_, Server().bucket, prefix_, o);
    EXPECT_TRUE(w.ok()) << w.status();
    return std::move(*w);
  }

  // Saves step `step` holding what FineTuningStep(content) holds.
  static Status SaveStep(StorageWriter& w, int64_t step, int64_t content = -1) {
    SaveOptions o;
    o.step = step;
    o.no_dist = true;
    return Save(FineTuningStep(content < 0 ? step : content), w, o);
  }

  std::unique_ptr<StoreReader> Reader() {
    auto r = OpenBucketStoreReader(client_, Server().bucket, prefix_);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }

  // Loads step `step` and compares it with FineTuningStep(content).
  static Status LoadStep(StoreReader& reader, int64_t step, int64_t content = -1) {
    StateDict target;
    (void)target.Add("frozen", Tensor::Zeros(DType::kF32, {kFrozenRows, kCols}).value());
    (void)target.Add("adapter", Tensor::Zeros(DType::kF32, {kAdapterRows, kCols}).value());
    LoadOptions o;
    o.step = step;
    o.no_dist = true;
    RETURN_IF_ERROR(Load(target, reader, o));
    const StateDict want = FineTuningStep(content < 0 ? step : content);
    for (const char* name : {"frozen", "adapter"}) {
      if (!std::get<Tensor>(*target.Find(name)).BitwiseEquals(std::get<Tensor>(*want.Find(name)))) {
        return Status::DataLoss(std::string(name) + " of step " + std::to_string(step) + " differs");
      }
    }
    return Status::OK();
  }

  // A client whose requests go through `proxy`, trying each `attempts` times.
  static std::shared_ptr<s3::S3Client> ClientThrough(const ::ckptdb::testing::S3FaultProxy& proxy, int attempts) {
    s3::S3Settings settings = Server().settings;
    settings.endpoint = proxy.endpoint();
    s3::S3ClientOptions co;
    co.max_attempts = attempts;
    co.initial_backoff_ms = 1;
    co.max_backoff_ms = 10;
    auto made = s3::S3Client::Create(settings, co);
    EXPECT_TRUE(made.ok()) << made.status();
    return made.ok() ? std::shared_ptr<s3::S3Client>(std::move(*made)) : nullptr;
  }

  std::vector<s3::ObjectInfo> Listed(const std::string& under) {
    auto all = client_->ListAll(Server().bucket, prefix_ + under);
    EXPECT_TRUE(all.ok()) << all.status();
    return all.ok() ? *all : std::vector<s3::ObjectInfo>{};
  }

  // The bytes of every data object, over one step's (4 MiB and a little).
  double DataOverOneStep() {
    uint64_t bytes = 0;
    for (const s3::ObjectInfo& o : Listed("data/")) bytes += o.size;
    return static_cast<double>(bytes) / static_cast<double>((kFrozenRows + kAdapterRows) * kCols * 4);
  }

  // Data objects gc wrote (in a rewrite's folder: data/<step>/<save>/<id>/).
  size_t RewrittenObjects() {
    size_t n = 0;
    for (const s3::ObjectInfo& o : Listed("data/")) {
      n += o.key.find('/', prefix_.size() + 5 + 38) != std::string::npos ? 1 : 0;
    }
    return n;
  }

  // One object a rewrite left (its index write never landed) and its young
  // marker: `w` (a threshold of an hour) keeps them; a gc that takes every
  // rewrite as past the threshold deletes both; steps 2 and 3 still load.
  void ExpectALeftRewriteGoesPastTheThresholdOnly(StoreWriter& w) {
    ASSERT_TRUE(w.Sweep().ok());
    EXPECT_EQ(RewrittenObjects(), 1u) << "gc deleted the object of a rewrite whose marker is young";
    ASSERT_TRUE(Writer(0)->Sweep().ok());
    EXPECT_EQ(RewrittenObjects(), 0u);
    EXPECT_TRUE(Listed("rewrites/").empty());
    std::unique_ptr<StoreReader> r = Reader();
    for (int64_t step : {2, 3}) {
      Status st = LoadStep(*r, step);
      EXPECT_TRUE(st.ok()) << st;
    }
  }
};

TEST_F(BucketRewriteTest, GcGivesBackTheDeadBytesOfASharedSavesObjects) {
  std::unique_ptr<StoreWriter> w = Writer(3600);
  for (int64_t step = 1; step <= 12; ++step) ASSERT_TRUE(SaveStep(*w, step).ok()) << step;
  std::unique_ptr<StoreReader> before = Reader();
  ASSERT_NE(before, nullptr);
  EXPECT_EQ(::ckptdb::testing::Steps(*before), (std::vector<int64_t>{11, 12}));
  // Step 1's object holds the frozen chunks steps 11 and 12 share, and its
  // own dead adapter.
  const double dead = DataOverOneStep();
  EXPECT_GT(dead, 1.45);

  auto dry = w->ReclaimSpace(ReclaimOptions{0.05, /*dry_run=*/true});
  ASSERT_TRUE(dry.ok()) << dry.status();
  EXPECT_EQ(dry->files_rewritten, 1u);
  EXPECT_EQ(RewrittenObjects(), 0u);

  auto reclaimed = w->ReclaimSpace(ReclaimOptions{});
  ASSERT_TRUE(reclaimed.ok()) << reclaimed.status();
  EXPECT_EQ(reclaimed->files_rewritten, 1u);
  EXPECT_EQ(reclaimed->saves_running, 0u);
  EXPECT_LT(reclaimed->bytes_after, reclaimed->bytes_before * 4 / 5);
  EXPECT_GT(reclaimed->bytes_after, reclaimed->bytes_before * 7 / 10);  // (the frozen 3 of 4 MiB)
  EXPECT_EQ(RewrittenObjects(), 1u);
  EXPECT_EQ(Listed("rewrites/").size(), 1u);
  // The object it replaced stays for abandoned_save_seconds: a reader that
  // read the index before still loads from it.
  EXPECT_GT(DataOverOneStep(), dead + 0.5);
  for (int64_t step : {11, 12}) {
    Status st = LoadStep(*before, step);
    EXPECT_TRUE(st.ok()) << st;
    std::unique_ptr<StoreReader> now = Reader();
    st = LoadStep(*now, step);
    EXPECT_TRUE(st.ok()) << st;
  }

  // gc taking every save (and rewrite) as past the threshold deletes it.
  std::unique_ptr<StoreWriter> eager = Writer(0);
  ASSERT_TRUE(eager->Sweep().ok());
  const double after = DataOverOneStep();
  EXPECT_LE(after, 1.3) << "before gc: " << dead;
  EXPECT_TRUE(Listed("rewrites/").empty());
  for (int64_t step : {11, 12}) {
    std::unique_ptr<StoreReader> now = Reader();
    Status st = LoadStep(*now, step);
    EXPECT_TRUE(st.ok()) << st;
  }
  // The reader of before the rewrite no longer finds the object it names;
  // refreshed, it reads the new one.
  Status stale = LoadStep(*before, 12);
  EXPECT_FALSE(stale.ok());
  EXPECT_EQ(stale.code(), StatusCode::kDataLoss) << stale;
  EXPECT_NE(stale.ToString().find("data/00000000000000000001/"), std::string::npos) << stale;
  ASSERT_TRUE(before->Refresh().ok());
  Status refreshed = LoadStep(*before, 12);
  EXPECT_TRUE(refreshed.ok()) << refreshed;

  // A later save deduplicates against step 12, whose record names the
  // replaced object: it reads and refers to the new one.
  ASSERT_TRUE(SaveStep(*w, 13).ok());
  ASSERT_TRUE(SaveStep(*w, 14).ok());  // (drops steps 12 and 13)
  ASSERT_TRUE(eager->Sweep().ok());
  std::unique_ptr<StoreReader> last = Reader();
  EXPECT_EQ(::ckptdb::testing::Steps(*last), (std::vector<int64_t>{13, 14}));
  for (int64_t step : {13, 14}) {
    Status st = LoadStep(*last, step);
    EXPECT_TRUE(st.ok()) << st;
  }
  EXPECT_LE(DataOverOneStep(), 1.3);
  // Nothing more to rewrite: the rewritten object holds used chunks only.
  auto again = eager->ReclaimSpace(ReclaimOptions{});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->files_rewritten, 0u);
}

TEST_F(BucketRewriteTest, NothingIsRewrittenWhileASaveRunsAndASaveThatReadTheOldObjectsIsRefused) {
  std::unique_ptr<StoreWriter> w = Writer(3600);
  for (int64_t step = 1; step <= 3; ++step) ASSERT_TRUE(SaveStep(*w, step).ok()) << step;
  std::unique_ptr<StoreWriter> gc = Writer(3600);
  std::unique_ptr<StoreWriter> eager = Writer(0);
  FaultyWriter slow(w.get());
  slow.on_finish = [&] {
    // Step 4 has read step 3's record (it holds what step 3 holds, so it
    // shares every chunk and uploads nothing that gc could take).
    auto waited = gc->ReclaimSpace(ReclaimOptions{});
    EXPECT_TRUE(waited.ok()) << waited.status();
    if (waited.ok()) {
      EXPECT_EQ(waited->saves_running, 1u);
      EXPECT_EQ(waited->files_rewritten, 0u);
    }
    EXPECT_EQ(RewrittenObjects(), 0u);
    // A gc that takes every save as dead rewrites under it.
    auto rewrote = eager->ReclaimSpace(ReclaimOptions{});
    EXPECT_TRUE(rewrote.ok()) << rewrote.status();
    if (rewrote.ok()) {
      EXPECT_EQ(rewrote->files_rewritten, 1u);
    }
    return Status::OK();
  };
  Status refused = SaveStep(slow, 4, /*content=*/3);
  EXPECT_EQ(refused.code(), StatusCode::kAborted) << refused;
  EXPECT_NE(refused.ToString().find("gc rewrote"), std::string::npos) << refused;
  std::unique_ptr<StoreReader> r = Reader();
  EXPECT_EQ(::ckptdb::testing::Steps(*r), (std::vector<int64_t>{2, 3}));
  for (int64_t step : {2, 3}) {
    Status st = LoadStep(*r, step);
    EXPECT_TRUE(st.ok()) << st;
  }
  // Saved again, it reads the rewritten objects.
  ASSERT_TRUE(SaveStep(*w, 4, /*content=*/3).ok());
  ASSERT_TRUE(eager->Sweep().ok());
  r = Reader();
  for (int64_t step : {3, 4}) {
    Status st = LoadStep(*r, step, /*content=*/3);
    EXPECT_TRUE(st.ok()) << st;
  }
}

TEST_F(BucketRewriteTest, AFailedRewritesObjectsStayWhileItsMarkerIsYoung) {
  std::unique_ptr<StoreWriter> w = Writer(3600);
  for (int64_t step = 1; step <= 3; ++step) ASSERT_TRUE(SaveStep(*w, step).ok()) << step;
  // A rewrite of step 1's save that died after uploading an object.
  std::string data;
  for (const s3::ObjectInfo& o : Listed("data/00000000000000000001/")) data = o.key;
  ASSERT_FALSE(data.empty());
  const std::string save = data.substr(0, data.rfind('/') + 1);
  const std::string stray = save + "00000000000000aa/rank-0-0.sst";
  const std::string marker =
      prefix_ + "rewrites/00000000000000000001-" + save.substr(save.size() - 17, 16) + "-00000000000000aa";
  ASSERT_TRUE(client_->PutObject(Server().bucket, stray, "half").ok());
  ASSERT_TRUE(client_->PutObject(Server().bucket, marker, "").ok());
  ExpectALeftRewriteGoesPastTheThresholdOnly(*w);
}

TEST_F(BucketRewriteTest, ARewriteTheServerFailsChangesNothingAndItsLeftoversGo) {
  std::unique_ptr<StoreWriter> w = Writer(3600);
  for (int64_t step = 1; step <= 3; ++step) ASSERT_TRUE(SaveStep(*w, step).ok()) << step;
  ::ckptdb::testing::S3FaultProxy proxy(Server().port);
  std::unique_ptr<StoreWriter> gc = Writer(3600, ClientThrough(proxy, 2));
  auto index_now = [&] { return client_->GetObject(Server().bucket, prefix_ + "index").value(); };
  const std::string index_before = index_now();

  // The new object's upload fails: the error names it, and nothing stays.
  proxy.set_fail_requests_containing("PUT /" + Server().bucket + "/" + prefix_ + "data/");
  auto failed = gc->ReclaimSpace(ReclaimOptions{});
  EXPECT_FALSE(failed.ok());
  EXPECT_NE(failed.status().ToString().find("data/00000000000000000001/"), std::string::npos) << failed.status();
  EXPECT_EQ(index_now(), index_before);
  EXPECT_EQ(RewrittenObjects(), 0u);
  EXPECT_TRUE(Listed("rewrites/").empty());

  // The index write fails: whether it landed is unknown to gc, so the new
  // object and the marker stay; the index does not name the object, and a
  // gc past the threshold deletes them.
  proxy.set_fail_requests_containing("PUT /" + Server().bucket + "/" + prefix_ + "index");
  failed = gc->ReclaimSpace(ReclaimOptions{});
  EXPECT_FALSE(failed.ok());
  proxy.set_fail_requests_containing("");
  EXPECT_EQ(index_now(), index_before);
  EXPECT_EQ(RewrittenObjects(), 1u);
  EXPECT_EQ(Listed("rewrites/").size(), 1u);
  ExpectALeftRewriteGoesPastTheThresholdOnly(*w);
  // The server answering again, the rewrite goes through.
  auto done = gc->ReclaimSpace(ReclaimOptions{});
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->files_rewritten, 1u);
}

// Four ranks' objects per save: after the rewrite, a job's load through the
// shared reader (the coordinator names each rank the objects its chunks lie
// in) and in another sharding gets every row back.
TEST_F(BucketRewriteTest, AJobLoadsRewrittenObjectsOfManyRanksThroughTheSharedReader) {
  ::ckptdb::testing::SetAwsVariablesForTestServer();
  const std::string url = "s3://" + Server().bucket + "/" + prefix_;
  constexpr int kWorld = 4;
  auto save = [&](int64_t step) {
    ::ckptdb::testing::RunRanksAsThreads(kWorld, [&](int rank, Communicator& comm) {
      std::unique_ptr<StoreWriter> w = Writer(3600);
      const StateDict full = FineTuningStep(step);
      StateDict sd;
      for (const char* name : {"frozen", "adapter"}) {
        const Tensor& t = std::get<Tensor>(*full.Find(name));
        const int64_t rows = t.shape()[0] / kWorld, row = kCols * 4;
        Tensor mine = Tensor::Zeros(DType::kF32, {rows, kCols}).value();
        std::memcpy(mine.data(), static_cast<const char*>(t.data()) + rank * rows * row, rows * row);
        (void)sd.Add(name, ShardedTensor::Create(DType::kF32, t.shape(), {Shard{{rank * rows, 0}, mine}}).value());
      }
      SaveOptions o;
      o.step = step;
      o.communicator = &comm;
      Status st = Save(sd, *w, o);
      EXPECT_TRUE(st.ok()) << "rank " << rank << ": " << st;
    });
  };
  for (int64_t step = 1; step <= 3; ++step) save(step);
  auto reclaimed = Writer(0)->ReclaimSpace(ReclaimOptions{});
  ASSERT_TRUE(reclaimed.ok()) << reclaimed.status();
  EXPECT_EQ(reclaimed->files_rewritten, static_cast<uint64_t>(kWorld));  // step 1's object of each rank
  EXPECT_EQ(RewrittenObjects(), static_cast<size_t>(kWorld));
  for (int world : {kWorld, 2}) {
    for (bool shared : {true, false}) {
      ::ckptdb::testing::RunRanksAsThreads(world, [&](int rank, Communicator& comm) {
        auto reader = ::ckptdb::testing::OpenLoadReader(url, comm, shared);
        ASSERT_TRUE(reader.ok()) << reader.status();
        for (int64_t step : {2, 3}) {
          const StateDict full = FineTuningStep(step);
          StateDict sd;
          std::vector<Tensor> targets;
          for (const char* name : {"frozen", "adapter"}) {
            const Tensor& t = std::get<Tensor>(*full.Find(name));
            const int64_t rows = t.shape()[0] / world;
            targets.push_back(Tensor::Zeros(DType::kF32, {rows, kCols}).value());
            (void)sd.Add(name,
                         ShardedTensor::Create(DType::kF32, t.shape(), {Shard{{rank * rows, 0}, targets.back()}})
                             .value());
          }
          LoadOptions o;
          o.step = step;
          o.communicator = &comm;
          Status st = Load(sd, **reader, o);
          ASSERT_TRUE(st.ok()) << "rank " << rank << " of " << world << ", step " << step << ": " << st;
          int k = 0;
          for (const char* name : {"frozen", "adapter"}) {
            const Tensor& t = std::get<Tensor>(*full.Find(name));
            const int64_t rows = t.shape()[0] / world, row = kCols * 4;
            EXPECT_EQ(std::memcmp(targets[k++].data(), static_cast<const char*>(t.data()) + rank * rows * row,
                                  rows * row),
                      0)
                << name << " of step " << step << ", rank " << rank << " of " << world
                << (shared ? " (shared reader)" : " (own reader)");
          }
        }
      });
    }
  }
}

// `ckptdb gc` killed (SIGKILL) at each of its requests in turn, once before
// the request reaches the server and once after the server acted on it:
// every kept step still loads, and a gc that takes every save and rewrite as
// past the threshold leaves exactly the objects the index names.
TEST_F(BucketRewriteTest, GcKilledAtAnyRequestOfARewriteLosesNothingAndLeavesNothing) {
  using Action = ::ckptdb::testing::S3FaultProxy::Action;
  int points = 0, rewritten_at = 0;
  for (const Action hold : {Action::kHoldBeforeSending, Action::kHoldAfterForwarding}) {
    for (int n = 1;; ++n) {
      prefix_ = StorePrefix(::ckptdb::testing::UniqueTestPrefix() + "-" + std::to_string(points));
      {
        std::unique_ptr<StoreWriter> w = Writer(3600);
        for (int64_t step = 1; step <= 3; ++step) ASSERT_TRUE(SaveStep(*w, step).ok()) << step;
      }
      ::ckptdb::testing::S3FaultProxy proxy(Server().port);
      std::vector<Action> script(n - 1, Action::kPass);
      script.push_back(hold);
      proxy.Script(script);
      std::vector<std::string> env = {"AWS_ENDPOINT_URL=" + proxy.endpoint(),
                                      "AWS_ACCESS_KEY_ID=" + Server().settings.credentials.access_key_id,
                                      "AWS_SECRET_ACCESS_KEY=" + Server().settings.credentials.secret_access_key,
                                      "AWS_REGION=us-east-1", "AWS_CONFIG_FILE=/nonexistent",
                                      "AWS_SHARED_CREDENTIALS_FILE=/nonexistent", "PATH=/usr/bin:/bin"};
      const pid_t pid = ::ckptdb::testing::SpawnProcess(
          {CKPTDB_CLI, "gc", "s3://" + Server().bucket + "/" + prefix_}, env);
      bool finished = false;
      for (int i = 0; i < 3000 && proxy.held() == 0; ++i) {
        int status = 0;
        if (waitpid(pid, &status, WNOHANG) == pid) {
          finished = true;
          EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "gc failed: " << status;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (finished) break;  // gc made fewer than n requests: every point is done
      ASSERT_EQ(proxy.held(), 1) << "request " << n << " was never held";
      kill(pid, SIGKILL);
      int status = 0;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      ++points;
      SCOPED_TRACE("gc killed at request " + std::to_string(n) +
                   (hold == Action::kHoldBeforeSending ? " before it reached the server" : " after the server acted"));
      auto index = ReadIndex(client_.get(), Server().bucket, prefix_);
      ASSERT_TRUE(index.ok()) << index.status();
      if (!index->index.rewritten.empty()) ++rewritten_at;
      std::unique_ptr<StoreReader> r = Reader();
      for (int64_t step : {2, 3}) {
        Status st = LoadStep(*r, step);
        EXPECT_TRUE(st.ok()) << st;
      }
      ASSERT_TRUE(Writer(0)->Sweep().ok());
      index = ReadIndex(client_.get(), Server().bucket, prefix_);
      ASSERT_TRUE(index.ok()) << index.status();
      std::set<std::string> named;  // every object the index's steps read now
      for (const auto& [step, st] : index->index.steps) {
        auto record = client_->GetObject(Server().bucket, StepRecordKey(prefix_, step, st.summary.save_id));
        ASSERT_TRUE(record.ok()) << record.status();
        auto whole = DecodeWholeStepRecord(*record);
        ASSERT_TRUE(whole.ok()) << whole.status();
        for (const SstObject& o : ObjectsNow(index->index, prefix_, whole->objects)) named.insert(o.key);
      }
      std::set<std::string> listed;
      for (const s3::ObjectInfo& o : Listed("data/")) listed.insert(o.key);
      EXPECT_EQ(listed, named);
      EXPECT_TRUE(Listed("rewrites/").empty());
      r = Reader();
      for (int64_t step : {2, 3}) {
        Status st = LoadStep(*r, step);
        EXPECT_TRUE(st.ok()) << "after gc: " << st;
      }
      ASSERT_LT(n, 80) << "gc never ends";
    }
  }
  std::printf("killed gc at %d points; the rewrite was committed at %d of them\n", points, rewritten_at);
  EXPECT_GE(points, 10);
  EXPECT_GE(rewritten_at, 1);
}

// 64 entries kept, each beside one that changes, cut into objects of about
// 300 KiB: every object of the first step is partly used.
StateDict ManyObjectsStep(int64_t step) {
  StateDict sd;
  for (int i = 0; i < 64; ++i) {
    (void)sd.Add("layer" + std::to_string(1000 + i) + ".a", PatternTensor(DType::kF32, {64, 1024}, 7 + i));
    (void)sd.Add("layer" + std::to_string(1000 + i) + ".b",
                 PatternTensor(DType::kF32, {16, 1024}, static_cast<uint32_t>(step * 100 + i)));
  }
  return sd;
}

TEST_F(BucketRewriteTest, ManyObjectsAreRewrittenSeveralAtOnceAndAFailureLeavesNoneBehind) {
  StoreOptions o;
  o.compression = Compression::kNone;
  o.chunk_bytes = 64 << 10;
  o.retention.keep_last = 2;
  BucketWriteOptions wo;
  wo.upload_file_bytes = 300 << 10;
  auto w = OpenBucketStoreWriter(client_, Server().bucket, prefix_, o, wo);
  ASSERT_TRUE(w.ok()) << w.status();
  for (int64_t step = 1; step <= 3; ++step) {
    SaveOptions so;
    so.step = step;
    so.no_dist = true;
    ASSERT_TRUE(Save(ManyObjectsStep(step), **w, so).ok()) << step;
  }
  const std::string index_before = client_->GetObject(Server().bucket, prefix_ + "index").value();

  // One object's reads fail while others are being rewritten: nothing is
  // committed and no new object stays.
  ::ckptdb::testing::S3FaultProxy proxy(Server().port);
  proxy.set_fail_requests_containing("/rank-0-30.sst");
  auto failed = Writer(0, ClientThrough(proxy, 1))->ReclaimSpace(ReclaimOptions{});
  EXPECT_FALSE(failed.ok());
  EXPECT_NE(failed.status().ToString().find("rank-0-30.sst"), std::string::npos) << failed.status();
  EXPECT_EQ(client_->GetObject(Server().bucket, prefix_ + "index").value(), index_before);
  EXPECT_EQ(RewrittenObjects(), 0u);
  EXPECT_TRUE(Listed("rewrites/").empty());

  auto reclaimed = Writer(0)->ReclaimSpace(ReclaimOptions{});
  ASSERT_TRUE(reclaimed.ok()) << reclaimed.status();
  EXPECT_GE(reclaimed->files_rewritten, 60u);
  EXPECT_EQ(RewrittenObjects(), reclaimed->files_rewritten);
  std::unique_ptr<StoreReader> r = Reader();
  for (int64_t step : {2, 3}) {
    auto got = LoadWhole(*r, step);
    ASSERT_TRUE(got.ok()) << got.status();
    const StateDict saved = ManyObjectsStep(step);
    for (const auto& [fqn, want] : saved.entries()) {
      const auto* have = got->Find(fqn);
      ASSERT_NE(have, nullptr) << fqn;
      EXPECT_TRUE(std::get<Tensor>(*have).BitwiseEquals(std::get<Tensor>(want))) << fqn << " of step " << step;
    }
  }
}

TEST(BucketIndexTest, RewrittenSavesRoundTripAsVersionTwoAndOthersStayVersionOne) {
  BucketIndex index;
  IndexStep s;
  s.step = 12;
  s.summary.save_id = 0xbb;
  s.uses = {SaveRef{1, 0xaa}, SaveRef{12, 0xbb}};
  index.steps[12] = s;
  auto version_of = [](const std::string& value) {
    auto raw = DecodeChunkToString(value);
    EXPECT_TRUE(raw.ok()) << raw.status();
    return raw.ok() && raw->size() > 19 ? static_cast<int>((*raw)[19]) : -1;
  };
  EXPECT_EQ(version_of(EncodeBucketIndex(index)), 1);
  SstObject o;
  o.key = "p/data/00000000000000000001/00000000000000aa/00000000000000cc/rank-0-0.sst";
  o.size = 99;
  o.smallest_key = "a";
  o.largest_key = "z";
  index.rewritten[SaveRef{1, 0xaa}] = RewrittenSave{0xcc, {o}};
  const std::string value = EncodeBucketIndex(index);
  EXPECT_EQ(version_of(value), 2);
  auto back = DecodeBucketIndex(value);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->rewritten.size(), 1u);
  const RewrittenSave& r = back->rewritten.begin()->second;
  EXPECT_EQ(r.rewrite_id, 0xccu);
  ASSERT_EQ(r.objects.size(), 1u);
  EXPECT_EQ(r.objects[0].key, o.key);
  EXPECT_EQ(r.objects[0].size, 99u);
  EXPECT_EQ(r.objects[0].largest_key, "z");

  // A record's objects of the rewritten save are replaced, others kept.
  SstObject own;
  own.key = "p/data/00000000000000000012/00000000000000bb/rank-0-0.sst";
  SstObject old;
  old.key = "p/data/00000000000000000001/00000000000000aa/rank-0-0.sst";
  SstObject old2 = old;
  old2.key = "p/data/00000000000000000001/00000000000000aa/rank-1-0.sst";
  const std::vector<SstObject> now = ObjectsNow(*back, "p/", {own, old, old2});
  ASSERT_EQ(now.size(), 2u);
  EXPECT_EQ(now[0].key, own.key);
  EXPECT_EQ(now[1].key, o.key);

  // Dropping the last step that reads the save forgets its rewrite.
  back->steps.clear();
  ForgetUnusedRewrites(&*back);
  EXPECT_TRUE(back->rewritten.empty());
  EXPECT_EQ(version_of(EncodeBucketIndex(*back)), 1);
}

}  // namespace
}  // namespace bucket
}  // namespace ckptdb
