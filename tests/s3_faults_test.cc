// The S3 client's retries and its conditional writes under faults a real
// server cannot be told to make: 503 SlowDown, 500, connections reset before
// or after the server acted. A fault-injecting proxy (s3_fault_proxy.h) sits
// between the client and the real SeaweedFS of the S3Server fixture.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "s3/s3_client.h"
#include "s3_fault_proxy.h"
#include "s3_test_server.h"

namespace ckptdb {
namespace s3 {
namespace {

using Action = ::ckptdb::testing::S3FaultProxy::Action;
using ::ckptdb::testing::TestS3Server;

class S3FaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!TestS3Server().skip_reason.empty()) GTEST_SKIP() << TestS3Server().skip_reason;
    proxy_ = std::make_unique<::ckptdb::testing::S3FaultProxy>(TestS3Server().port);
    S3Settings settings = TestS3Server().settings;
    settings.endpoint = proxy_->endpoint();
    S3ClientOptions options;
    options.max_attempts = 4;
    options.initial_backoff_ms = 1;  // the schedule is not under test here
    options.max_backoff_ms = 10;
    options.http.stall_timeout_s = 1;  // the silent-server tests wait this long per try
    auto c = S3Client::Create(settings, options);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
    // The same server without the proxy, to check what really happened.
    auto direct = S3Client::Create(TestS3Server().settings);
    ASSERT_TRUE(direct.ok()) << direct.status();
    direct_ = std::move(*direct);
    bucket_ = TestS3Server().bucket;
    prefix_ = ::ckptdb::testing::UniqueTestPrefix();
  }

  std::unique_ptr<::ckptdb::testing::S3FaultProxy> proxy_;
  std::unique_ptr<S3Client> client_;
  std::unique_ptr<S3Client> direct_;
  std::string bucket_;
  std::string prefix_;
};

TEST_F(S3FaultsTest, SlowDownInternalErrorAndResetsAreRetried) {
  const std::string key = prefix_ + "retried";
  proxy_->Script({Action::kServiceUnavailable, Action::kInternalError, Action::kResetBeforeSending});
  auto put = client_->PutObject(bucket_, key, "payload");
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(proxy_->requests(), 4);
  EXPECT_EQ(proxy_->forwarded(), 1);

  proxy_->Script({Action::kResetBeforeSending, Action::kServiceUnavailable});
  auto got = client_->GetObject(bucket_, key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "payload");
}

TEST_F(S3FaultsTest, PersistentSlowDownEndsUnavailableNamingTheObject) {
  const std::string key = prefix_ + "never";
  proxy_->Script(std::vector<Action>(4, Action::kServiceUnavailable));
  auto put = client_->PutObject(bucket_, key, "payload");
  ASSERT_FALSE(put.ok());
  const std::string m = put.status().message();
  EXPECT_EQ(put.status().code(), StatusCode::kUnavailable) << m;
  EXPECT_NE(m.find("s3://" + bucket_ + "/" + key), std::string::npos) << m;
  EXPECT_NE(m.find("after 4 tries"), std::string::npos) << m;
  EXPECT_NE(m.find("SlowDown"), std::string::npos) << m;
  EXPECT_EQ(proxy_->forwarded(), 0);
  EXPECT_EQ(direct_->HeadObject(bucket_, key).status().code(), StatusCode::kNotFound);

  proxy_->Script(std::vector<Action>(4, Action::kResetBeforeSending));
  auto get = client_->GetObject(bucket_, key);
  EXPECT_EQ(get.status().code(), StatusCode::kUnavailable) << get.status();
  EXPECT_NE(get.status().message().find(proxy_->endpoint()), std::string::npos) << get.status();
}

TEST_F(S3FaultsTest, ConditionalPutWhoseAnswerWasLostIsItsOwnSuccess) {
  // The server creates the object, the answer never arrives; the retry gets
  // 412 from the object the first try made. That is success, not a lost race.
  const std::string key = prefix_ + "commit-record";
  proxy_->Script({Action::kLoseResponse});
  auto put = client_->PutObject(bucket_, key, "mine", /*if_none_match=*/true);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(proxy_->forwarded(), 3);  // the lost put, the retry's 412, the read-back HEAD
  auto got = direct_->GetObject(bucket_, key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "mine");
}

