// The S3 client's retries and its conditional writes under faults a real
// server cannot be told to make: 503 SlowDown, 500, connections reset before
// or after the server acted. A fault-injecting proxy (s3_fault_proxy.h) sits
// between the client and the real SeaweedFS of the S3Server fixture.
#include <gtest/gtest.h>

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
    parts.push_back({i, *etag});
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
  auto done = client_->CompleteMultipartUpload(bucket_, key, *upload, {{1, *etag}}, /*if_none_match=*/true);
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
  auto failed = client_->CompleteMultipartUpload(bucket_, key + "2", *again, {{1, *part}});
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable) << failed.status();
  EXPECT_TRUE(client_->AbortMultipartUpload(bucket_, key + "2", *again).ok());
}

}  // namespace
}  // namespace s3
}  // namespace ckptdb
