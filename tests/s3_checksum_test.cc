// Integrity of uploads when they carry their CRC-32C instead of a signed
// SHA-256 (S3Client::set_crc32c_payloads, bucket/checksum_probe.h), against
// the real SeaweedFS of the S3Server fixture, with a proxy
// (s3_fault_proxy.h) that damages bodies on the way or plays a server that
// takes whatever it is sent:
//   - a body damaged on the way is refused by the server, and nothing
//     appears (a PUT, a multipart part); right ones land whole;
//   - the probe trusts a server that checks, and leaves nothing behind;
//     a server that takes a wrong CRC keeps the signed SHA-256;
//   - CKPTDB_S3_PAYLOAD_CHECKSUM=sha256 keeps it without asking;
//   - a save whose data is damaged on the way fails and commits nothing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bucket/bucket_store.h"
#include "bucket/checksum_probe.h"
#include "ckptdb/ckptdb.h"
#include "s3/s3_client.h"
#include "s3_fault_proxy.h"
#include "s3_test_server.h"
#include "test_util.h"

namespace ckptdb {
namespace bucket {
namespace {

using Action = ::ckptdb::testing::S3FaultProxy::Action;
using ::ckptdb::testing::PatternTensor;
using ::ckptdb::testing::RandomBytes;

const ::ckptdb::testing::S3TestServer& Server() { return ::ckptdb::testing::TestS3Server(); }

class S3ChecksumTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Server().skip_reason.empty()) GTEST_SKIP() << Server().skip_reason;
    proxy_ = std::make_unique<::ckptdb::testing::S3FaultProxy>(Server().port);
    direct_ = MakeClient(Server().settings.endpoint, {});
    bucket_ = Server().bucket;
    prefix_ = ::ckptdb::testing::UniqueTestPrefix();
  }

  static std::shared_ptr<s3::S3Client> MakeClient(const std::string& endpoint, s3::S3ClientOptions o) {
    s3::S3Settings settings = Server().settings;
    settings.endpoint = endpoint;
    o.max_attempts = 2;
    o.initial_backoff_ms = 1;
    o.max_backoff_ms = 10;
    auto c = s3::S3Client::Create(settings, o);
    EXPECT_TRUE(c.ok()) << c.status();
    return std::shared_ptr<s3::S3Client>(std::move(*c));
  }

  // A client through the proxy that sends CRCs.
  std::shared_ptr<s3::S3Client> CrcClient() {
    auto c = MakeClient(proxy_->endpoint(), {});
    c->set_crc32c_payloads(true);
    return c;
  }

  std::unique_ptr<::ckptdb::testing::S3FaultProxy> proxy_;
  std::shared_ptr<s3::S3Client> direct_;
  std::string bucket_;
  std::string prefix_;
};

TEST_F(S3ChecksumTest, BodiesDamagedOnTheWayAreRefusedByTheServerAndRightOnesLandWhole) {
  std::shared_ptr<s3::S3Client> crc = CrcClient();
  const std::string key = prefix_ + "object";
  const std::string data = RandomBytes(300000, 1);
  proxy_->set_corrupt_bodies_containing(prefix_);
  auto damaged = crc->PutObject(bucket_, key, data);
  EXPECT_EQ(damaged.status().code(), StatusCode::kInvalidArgument) << damaged.status();
  EXPECT_NE(damaged.status().message().find("BadDigest"), std::string::npos) << damaged.status();
  EXPECT_EQ(direct_->HeadObject(bucket_, key).status().code(), StatusCode::kNotFound);

  proxy_->set_corrupt_bodies_containing("");
  ASSERT_TRUE(crc->PutObject(bucket_, key, data).ok());
  auto got = direct_->GetObject(bucket_, key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == data);

  // A multipart upload declares CRC32C; a damaged part is refused, the
  // same part sent again lands, and the object is the parts.
  const std::string big = RandomBytes((5 << 20) + 1234, 2);
  auto upload = crc->CreateMultipartUpload(bucket_, key + "-multi");
  ASSERT_TRUE(upload.ok()) << upload.status();
  std::string_view first = std::string_view(big).substr(0, 5 << 20), second = std::string_view(big).substr(5 << 20);
  proxy_->set_corrupt_bodies_containing("partNumber=2");
  auto bad = crc->UploadPart(bucket_, key + "-multi", *upload, 2, second);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status();
  proxy_->set_corrupt_bodies_containing("");
  auto p1 = crc->UploadPart(bucket_, key + "-multi", *upload, 1, first);
  auto p2 = crc->UploadPart(bucket_, key + "-multi", *upload, 2, second);
  ASSERT_TRUE(p1.ok() && p2.ok()) << p1.status() << " " << p2.status();
  EXPECT_FALSE(p1->checksum_crc32c.empty());
  auto etag = crc->CompleteMultipartUpload(bucket_, key + "-multi", *upload, {*p1, *p2});
  ASSERT_TRUE(etag.ok()) << etag.status();
  // The read-back after an ambiguous retry still relies on this formula.
  EXPECT_EQ(*etag, "\"" + s3::S3Client::MultipartEtag({*p1, *p2}) + "\"");
  auto whole = direct_->GetObject(bucket_, key + "-multi");
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(*whole == big);
}

