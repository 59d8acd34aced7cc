// gc against saves that run long, hosts whose clocks differ, and a server
// that ignores conditional writes:
//   - a save kept running three times past abandoned_save_seconds while gc
//     runs again and again loses nothing and commits whole (its marker's
//     heartbeat; gc judges by the server's clock);
//   - a saving host whose clock is an hour behind gc's is not reaped;
//   - a save whose marker could not be refreshed for half the threshold is
//     refused at its commit (Aborted, nothing visible);
//   - a server that ignores If-None-Match / If-Match (a proxy strips them)
//     is refused for writing, naming why, with the history untouched; it
//     still reads.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bucket/bucket_store.h"
#include "bucket/conditional_probe.h"
#include "ckptdb/ckptdb.h"
#include "s3/s3_client.h"
#include "s3_fault_proxy.h"
#include "s3_test_server.h"
#include "test_util.h"

namespace ckptdb {
namespace bucket {
namespace {

using ::ckptdb::testing::FaultyWriter;
using ::ckptdb::testing::PatternTensor;

const ::ckptdb::testing::S3TestServer& Server() { return ::ckptdb::testing::TestS3Server(); }

class S3GcConditionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Server().skip_reason.empty()) GTEST_SKIP() << Server().skip_reason;
    client_ = MakeClient(Server().settings.endpoint);
    prefix_ = ::ckptdb::testing::UniqueTestPrefix();
  }

  static std::shared_ptr<s3::S3Client> MakeClient(const std::string& endpoint) {
    s3::S3Settings settings = Server().settings;
    settings.endpoint = endpoint;
    s3::S3ClientOptions o;
    o.max_attempts = 2;
    o.initial_backoff_ms = 1;
    o.max_backoff_ms = 10;
    auto c = s3::S3Client::Create(settings, o);
    EXPECT_TRUE(c.ok()) << c.status();
    return std::shared_ptr<s3::S3Client>(std::move(*c));
  }

  std::unique_ptr<StoreWriter> Writer(const std::shared_ptr<s3::S3Client>& client, int64_t abandoned_save_seconds,
                                      BucketWriteOptions wo = {}) {
    StoreOptions o;
    o.abandoned_save_seconds = abandoned_save_seconds;
    o.deduplicate = false;
    auto w = OpenBucketStoreWriter(client, Server().bucket, prefix_, o, wo);
    EXPECT_TRUE(w.ok()) << w.status();
    return std::move(*w);
  }

  static StateDict State(uint32_t seed) {
    StateDict sd;
    (void)sd.Add("t", PatternTensor(DType::kF32, {64, 64}, seed));
    return sd;
  }

  Status SaveThrough(StorageWriter& writer, int64_t step, uint32_t seed) {
    SaveOptions o;
    o.step = step;
    o.no_dist = true;
    return Save(State(seed), writer, o);
  }

  std::vector<int64_t> Steps() {
    auto reader = OpenBucketStoreReader(client_, Server().bucket, prefix_);
    if (!reader.ok()) return {};
    auto steps = (*reader)->ListSteps();
    EXPECT_TRUE(steps.ok()) << steps.status();
    std::vector<int64_t> out;
    if (steps.ok()) {
      for (const StepInfo& s : *steps) out.push_back(s.step);
    }
    return out;
  }

  // Loads step `step` through `client` and compares it with State(seed).
  void ExpectLoads(const std::shared_ptr<s3::S3Client>& client, int64_t step, uint32_t seed) {
    auto reader = OpenBucketStoreReader(client, Server().bucket, prefix_);
    ASSERT_TRUE(reader.ok()) << reader.status();
    StateDict target;
    (void)target.Add("t", Tensor::Zeros(DType::kF32, {64, 64}).value());
    LoadOptions o;
    o.step = step;
    o.no_dist = true;
    Status st = Load(target, **reader, o);
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_TRUE(std::get<Tensor>(*target.Find("t")).BitwiseEquals(PatternTensor(DType::kF32, {64, 64}, seed)));
  }

  size_t ObjectsUnder(const std::string& dir) {
    auto all = client_->ListAll(Server().bucket, prefix_ + dir);
    EXPECT_TRUE(all.ok()) << all.status();
    return all.ok() ? all->size() : 0;
  }

  std::shared_ptr<s3::S3Client> client_;
  std::string prefix_;
};

