// s3://BUCKET/PREFIX through the public API (OpenStoreWriter /
// OpenStoreReader, Save, Load), against the real SeaweedFS server of the
// S3Server fixture, with the settings taken from AWS's variables as a user
// sets them: a save on 4 ranks loaded on 3 and on 1; the history (tags,
// deletes, retention in the commit, keep-best); deduplication against the
// latest step; gc of a save that died before its commit and of deleted
// steps, never of a running save; clear errors for a missing bucket, a
// missing store and refused credentials; a job's load through
// OpenSharedStoreReader, where only the coordinator reads the store's index
// and the step's record.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bucket/bucket_index.h"
#include "ckptdb/ckptdb.h"
#include "s3/s3_client.h"
#include "s3_fault_proxy.h"
#include "s3_test_server.h"
#include "test_util.h"
#include "thread_communicator.h"

namespace ckptdb {
namespace {

using ::ckptdb::testing::PatternTensor;

const ::ckptdb::testing::S3TestServer& Server() { return ::ckptdb::testing::TestS3Server(); }

Tensor Rows(const Tensor& full, int64_t begin, int64_t count) {
  Tensor out = Tensor::Zeros(full.dtype(), {count, full.shape()[1]}).value();
  const size_t row = static_cast<size_t>(full.shape()[1]) * DTypeSize(full.dtype());
  std::memcpy(out.data(), static_cast<const char*>(full.data()) + begin * row, count * row);
  return out;
}

class S3StoreUrlTest : public ::ckptdb::testing::S3ServerTest {
 protected:
  void SetUp() override {
    S3ServerTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // As a user's environment says it (every ctest test is a process of its own).
    ::ckptdb::testing::SetAwsVariablesForTestServer();
    url_ = "s3://" + bucket_ + "/" + prefix_;
    options_.chunk_bytes = 4096;
  }

  // Saves `full` as `step` on `world` ranks (threads), cut into rows.
  // The bytes entry "note" holds `note`, or "step STEP" when it is empty.
  void SaveOn(int world, const Tensor& full, int64_t step, std::map<std::string, double> metrics = {},
              const std::string& note = "") {
    std::vector<Status> statuses(world);
    std::mutex mu;
    ::ckptdb::testing::RunRanksAsThreads(world, [&](int rank, Communicator& comm) {
      Status st;
      auto w = OpenStoreWriter(url_, options_);
      if (!w.ok()) {
        st = w.status();
      } else {
        const int64_t rows = full.shape()[0] / world;
        StateDict sd;
        std::vector<Shard> shards{Shard{{rank * rows, 0}, Rows(full, rank * rows, rows)}};
        (void)sd.Add("t", ShardedTensor::Create(full.dtype(), full.shape(), std::move(shards)).value());
        (void)sd.AddBytes("note", note.empty() ? "step " + std::to_string(step) : note);
        SaveOptions o;
        o.step = step;
        o.communicator = &comm;
        o.metrics = metrics;
        st = Save(sd, **w, o);
      }
      std::lock_guard<std::mutex> lock(mu);
      statuses[rank] = st;
    });
    for (int r = 0; r < world; ++r) ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
  }

  Tensor LoadT(int64_t step) {
    auto reader = OpenStoreReader(url_);
    EXPECT_TRUE(reader.ok()) << reader.status();
    if (!reader.ok()) return Tensor();
    auto whole = LoadWhole(**reader, step);
    EXPECT_TRUE(whole.ok()) << whole.status();
    if (!whole.ok()) return Tensor();
    return std::get<Tensor>(*whole->Find("t"));
  }

  std::vector<int64_t> Steps() {
    auto reader = OpenStoreReader(url_);
    EXPECT_TRUE(reader.ok()) << reader.status();
    std::vector<int64_t> out;
    if (!reader.ok()) return out;
    auto steps = (*reader)->ListSteps();
    EXPECT_TRUE(steps.ok()) << steps.status();
    if (!steps.ok()) return out;
    for (const StepInfo& s : *steps) out.push_back(s.step);
    return out;
  }