TEST_F(S3FaultsTest, ConditionalPutLosingToAnotherWriterAfterALostAnswerIsAlreadyExists) {
  // Another job's object was there all along; our first try's answer (a
  // 412) was lost, the retry's 412 stands: the bytes differ.
  const std::string key = prefix_ + "commit-record";
  ASSERT_TRUE(direct_->PutObject(bucket_, key, "theirs", true).ok());
  proxy_->Script({Action::kLoseResponse});
  auto put = client_->PutObject(bucket_, key, "mine", /*if_none_match=*/true);
  EXPECT_EQ(put.status().code(), StatusCode::kAlreadyExists) << put.status();
  auto got = direct_->GetObject(bucket_, key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "theirs");
}

TEST_F(S3FaultsTest, PutIfMatchWhoseAnswerWasLostIsItsOwnSuccess) {
  // The swap landed, its answer was lost; the retry's If-Match no longer
  // matches (412), and the object read back is our bytes: success.
  const std::string key = prefix_ + "index";
  auto first = direct_->PutObject(bucket_, key, "v1");
  ASSERT_TRUE(first.ok()) << first.status();
  proxy_->Script({Action::kLoseResponse});
  auto put = client_->PutObjectIfMatch(bucket_, key, "v2", *first);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(*direct_->GetObject(bucket_, key), "v2");
  // Another writer's swap in between stands: Aborted.
  ASSERT_TRUE(direct_->PutObject(bucket_, key, "theirs").ok());
  proxy_->Script({Action::kLoseResponse});
  auto lost = client_->PutObjectIfMatch(bucket_, key, "v3", *put);
  EXPECT_EQ(lost.status().code(), StatusCode::kAborted) << lost.status();
  EXPECT_EQ(*direct_->GetObject(bucket_, key), "theirs");
}

TEST_F(S3FaultsTest, ConditionalCompletionWhoseAnswerWasLostIsItsOwnSuccess) {
  const std::string key = prefix_ + "multipart";
  auto upload = client_->CreateMultipartUpload(bucket_, key);
  ASSERT_TRUE(upload.ok()) << upload.status();
  std::vector<CompletedPart> parts;
  for (int i = 1; i <= 2; ++i) {
    auto etag = client_->UploadPart(bucket_, key, *upload, i, std::string(i == 1 ? 5 << 20 : 1000, 'a' + i));
    ASSERT_TRUE(etag.ok()) << etag.status();
    parts.push_back(*etag);
  }
  proxy_->Script({Action::kLoseResponse});
  auto done = client_->CompleteMultipartUpload(bucket_, key, *upload, parts, /*if_none_match=*/true);
  ASSERT_TRUE(done.ok()) << done.status();
  auto head = direct_->HeadObject(bucket_, key);
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->size, (5u << 20) + 1000);
}

TEST_F(S3FaultsTest, CompletionAnsweredOkWithAnInternalErrorIsRetried) {
  const std::string key = prefix_ + "multipart";
  auto upload = client_->CreateMultipartUpload(bucket_, key);
  ASSERT_TRUE(upload.ok()) << upload.status();
  auto etag = client_->UploadPart(bucket_, key, *upload, 1, "only part");
  ASSERT_TRUE(etag.ok()) << etag.status();
  proxy_->Script({Action::kOkWithInternalError});
  auto done = client_->CompleteMultipartUpload(bucket_, key, *upload, {*etag}, /*if_none_match=*/true);
  ASSERT_TRUE(done.ok()) << done.status();
  auto got = direct_->GetObject(bucket_, key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "only part");

  // Persisting, it ends as Unavailable, not as success.
  auto again = client_->CreateMultipartUpload(bucket_, key + "2");
  ASSERT_TRUE(again.ok()) << again.status();
  auto part = client_->UploadPart(bucket_, key + "2", *again, 1, "x");
  ASSERT_TRUE(part.ok()) << part.status();
  proxy_->Script(std::vector<Action>(4, Action::kOkWithInternalError));
  auto failed = client_->CompleteMultipartUpload(bucket_, key + "2", *again, {*part});
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable) << failed.status();
  EXPECT_TRUE(client_->AbortMultipartUpload(bucket_, key + "2", *again).ok());
}