TEST_F(S3GcConditionsTest, ASaveRunningThreeTimesPastTheThresholdWhileGcRunsLosesNothing) {
  ASSERT_TRUE(ConditionalWriteVerdict(client_.get(), Server().bucket, prefix_).ok());
  std::unique_ptr<StoreWriter> saver = Writer(client_, 2);
  std::unique_ptr<StoreWriter> gc = Writer(client_, 2);
  FaultyWriter slow(saver.get());
  int sweeps = 0;
  uint64_t reaped = 0;
  // Every rank has uploaded; the coordinator then takes 6 s to commit.
  slow.on_finish = [&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(6);
    while (std::chrono::steady_clock::now() < until) {
      auto swept = gc->Sweep();
      EXPECT_TRUE(swept.ok()) << swept.status();
      if (swept.ok()) reaped += swept->orphan_saves + swept->staging_dirs;
      ++sweeps;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    EXPECT_EQ(ObjectsUnder("data/00000000000000000001/"), 1u) << "gc deleted a running save's object";
    return Status::OK();
  };
  Status st = SaveThrough(slow, 1, 11);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_GE(sweeps, 10);
  EXPECT_EQ(reaped, 0u);
  EXPECT_EQ(Steps(), std::vector<int64_t>{1});
  ExpectLoads(client_, 1, 11);
  EXPECT_EQ(ObjectsUnder("pending/"), 0u);
}

TEST_F(S3GcConditionsTest, ASavingHostWhoseClockIsAnHourBehindIsNotReaped) {
  BucketWriteOptions behind;
  behind.host_clock_offset_ms = -3600 * 1000;
  std::unique_ptr<StoreWriter> saver = Writer(client_, 3600, behind);
  std::unique_ptr<StoreWriter> gc = Writer(client_, 60);
  FaultyWriter w(saver.get());
  w.on_finish = [&] {
    auto swept = gc->Sweep();
    EXPECT_TRUE(swept.ok()) << swept.status();
    if (swept.ok()) {
      EXPECT_EQ(swept->orphan_saves, 0u) << "gc took a running save for dead by its host's clock";
    }
    EXPECT_EQ(ObjectsUnder("data/00000000000000000001/"), 1u);
    return Status::OK();
  };
  Status st = SaveThrough(w, 1, 12);
  ASSERT_TRUE(st.ok()) << st;
  ExpectLoads(client_, 1, 12);
}

TEST_F(S3GcConditionsTest, ASaveWhoseMarkerWentStaleIsRefusedAtTheCommit) {
  ::ckptdb::testing::S3FaultProxy proxy(Server().port);
  std::shared_ptr<s3::S3Client> through = MakeClient(proxy.endpoint());
  std::unique_ptr<StoreWriter> saver = Writer(through, 2);
  FaultyWriter w(saver.get());
  // The marker can no longer be written: its refreshes fail past half the
  // threshold (1 s) before the commit.
  w.on_finish = [&] {
    proxy.set_fail_requests_containing("/pending/");
    std::this_thread::sleep_for(std::chrono::milliseconds(1600));
    return Status::OK();
  };
  Status st = SaveThrough(w, 1, 13);
  proxy.set_fail_requests_containing("");
  EXPECT_EQ(st.code(), StatusCode::kAborted) << st;
  EXPECT_NE(st.ToString().find("was not committed"), std::string::npos) << st;
  EXPECT_NE(st.ToString().find("pending marker"), std::string::npos) << st;
  EXPECT_NE(st.ToString().find("SlowDown"), std::string::npos) << st;  // the refresh's own error
  EXPECT_TRUE(Steps().empty());
  // What it left is gc's.
  std::unique_ptr<StoreWriter> gc = Writer(client_, 0);
  ASSERT_TRUE(gc->Sweep().ok());
  EXPECT_EQ(ObjectsUnder("data/"), 0u);
  EXPECT_EQ(ObjectsUnder("steps/"), 0u);
}

TEST_F(S3GcConditionsTest, AServerThatIgnoresConditionalWritesIsRefusedForWritingAndStillReads) {
  std::unique_ptr<StoreWriter> direct = Writer(client_, 3600);
  ASSERT_TRUE(SaveThrough(*direct, 1, 14).ok());
  ASSERT_TRUE(direct->Tag(1, "best").ok());

  ::ckptdb::testing::S3FaultProxy proxy(Server().port);
  proxy.set_strip_conditional_headers(true);
  std::shared_ptr<s3::S3Client> ignoring = MakeClient(proxy.endpoint());
  Status probe = ProbeConditionalWrites(ignoring.get(), Server().bucket, prefix_);
  EXPECT_EQ(probe.code(), StatusCode::kFailedPrecondition) << probe;
  EXPECT_NE(probe.message().find("ignores conditional writes"), std::string::npos) << probe;
  EXPECT_NE(probe.message().find(proxy.endpoint()), std::string::npos) << probe;

  std::unique_ptr<StoreWriter> w = Writer(ignoring, 3600);
  for (const Status& st : {SaveThrough(*w, 2, 15), w->Tag(1, "other").status(), w->DeleteStep(1),
                           w->DeleteTag("best")}) {
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st;
    EXPECT_NE(st.ToString().find("ignores conditional writes"), std::string::npos) << st;
  }
  // The history is as it was, and readable through the same server.
  EXPECT_EQ(Steps(), std::vector<int64_t>{1});
  auto reader = OpenBucketStoreReader(ignoring, Server().bucket, prefix_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto tags = (*reader)->ListTags();
  ASSERT_TRUE(tags.ok());
  EXPECT_EQ(tags->at("best"), 1);
  ExpectLoads(ignoring, 1, 14);
  EXPECT_EQ(ObjectsUnder("data/00000000000000000002/"), 0u);
  EXPECT_EQ(ObjectsUnder("probe/"), 0u);
}

}  // namespace
}  // namespace bucket
}  // namespace ckptdb