  // Loads `step` (saved by SaveOn in rows) on `world` ranks, each its
  // rows, through OpenSharedStoreReader (or, `own`, a reader of each
  // rank's own): each rank's status, and whether its rows came back as
  // `full` holds them.
  std::vector<Status> LoadRowsOn(int world, int64_t step, const Tensor& full, bool own = false) {
    std::vector<Status> statuses(world);
    std::mutex mu;
    ::ckptdb::testing::RunRanksAsThreads(world, [&](int rank, Communicator& comm) {
      StatusOr<std::unique_ptr<StorageReader>> reader = ::ckptdb::testing::OpenLoadReader(url_, comm, !own);
      Status st = reader.status();
      if (st.ok()) {
        const int64_t rows = full.shape()[0] / world;
        Tensor target = Tensor::Zeros(full.dtype(), {rows, full.shape()[1]}).value();
        StateDict sd;
        std::vector<Shard> shards{Shard{{rank * rows, 0}, target}};
        (void)sd.Add("t", ShardedTensor::Create(full.dtype(), full.shape(), std::move(shards)).value());
        LoadOptions o;
        o.step = step;
        o.communicator = &comm;
        o.allow_missing = true;  // ("note" is not loaded)
        st = Load(sd, **reader, o);
        if (st.ok() && !target.BitwiseEquals(Rows(full, rank * rows, rows))) {
          st = Status::Internal("rank " + std::to_string(rank) + " loaded other rows than were saved");
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      statuses[rank] = st;
    });
    return statuses;
  }

  size_t ObjectsUnder(const std::string& sub) {
    auto objects = client_->ListAll(Server().bucket, prefix_ + sub);
    EXPECT_TRUE(objects.ok()) << objects.status();
    return objects.ok() ? objects->size() : 0;
  }

  std::string url_;
  StoreOptions options_;
};

TEST_F(S3StoreUrlTest, SavedOnFourRanksLoadsOnThreeColumnsAndOnOne) {
  const Tensor full = PatternTensor(DType::kF32, {96, 48}, 3);
  SaveOn(4, full, 10);
  // Through a reader of each rank's own, and through OpenSharedStoreReader
  // (the coordinator names each rank the objects its columns lie in: every
  // saving rank's).
  for (bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "shared reader" : "own readers");
    std::vector<Status> statuses(3);
    std::vector<bool> same(3, false);
    std::mutex mu;
    ::ckptdb::testing::RunRanksAsThreads(3, [&](int rank, Communicator& comm) {
      StatusOr<std::unique_ptr<StorageReader>> reader = ::ckptdb::testing::OpenLoadReader(url_, comm, shared);
      Status st = reader.status();
      bool ok = false;
      if (reader.ok()) {
        const int64_t cols = 16;
        Tensor target = Tensor::Zeros(DType::kF32, {96, cols}).value();
        StateDict sd;
        std::vector<Shard> shards{Shard{{0, rank * cols}, target}};
        (void)sd.Add("t", ShardedTensor::Create(DType::kF32, {96, 48}, std::move(shards)).value());
        LoadOptions o;
        o.step = 10;
        o.communicator = &comm;
        st = Load(sd, **reader, o);
        const Shard& got = std::get<ShardedTensor>(*sd.Find("t")).local_shards()[0];
        ok = true;
        const float* g = static_cast<const float*>(got.tensor.data());
        const float* f = static_cast<const float*>(full.data());
        for (int64_t r = 0; r < 96 && ok; ++r) {
          ok = std::memcmp(g + r * cols, f + r * 48 + rank * cols, cols * sizeof(float)) == 0;
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      statuses[rank] = st;
      same[rank] = ok;
    });
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r];
      EXPECT_TRUE(same[r]) << "rank " << r;
    }
  }
  EXPECT_TRUE(LoadT(10).BitwiseEquals(full));
  auto reader = OpenStoreReader(url_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto steps = (*reader)->ListSteps();
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_EQ((*steps)[0].world_size, 4);
  EXPECT_EQ((*steps)[0].entries, 2u);
  EXPECT_EQ((*steps)[0].logical_bytes, full.nbytes() + std::strlen("step 10"));
  EXPECT_EQ((*reader)->path(), url_);
  EXPECT_EQ((*reader)->LatestStep().value(), 10);
}

// A job's load through OpenSharedStoreReader: the coordinator alone GETs
// the store's index and the step's record, whose head lists every object of
// the step; each other rank GETs only the objects that hold its rows. With
// every rank's own reader, each rank GETs the index and the record.
TEST_F(S3StoreUrlTest, ASharedReaderReadsTheIndexAndTheRecordOnTheCoordinatorOnly) {
  const Tensor full = PatternTensor(DType::kF32, {64, 32}, 5);
  SaveOn(8, full, 1);
  SaveOn(8, full, 2);  // every chunk shared with step 1: its objects are step 1's
  ::ckptdb::testing::S3FaultProxy proxy(Server().port);
  setenv("AWS_ENDPOINT_URL", proxy.endpoint().c_str(), 1);
  struct Counts {
    int index, records, data;
  };
  auto load = [&](int world, int64_t step, bool own) {
    const int index0 = proxy.requests_containing(prefix_ + "index");
    const int records0 = proxy.requests_containing(prefix_ + "steps/");
    const int data0 = proxy.requests_containing(prefix_ + "data/");
    for (const Status& st : LoadRowsOn(world, step, full, own)) EXPECT_TRUE(st.ok()) << st;
    return Counts{proxy.requests_containing(prefix_ + "index") - index0,
                  proxy.requests_containing(prefix_ + "steps/") - records0,
                  proxy.requests_containing(prefix_ + "data/") - data0};
  };
  for (int64_t step : {1, 2}) {
    SCOPED_TRACE(step);
    const Counts two = load(2, step, false), eight = load(8, step, false), own = load(8, step, true);
    EXPECT_EQ(two.index, 1);
    EXPECT_EQ(eight.index, 1);
    EXPECT_EQ(two.records, eight.records);
    EXPECT_GE(eight.records, 1);
    EXPECT_LE(eight.records, 2);  // the head, and the run of the entries' pieces
    // 8 ranks each read 1 object, with its tail (1 GET) and its rows (0 or 1 more).
    EXPECT_GE(eight.data, 8);
    EXPECT_LE(eight.data, 16);
    EXPECT_EQ(own.index, 8);
    EXPECT_GE(own.records, 8);
  }
  ::ckptdb::testing::SetAwsVariablesForTestServer();
}

// An object a rank's rows lie in is gone: that rank's read fails with
// DataLoss naming it, and every rank fails alike, naming the rank.
TEST_F(S3StoreUrlTest, AnObjectARankCannotReadFailsEveryRankAlikeThroughTheSharedReader) {
  const Tensor full = PatternTensor(DType::kF32, {64, 32}, 6);
  SaveOn(4, full, 3);
  auto objects = client_->ListAll(Server().bucket, prefix_ + "data/");
  ASSERT_TRUE(objects.ok()) << objects.status();
  std::string gone;
  for (const s3::ObjectInfo& o : *objects) {
    if (o.key.find("/rank-2-") != std::string::npos) gone = o.key;
  }
  ASSERT_FALSE(gone.empty());
  ASSERT_TRUE(client_->DeleteObject(Server().bucket, gone).ok());
  const std::vector<Status> st = LoadRowsOn(4, 3, full);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(st[rank].code(), StatusCode::kDataLoss) << rank << ": " << st[rank];
    EXPECT_EQ(st[rank].ToString(), st[0].ToString()) << rank;
  }
  EXPECT_NE(st[0].ToString().find("rank 2"), std::string::npos) << st[0];
  EXPECT_NE(st[0].ToString().find(gone.substr(gone.rfind('/') + 1)), std::string::npos) << st[0];
  // No store there: every rank gets the coordinator's NotFound.
  url_ += "nothing-here/";
  for (const Status& s : LoadRowsOn(3, 1, full)) {
    EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
    EXPECT_NE(s.ToString().find("no ckptdb store"), std::string::npos) << s;
  }
}

TEST_F(S3StoreUrlTest, TagsDeletesAndRetentionInTheCommit) {
  options_.retention.keep_last = 2;
  const Tensor a = PatternTensor(DType::kF32, {16, 16}, 1);
  SaveOn(2, a, 1);
  auto w = OpenStoreWriter(url_, options_);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->Tag(1, "first").ok());
  for (int64_t step = 2; step <= 4; ++step) SaveOn(2, PatternTensor(DType::kF32, {16, 16}, step), step);
  // keep_last 2 keeps 3 and 4, keep_tagged keeps 1; 2 went in 4's commit.
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(ObjectsUnder("data/00000000000000000002/"), 0u);
  auto reader = OpenStoreReader(url_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->ResolveTag("first").value(), 1);
  EXPECT_EQ((*w)->Tag(9, "nine").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*w)->Tag(3, "first").value(), std::optional<int64_t>(1));  // moved
  EXPECT_EQ((*w)->DeleteTag("none").code(), StatusCode::kNotFound);
  // A delete of several steps: all or none.
  Status missing = (*w)->DeleteSteps({3, 7});
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing;
  EXPECT_NE(missing.message().find("step 7"), std::string::npos) << missing;
  EXPECT_EQ(Steps(), (std::vector<int64_t>{1, 3, 4}));
  ASSERT_TRUE((*w)->DeleteSteps({1, 3}).ok());
  EXPECT_EQ(Steps(), std::vector<int64_t>{4});
  ASSERT_TRUE((*reader)->Refresh().ok());
  EXPECT_TRUE((*reader)->ListTags().value().empty());  // the tag went with its step
  EXPECT_EQ(ObjectsUnder("data/00000000000000000001/"), 0u);
  EXPECT_EQ(ObjectsUnder("steps/00000000000000000003/"), 0u);
  EXPECT_TRUE(LoadT(4).BitwiseEquals(PatternTensor(DType::kF32, {16, 16}, 4)));
}

TEST_F(S3StoreUrlTest, KeepBestKeepsTheBestStepsByTheirMetric) {
  options_.retention.keep_last = 1;
  options_.retention.keep_best = 1;
  options_.retention.best_metric = "loss";
  const double losses[] = {0.9, 0.2, 0.5, 0.7};
  for (int64_t step = 1; step <= 4; ++step) {
    SaveOn(1, PatternTensor(DType::kF32, {8, 8}, step), step, {{"loss", losses[step - 1]}});
  }
  EXPECT_EQ(Steps(), (std::vector<int64_t>{2, 4}));
  auto reader = OpenStoreReader(url_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->BestStep("loss").value(), 2);
  EXPECT_EQ((*reader)->ListSteps().value()[0].metrics.at("loss"), 0.2);
}

TEST_F(S3StoreUrlTest, AnUnchangedStepUploadsNoChunkAndOutlivesTheStepItShares) {
  const Tensor full = PatternTensor(DType::kF32, {64, 64}, 8);
  SaveOn(2, full, 1, {}, "same");
  SaveOn(2, full, 2, {}, "same");
  auto reader = OpenStoreReader(url_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto steps = (*reader)->ListSteps();
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 2u);
  EXPECT_GT((*steps)[0].stored_bytes, full.nbytes());
  EXPECT_EQ((*steps)[1].stored_bytes, 0u);
  EXPECT_EQ(ObjectsUnder("data/00000000000000000002/"), 0u);  // nothing uploaded
  auto w = OpenStoreWriter(url_, options_);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->DeleteStep(1).ok());
  EXPECT_GT(ObjectsUnder("data/00000000000000000001/"), 0u);  // step 2 reads them
  EXPECT_TRUE(LoadT(2).BitwiseEquals(full));
  ASSERT_TRUE((*w)->DeleteStep(2).ok());
  EXPECT_EQ(ObjectsUnder("data/"), 0u);
  EXPECT_EQ(ObjectsUnder("steps/"), 0u);
}