// Seconds since `start`.
double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST_F(S3FaultsTest, AServerThatNeverAnswersEndsUnavailableWithinTheStallLimit) {
  const std::string key = prefix_ + "silent";
  ASSERT_TRUE(direct_->PutObject(bucket_, key, "payload").ok());
  // Connections are accepted, requests read, and nothing is ever answered.
  proxy_->Script(std::vector<Action>(2, Action::kHoldBeforeSending));
  auto start = std::chrono::steady_clock::now();
  auto got = client_->GetObject(bucket_, key);
  double took = SecondsSince(start);
  ASSERT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status();
  const std::string m = got.status().message();
  EXPECT_NE(m.find("s3://" + bucket_ + "/" + key), std::string::npos) << m;
  EXPECT_NE(m.find(proxy_->endpoint()), std::string::npos) << m;
  EXPECT_NE(m.find("no answer for 1 s"), std::string::npos) << m;
  // Two silent tries (max_stalled_attempts), not four.
  EXPECT_NE(m.find("after 2 tries"), std::string::npos) << m;
  EXPECT_EQ(proxy_->requests(), 2);
  EXPECT_GE(took, 1.5);
  EXPECT_LT(took, 8.0) << "a silent server held GetObject " << took << " s";

  // A write alike; it never reached the server.
  proxy_->Script(std::vector<Action>(2, Action::kHoldBeforeSending));
  start = std::chrono::steady_clock::now();
  auto put = client_->PutObject(bucket_, prefix_ + "never-written", "x");
  took = SecondsSince(start);
  EXPECT_EQ(put.status().code(), StatusCode::kUnavailable) << put.status();
  EXPECT_LT(took, 8.0) << "a silent server held PutObject " << took << " s";
  EXPECT_EQ(direct_->HeadObject(bucket_, prefix_ + "never-written").status().code(), StatusCode::kNotFound);
}

TEST_F(S3FaultsTest, AGetWhoseBodyStallsMidWayIsRetriedThenEndsUnavailable) {
  const std::string key = prefix_ + "body";
  const std::string data = ::ckptdb::testing::RandomBytes(1 << 20, 7);
  ASSERT_TRUE(direct_->PutObject(bucket_, key, data).ok());
  // The head and half the body come, then silence: the retry gets it all.
  proxy_->Script({Action::kStallMidBody});
  auto start = std::chrono::steady_clock::now();
  auto got = client_->GetObject(bucket_, key);
  double took = SecondsSince(start);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == data);
  EXPECT_EQ(proxy_->requests(), 2);
  EXPECT_LT(took, 6.0);

  // Into the caller's memory alike, and a stall every time ends the read.
  proxy_->Script(std::vector<Action>(2, Action::kStallMidBody));
  std::string out(data.size(), '\0');
  start = std::chrono::steady_clock::now();
  auto ranged = client_->GetObjectRangeInto(bucket_, key, 0, data.size(), out.data());
  took = SecondsSince(start);
  ASSERT_EQ(ranged.status().code(), StatusCode::kUnavailable) << ranged.status();
  EXPECT_NE(ranged.status().message().find("no answer for 1 s"), std::string::npos) << ranged.status();
  EXPECT_LT(took, 8.0) << "a body stalled mid-way held the read " << took << " s";
}