TEST_F(S3ChecksumTest, TheProbeTrustsAServerThatChecksAndLeavesNothingBehind) {
  auto checks = ProbeCrc32cChecks(direct_.get(), bucket_, prefix_);
  ASSERT_TRUE(checks.ok()) << checks.status();
  EXPECT_TRUE(*checks) << "SeaweedFS checks x-amz-checksum-crc32c";
  auto left = direct_->ListAll(bucket_, prefix_);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_TRUE(left->empty()) << left->front().key;
  auto uploads = direct_->ListMultipartUploads(bucket_, prefix_);
  ASSERT_TRUE(uploads.ok()) << uploads.status();
  EXPECT_TRUE(uploads->empty()) << uploads->front().key;
}

TEST_F(S3ChecksumTest, AServerThatTakesAWrongCrcKeepsTheSignedSha256) {
  std::shared_ptr<s3::S3Client> through = MakeClient(proxy_->endpoint(), {});
  // The right PUT reaches the server; the wrong one is "taken" unseen.
  proxy_->Script({Action::kPass, Action::kAcceptUnseen});
  auto checks = ProbeCrc32cChecks(through.get(), bucket_, prefix_);
  ASSERT_TRUE(checks.ok()) << checks.status();
  EXPECT_FALSE(*checks);
  // A store's verdict on this server: the same, and its saves still work.
  proxy_->Script({Action::kPass, Action::kAcceptUnseen});
  EXPECT_FALSE(Crc32cVerdict(through.get(), bucket_, prefix_));
  StoreOptions so;
  so.deduplicate = false;
  auto w = OpenBucketStoreWriter(through, bucket_, prefix_, so);
  ASSERT_TRUE(w.ok()) << w.status();
  StateDict sd;
  (void)sd.Add("t", PatternTensor(DType::kF32, {64, 64}, 5));
  SaveOptions o;
  o.step = 1;
  o.no_dist = true;
  ASSERT_TRUE(Save(sd, **w, o).ok());
  EXPECT_FALSE(through->crc32c_payloads());
}

TEST_F(S3ChecksumTest, Sha256OnlyWhenTheEnvironmentSaysSoAndABadValueIsNamed) {
  ::setenv("CKPTDB_S3_PAYLOAD_CHECKSUM", "sha256", 1);
  auto o = s3::S3ClientOptionsFromEnvironment();
  ::setenv("CKPTDB_S3_PAYLOAD_CHECKSUM", "md5", 1);
  auto bad = s3::S3ClientOptionsFromEnvironment();
  ::unsetenv("CKPTDB_S3_PAYLOAD_CHECKSUM");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->allow_crc32c_payloads);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("CKPTDB_S3_PAYLOAD_CHECKSUM is 'md5'"), std::string::npos) << bad.status();
  auto defaults = s3::S3ClientOptionsFromEnvironment();
  ASSERT_TRUE(defaults.ok());
  EXPECT_TRUE(defaults->allow_crc32c_payloads);

  std::shared_ptr<s3::S3Client> sha = MakeClient(proxy_->endpoint(), *o);
  EXPECT_FALSE(Crc32cVerdict(sha.get(), bucket_, prefix_));
  EXPECT_EQ(proxy_->requests(), 0) << "no probe when the environment forbids CRCs";
}

TEST_F(S3ChecksumTest, ASaveWhoseDataIsDamagedOnTheWayFailsAndCommitsNothing) {
  std::shared_ptr<s3::S3Client> through = MakeClient(proxy_->endpoint(), {});
  StoreOptions so;
  so.deduplicate = false;
  auto w = OpenBucketStoreWriter(through, bucket_, prefix_, so);
  ASSERT_TRUE(w.ok()) << w.status();
  StateDict sd;
  (void)sd.Add("t", PatternTensor(DType::kF32, {256, 256}, 7));
  SaveOptions o;
  o.no_dist = true;
  o.step = 1;
  proxy_->set_corrupt_bodies_containing(".sst");  // the rank's data objects
  Status st = Save(sd, **w, o);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("BadDigest"), std::string::npos) << st;
  EXPECT_TRUE(through->crc32c_payloads()) << "the data went with CRCs, which the server checks";

  proxy_->set_corrupt_bodies_containing("");
  o.step = 2;
  ASSERT_TRUE(Save(sd, **w, o).ok());
  auto reader = OpenBucketStoreReader(direct_, bucket_, prefix_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto steps = (*reader)->ListSteps();
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_EQ(steps->front().step, 2);
  StateDict target;
  (void)target.Add("t", Tensor::Zeros(DType::kF32, {256, 256}).value());
  LoadOptions lo;
  lo.step = 2;
  lo.no_dist = true;
  ASSERT_TRUE(Load(target, **reader, lo).ok());
  EXPECT_TRUE(std::get<Tensor>(*target.Find("t")).BitwiseEquals(PatternTensor(DType::kF32, {256, 256}, 7)));
}

}  // namespace
}  // namespace bucket
}  // namespace ckptdb