// The step a save shares chunks with is deleted while the save runs (after
// every rank uploaded, before the commit): its objects may be gone, so the
// commit is refused naming both steps, nothing of the save is visible and
// its objects are deleted.
TEST_F(S3StoreUrlTest, ASaveWhoseSharedStepWasDeletedMeanwhileIsRefused) {
  const Tensor first = PatternTensor(DType::kF32, {64, 64}, 41);
  SaveOn(2, first, 1);
  // Step 2 is half step 1: it shares the unchanged chunks and uploads the rest.
  Tensor second = PatternTensor(DType::kF32, {64, 64}, 42);
  std::memcpy(second.data(), first.data(), first.nbytes() / 2);
  auto deleter = OpenStoreWriter(url_, options_);
  ASSERT_TRUE(deleter.ok()) << deleter.status();
  std::vector<Status> statuses(2);
  std::mutex mu;
  ::ckptdb::testing::RunRanksAsThreads(2, [&](int rank, Communicator& comm) {
    Status st;
    auto w = OpenStoreWriter(url_, options_);
    if (!w.ok()) {
      st = w.status();
    } else {
      ::ckptdb::testing::FaultyWriter faulty(w->get());
      faulty.on_finish = [&] { return (*deleter)->DeleteStep(1); };
      StateDict sd;
      std::vector<Shard> shards{Shard{{rank * 32, 0}, Rows(second, rank * 32, 32)}};
      (void)sd.Add("t", ShardedTensor::Create(second.dtype(), second.shape(), std::move(shards)).value());
      SaveOptions o;
      o.step = 2;
      o.communicator = &comm;
      st = Save(sd, faulty, o);
    }
    std::lock_guard<std::mutex> lock(mu);
    statuses[rank] = st;
  });
  EXPECT_EQ(statuses[0].code(), StatusCode::kAborted) << statuses[0];
  EXPECT_NE(statuses[0].ToString().find("shares chunks with step 1"), std::string::npos) << statuses[0];
  EXPECT_TRUE(Steps().empty());
  EXPECT_EQ(ObjectsUnder("data/"), 0u);
  EXPECT_EQ(ObjectsUnder("pending/"), 0u);
}