TEST_F(S3FaultsTest, AnUploadTheServerStopsReadingEndsUnavailable) {
  // Larger than the loopback socket buffers on both sides: the client's
  // sends block mid-body.
  const std::string data = ::ckptdb::testing::RandomBytes(32 << 20, 9);
  const std::string key = prefix_ + "upload";
  proxy_->Script(std::vector<Action>(2, Action::kStopReadingUpload));
  auto start = std::chrono::steady_clock::now();
  auto put = client_->PutObject(bucket_, key, data);
  double took = SecondsSince(start);
  ASSERT_EQ(put.status().code(), StatusCode::kUnavailable) << put.status();
  EXPECT_NE(put.status().message().find("no answer for 1 s"), std::string::npos) << put.status();
  EXPECT_LT(took, 8.0) << "an upload the server stopped reading held PutObject " << took << " s";
  EXPECT_EQ(direct_->HeadObject(bucket_, key).status().code(), StatusCode::kNotFound);

  // A multipart part alike; the upload is then aborted within the limits too.
  auto upload = client_->CreateMultipartUpload(bucket_, key);
  ASSERT_TRUE(upload.ok()) << upload.status();
  proxy_->Script(std::vector<Action>(2, Action::kStopReadingUpload));
  start = std::chrono::steady_clock::now();
  auto part = client_->UploadPart(bucket_, key, *upload, 1, std::string_view(data).substr(0, 16 << 20));
  took = SecondsSince(start);
  EXPECT_EQ(part.status().code(), StatusCode::kUnavailable) << part.status();
  EXPECT_LT(took, 8.0) << "a part the server stopped reading held UploadPart " << took << " s";
  EXPECT_TRUE(client_->AbortMultipartUpload(bucket_, key, *upload).ok());
}

TEST_F(S3FaultsTest, AnAnswerLaterThanTheStallLimitIsAbandonedAndTheRetryServes) {
  const std::string key = prefix_ + "late";
  ASSERT_TRUE(direct_->PutObject(bucket_, key, "late payload").ok());
  proxy_->set_late_answer_ms(4000);
  proxy_->Script({Action::kAnswerLate});
  const auto start = std::chrono::steady_clock::now();
  auto got = client_->GetObject(bucket_, key);
  const double took = SecondsSince(start);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "late payload");
  EXPECT_EQ(proxy_->requests(), 2);
  // Abandoned after the 1 s limit, not after the 4 s the answer took.
  EXPECT_LT(took, 3.5);
}

TEST(S3ClientOptionsTest, LimitsComeFromTheEnvironment) {
  ::setenv("CKPTDB_S3_STALL_TIMEOUT", "7", 1);
  ::setenv("CKPTDB_S3_CONNECT_TIMEOUT", "2.5", 1);
  ::setenv("AWS_MAX_ATTEMPTS", "3", 1);
  auto o = S3ClientOptionsFromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->http.stall_timeout_s, 7);
  EXPECT_EQ(o->http.connect_timeout_ms, 2500);
  EXPECT_EQ(o->max_attempts, 3);
  ::setenv("CKPTDB_S3_STALL_TIMEOUT", "soon", 1);
  auto bad = S3ClientOptionsFromEnvironment();
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("CKPTDB_S3_STALL_TIMEOUT"), std::string::npos) << bad.status();
  ::setenv("CKPTDB_S3_STALL_TIMEOUT", "0", 1);
  EXPECT_EQ(S3ClientOptionsFromEnvironment().status().code(), StatusCode::kInvalidArgument);
  ::unsetenv("CKPTDB_S3_STALL_TIMEOUT");
  ::unsetenv("CKPTDB_S3_CONNECT_TIMEOUT");
  ::setenv("AWS_MAX_ATTEMPTS", "0", 1);
  EXPECT_EQ(S3ClientOptionsFromEnvironment().status().code(), StatusCode::kInvalidArgument);
  ::unsetenv("AWS_MAX_ATTEMPTS");
  auto defaults = S3ClientOptionsFromEnvironment();
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->http.stall_timeout_s, 10);
  EXPECT_EQ(defaults->http.connect_timeout_ms, 10000);
  EXPECT_EQ(defaults->max_attempts, 5);
}

}  // namespace
}  // namespace s3
}  // namespace ckptdb