// Writers changing the index at once (8 threads, each its own writer,
// each a tag): every change lands; none is lost to another's swap.
TEST_F(S3StoreUrlTest, ConcurrentIndexChangesAreAllKept) {
  SaveOn(1, PatternTensor(DType::kF32, {16, 16}, 43), 1);
  std::vector<std::thread> threads;
  std::vector<Status> statuses(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto w = OpenStoreWriter(url_, options_);
      statuses[i] = w.ok() ? (*w)->Tag(1, "t" + std::to_string(i)).status() : w.status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const Status& st : statuses) EXPECT_TRUE(st.ok()) << st;
  auto reader = OpenStoreReader(url_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto tags = (*reader)->ListTags();
  ASSERT_TRUE(tags.ok()) << tags.status();
  EXPECT_EQ(tags->size(), 8u);
}

TEST(S3StoreUrlRemoteTest, TheRemoteReaderRefusesABucket) {
  std::unique_ptr<Communicator> comm = NewLocalCommunicator();
  auto r = OpenRemoteStoreReader("s3://b/p", comm.get());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("OpenStoreReader"), std::string::npos) << r.status();
}

// A save whose coordinator "dies" between the ranks' uploads and the
// commit (Finish fails, Abort cleans nothing up): nothing of it is visible,
// and gc deletes its objects once its pending marker is older than
// abandoned_save_seconds, never before.
TEST_F(S3StoreUrlTest, GcDeletesADeadSavesObjectsButNeverARunningSaves) {
  const Tensor full = PatternTensor(DType::kF32, {32, 32}, 4);
  SaveOn(1, full, 1);
  {
    auto w = OpenStoreWriter(url_, options_);
    ASSERT_TRUE(w.ok()) << w.status();
    ::ckptdb::testing::FaultyWriter dying(w->get());
    dying.on_finish = [] { return Status::Unavailable("the coordinator died"); };
    dying.forward_abort = false;
    StateDict sd;
    (void)sd.Add("t", PatternTensor(DType::kF32, {32, 32}, 5));
    SaveOptions o;
    o.step = 2;
    o.no_dist = true;
    Status st = Save(sd, dying, o);
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st;
  }
  EXPECT_EQ(Steps(), std::vector<int64_t>{1});
  EXPECT_EQ(ObjectsUnder("data/00000000000000000002/"), 1u);
  EXPECT_EQ(ObjectsUnder("pending/"), 1u);
  // A second rank of it was killed mid-upload: its multipart upload is open.
  auto dead = client_->ListAll(Server().bucket, prefix_ + "data/00000000000000000002/");
  ASSERT_TRUE(dead.ok() && dead->size() == 1u);
  const std::string open_key = dead->at(0).key.substr(0, dead->at(0).key.rfind('/') + 1) + "rank-1-0.sst";
  ASSERT_TRUE(client_->CreateMultipartUpload(Server().bucket, open_key).ok());
  auto open_uploads = [&] {
    auto u = client_->ListMultipartUploads(Server().bucket, prefix_);
    EXPECT_TRUE(u.ok()) << u.status();
    return u.ok() ? u->size() : 0;
  };
  // Taken as running: kept.
  auto w = OpenStoreWriter(url_, options_);
  ASSERT_TRUE(w.ok()) << w.status();
  auto swept = (*w)->Sweep();
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(swept->orphan_saves, 0u);
  EXPECT_EQ(ObjectsUnder("data/00000000000000000002/"), 1u);
  EXPECT_EQ(open_uploads(), 1u);
  // Taken as dead.
  StoreOptions impatient = options_;
  impatient.abandoned_save_seconds = 0;
  auto w0 = OpenStoreWriter(url_, impatient);
  ASSERT_TRUE(w0.ok()) << w0.status();
  auto found = (*w0)->FindLeftovers();
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->orphan_saves, 1u);
  EXPECT_EQ(ObjectsUnder("data/00000000000000000002/"), 1u);  // (only found)
  swept = (*w0)->Sweep();
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(swept->orphan_saves, 1u);
  EXPECT_EQ(ObjectsUnder("data/00000000000000000002/"), 0u);
  EXPECT_EQ(ObjectsUnder("pending/"), 0u);
  EXPECT_EQ(open_uploads(), 0u);
  EXPECT_TRUE(LoadT(1).BitwiseEquals(full));  // committed steps untouched
}

TEST_F(S3StoreUrlTest, MissingBucketMissingStoreAndRefusedCredentialsAreNamed) {
  auto r = OpenStoreReader("s3://no-such-bucket-ckptdb/x");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status();
  EXPECT_NE(r.status().message().find("no-such-bucket-ckptdb"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find(Server().settings.endpoint), std::string::npos) << r.status();

  r = OpenStoreReader(url_);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status();
  EXPECT_NE(r.status().message().find("no ckptdb store at " + url_), std::string::npos) << r.status();

  EXPECT_EQ(OpenStoreReader("s3://A_bad_name/x").status().code(), StatusCode::kInvalidArgument);

  setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-at-all", 1);
  r = OpenStoreReader(url_);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find(Server().settings.credentials.access_key_id), std::string::npos);
  EXPECT_EQ(r.status().message().find("not-the-secret-at-all"), std::string::npos) << r.status();
}

// `ckptdb ls` of a long history is one GET of the index: 1,000 steps.
TEST_F(S3StoreUrlTest, ListingAThousandStepsReadsOneObject) {
  bucket::BucketIndex index;
  for (int64_t step = 1; step <= 1000; ++step) {
    bucket::IndexStep s;
    s.step = step;
    s.summary.save_id = static_cast<uint64_t>(step);
    s.summary.world_size = 8;
    s.summary.metrics["loss"] = 1.0 / static_cast<double>(step);
    s.uses = {SaveRef{step, static_cast<uint64_t>(step)}};
    index.steps.emplace(step, s);
  }
  ASSERT_TRUE(client_->PutObject(Server().bucket, bucket::IndexKey(prefix_), bucket::EncodeBucketIndex(index)).ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto reader = OpenStoreReader(url_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto steps = (*reader)->ListSteps();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_EQ(steps->size(), 1000u);
  EXPECT_EQ((*reader)->BestStep("loss").value(), 1000);
  std::printf("opening and listing 1,000 steps: %.3f s\n", seconds);
}

}  // namespace
}  // namespace ckptdb
