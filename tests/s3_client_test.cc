// The S3 client against a real SeaweedFS server (the S3Server ctest fixture:
// tests/s3_server_fixture.sh), which checks every request's signature.
#include "s3/s3_client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "s3_test_server.h"

namespace ckptdb {
namespace s3 {
namespace {

using ::ckptdb::testing::RandomBytes;

const ::ckptdb::testing::S3TestServer& Server() { return ::ckptdb::testing::TestS3Server(); }

class S3ClientTest : public ::ckptdb::testing::S3ServerTest {};

TEST_F(S3ClientTest, PutGetHeadDelete) {
  const std::string key = prefix_ + "object";
  const std::string data = RandomBytes(1 << 20, 1);
  auto etag = client_->PutObject(bucket_, key, data);
  ASSERT_TRUE(etag.ok()) << etag.status();
  auto got = client_->GetObject(bucket_, key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == data);
  auto head = client_->HeadObject(bucket_, key);
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->size, data.size());
  EXPECT_EQ(head->etag, *etag);

  // Empty objects are objects too.
  ASSERT_TRUE(client_->PutObject(bucket_, prefix_ + "empty", "").ok());
  auto empty = client_->GetObject(bucket_, prefix_ + "empty");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(*empty, "");

  ASSERT_TRUE(client_->DeleteObject(bucket_, key).ok());
  auto gone = client_->GetObject(bucket_, key);
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound) << gone.status();
  EXPECT_NE(gone.status().message().find("s3://" + bucket_ + "/" + key), std::string::npos) << gone.status();
  EXPECT_NE(gone.status().message().find(Server().settings.endpoint), std::string::npos) << gone.status();
  EXPECT_EQ(client_->HeadObject(bucket_, key).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(client_->DeleteObject(bucket_, key).ok()) << "deleting a missing key is not an error in S3";
}

TEST_F(S3ClientTest, DeleteObjectsInOneRequest) {
  std::vector<std::string> keys;
  for (int i = 0; i < 30; ++i) keys.push_back(prefix_ + "batch/" + std::to_string(i) + (i % 2 ? " odd&<key>" : ""));
  for (const auto& k : keys) ASSERT_TRUE(client_->PutObject(bucket_, k, "x").ok()) << k;
  ASSERT_TRUE(client_->PutObject(bucket_, prefix_ + "kept", "y").ok());
  std::vector<std::string> doomed = keys;
  doomed.push_back(prefix_ + "never-existed");  // counts as deleted
  ASSERT_TRUE(client_->DeleteObjects(bucket_, doomed).ok());
  auto left = client_->ListAll(bucket_, prefix_);
  ASSERT_TRUE(left.ok()) << left.status();
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].key, prefix_ + "kept");
  EXPECT_TRUE(client_->DeleteObjects(bucket_, {}).ok());
  EXPECT_EQ(client_->DeleteObjects(bucket_, std::vector<std::string>(1001, "k")).code(), StatusCode::kInvalidArgument);
}

TEST_F(S3ClientTest, HeadBucket) {
  EXPECT_TRUE(client_->HeadBucket(bucket_).ok());
  Status missing = client_->HeadBucket("ckptdb-no-such-bucket");
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing;
  EXPECT_NE(missing.message().find("'ckptdb-no-such-bucket' does not exist"), std::string::npos) << missing;
  S3Settings wrong = Server().settings;
  wrong.credentials.secret_access_key = "wrong-secret";
  auto c = S3Client::Create(wrong);
  ASSERT_TRUE(c.ok());
  Status denied = (*c)->HeadBucket(bucket_);
  EXPECT_EQ(denied.code(), StatusCode::kFailedPrecondition) << denied;
  EXPECT_EQ(denied.message().find("wrong-secret"), std::string::npos) << denied;
}

TEST_F(S3ClientTest, KeysThatNeedEncodingRoundTrip) {
  // The signer and the URL encode these the same way, or the server rejects
  // the signature.
  for (const std::string name : {"a key with spaces", "plus+equals=amp&", "utf8-\xc3\xa9\xe2\x82\xac", "tilde~dot.",
                                 "semi;colon:comma,", "nested/deeper/leaf"}) {
    const std::string key = prefix_ + name;
    ASSERT_TRUE(client_->PutObject(bucket_, key, name).ok()) << name;
    auto got = client_->GetObject(bucket_, key);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, name);
  }
  auto all = client_->ListAll(bucket_, prefix_);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 6u);
}

TEST_F(S3ClientTest, RangedGets) {
  const std::string key = prefix_ + "ranged";
  const std::string data = RandomBytes(100000, 2);
  ASSERT_TRUE(client_->PutObject(bucket_, key, data).ok());
  auto mid = client_->GetObjectRange(bucket_, key, 1234, 5000);
  ASSERT_TRUE(mid.ok()) << mid.status();
  EXPECT_TRUE(*mid == data.substr(1234, 5000));
  auto first = client_->GetObjectRange(bucket_, key, 0, 1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(*first == data.substr(0, 1));
  auto tail = client_->GetObjectRange(bucket_, key, 99000, 5000);  // runs past the end
  ASSERT_TRUE(tail.ok()) << tail.status();
  EXPECT_TRUE(*tail == data.substr(99000));
  auto past = client_->GetObjectRange(bucket_, key, 100000, 10);
  EXPECT_EQ(past.status().code(), StatusCode::kInvalidArgument) << past.status();

  // Straight into the caller's memory, ten ranges in parallel; nothing is
  // written past them.
  std::string buffer(data.size() + 16, '\x5a');
  std::vector<Status> statuses(10);
  std::vector<std::thread> readers;
  for (int i = 0; i < 10; ++i) {
    readers.emplace_back([&, i] {
      auto n = client_->GetObjectRangeInto(bucket_, key, i * 10000, 10000, buffer.data() + i * 10000);
      statuses[i] = n.status();
      if (n.ok() && *n != 10000) statuses[i] = Status::Internal("short read: " + std::to_string(*n));
    });
  }
  for (auto& r : readers) r.join();
  for (const Status& st : statuses) EXPECT_TRUE(st.ok()) << st;
  EXPECT_TRUE(buffer.substr(0, data.size()) == data);
  EXPECT_EQ(buffer.substr(data.size()), std::string(16, '\x5a'));
  std::string small(10, '\0');
  auto end = client_->GetObjectRangeInto(bucket_, key, 99995, 10, small.data());
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(*end, 5u);
  EXPECT_TRUE(small.substr(0, 5) == data.substr(99995));
}

TEST_F(S3ClientTest, ListingPaginatesInKeyOrder) {
  std::vector<std::string> keys;
  for (int i = 0; i < 23; ++i) keys.push_back(prefix_ + "k" + std::to_string(1000 + i));
  keys.push_back(prefix_ + "sub/a");
  keys.push_back(prefix_ + "sub/b");
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 5; ++t) {
    writers.emplace_back([&, t] {
      for (size_t i = t; i < keys.size(); i += 5) {
        if (!client_->PutObject(bucket_, keys[i], keys[i]).ok()) ++failures;
      }
    });
  }
  for (auto& w : writers) w.join();
  ASSERT_EQ(failures.load(), 0);
  std::sort(keys.begin(), keys.end());

  std::vector<std::string> listed;
  std::string token;
  int pages = 0;
  do {
    auto page = client_->ListObjectsV2(bucket_, prefix_, token, 10);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->objects.size(), 10u);
    for (const auto& o : page->objects) {
      listed.push_back(o.key);
      EXPECT_EQ(o.size, o.key.size());
    }
    token = page->truncated ? page->next_continuation_token : "";
    ++pages;
  } while (!token.empty());
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(listed, keys);

  auto all = client_->ListAll(bucket_, prefix_);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), keys.size());

  auto top = client_->ListObjectsV2(bucket_, prefix_, "", 1000, "/");
  ASSERT_TRUE(top.ok()) << top.status();
  EXPECT_EQ(top->objects.size(), 23u);
  EXPECT_EQ(top->common_prefixes, std::vector<std::string>{prefix_ + "sub/"});

  auto none = client_->ListAll(bucket_, prefix_ + "nothing-here/");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
}

TEST_F(S3ClientTest, ConditionalPutSecondCreatorGetsAlreadyExists) {
  const std::string key = prefix_ + "record";
  ASSERT_TRUE(client_->PutObject(bucket_, key, "first", /*if_none_match=*/true).ok());
  auto second = client_->PutObject(bucket_, key, "second", /*if_none_match=*/true);
  EXPECT_EQ(second.status().code(), StatusCode::kAlreadyExists) << second.status();
  EXPECT_NE(second.status().message().find("s3://" + bucket_ + "/" + key), std::string::npos) << second.status();
  auto got = client_->GetObject(bucket_, key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "first");
}

// If-Match: a compare-and-swap on the ETag a GET gave.
TEST_F(S3ClientTest, PutIfMatchSwapsOnlyTheVersionRead) {
  const std::string key = prefix_ + "index";
  auto first = client_->PutObject(bucket_, key, "v1", /*if_none_match=*/true);
  ASSERT_TRUE(first.ok()) << first.status();
  auto got = client_->GetObjectVersioned(bucket_, key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->data, "v1");
  EXPECT_EQ(got->etag, *first);
  auto second = client_->PutObjectIfMatch(bucket_, key, "v2", got->etag);
  ASSERT_TRUE(second.ok()) << second.status();
  // The version read is gone: the swap is refused, naming the object.
  auto stale = client_->PutObjectIfMatch(bucket_, key, "v3", got->etag);
  EXPECT_EQ(stale.status().code(), StatusCode::kAborted) << stale.status();
  EXPECT_NE(stale.status().message().find(key), std::string::npos) << stale.status();
  EXPECT_EQ(*client_->GetObject(bucket_, key), "v2");
}

TEST_F(S3ClientTest, SixteenConcurrentCreatorsExactlyOneWins) {
  const std::string key = prefix_ + "contended";
  std::vector<Status> results(16);
  std::vector<std::thread> creators;
  std::atomic<bool> go{false};
  for (int i = 0; i < 16; ++i) {
    creators.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      results[i] = client_->PutObject(bucket_, key, "creator " + std::to_string(i), true).status();
    });
  }
  go = true;
  for (auto& c : creators) c.join();
  int winners = 0, losers = 0, winner = -1;
  for (int i = 0; i < 16; ++i) {
    if (results[i].ok()) {
      ++winners;
      winner = i;
    } else {
      EXPECT_EQ(results[i].code(), StatusCode::kAlreadyExists) << results[i];
      ++losers;
    }
  }
  EXPECT_EQ(winners, 1);
  EXPECT_EQ(losers, 15);
  auto got = client_->GetObject(bucket_, key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "creator " + std::to_string(winner));
}

TEST_F(S3ClientTest, MultipartUploadWithPartsInParallelAndConditionalCompletion) {
  const std::string key = prefix_ + "big";
  constexpr size_t kPart = 5 << 20;  // S3's smallest part but the last
  const std::string data = RandomBytes(3 * kPart + 12345, 3);
  auto upload = client_->CreateMultipartUpload(bucket_, key);
  ASSERT_TRUE(upload.ok()) << upload.status();
  std::vector<CompletedPart> parts(4);
  std::vector<Status> statuses(4);
  std::vector<std::thread> uploaders;
  for (int i = 0; i < 4; ++i) {
    uploaders.emplace_back([&, i] {
      auto etag = client_->UploadPart(bucket_, key, *upload, i + 1,
                                      std::string_view(data).substr(i * kPart, i < 3 ? kPart : std::string::npos));
      statuses[i] = etag.status();
      if (etag.ok()) parts[i] = *etag;
    });
  }
  for (auto& u : uploaders) u.join();
  for (const Status& st : statuses) ASSERT_TRUE(st.ok()) << st;
  auto etag = client_->CompleteMultipartUpload(bucket_, key, *upload, parts, /*if_none_match=*/true);
  ASSERT_TRUE(etag.ok()) << etag.status();
  // The read-back after an ambiguous retry relies on this being S3's formula.
  EXPECT_EQ(*etag, "\"" + S3Client::MultipartEtag(parts) + "\"");
  auto got = client_->GetObject(bucket_, key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == data);
  auto range = client_->GetObjectRange(bucket_, key, kPart - 10, 20);  // across a part boundary
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_TRUE(*range == data.substr(kPart - 10, 20));

  // A second upload to the same key cannot complete over it.
  auto again = client_->CreateMultipartUpload(bucket_, key);
  ASSERT_TRUE(again.ok()) << again.status();
  auto part = client_->UploadPart(bucket_, key, *again, 1, "other");
  ASSERT_TRUE(part.ok()) << part.status();
  auto lost = client_->CompleteMultipartUpload(bucket_, key, *again, {*part}, true);
  EXPECT_EQ(lost.status().code(), StatusCode::kAlreadyExists) << lost.status();
  EXPECT_TRUE(client_->AbortMultipartUpload(bucket_, key, *again).ok());
  auto still = client_->GetObject(bucket_, key);
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_TRUE(*still == data);
  // Nor can a conditional single put.
  EXPECT_EQ(client_->PutObject(bucket_, key, "x", true).status().code(), StatusCode::kAlreadyExists);
}

TEST_F(S3ClientTest, ListMultipartUploadsNamesUploadsInProgressUnderAPrefix) {
  const int64_t before_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  auto a = client_->CreateMultipartUpload(bucket_, prefix_ + "u/a");
  auto b = client_->CreateMultipartUpload(bucket_, prefix_ + "u/b");
  auto other = client_->CreateMultipartUpload(bucket_, prefix_ + "v/c");
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  auto listed = client_->ListMultipartUploads(bucket_, prefix_ + "u/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].key, prefix_ + "u/a");
  EXPECT_EQ((*listed)[0].upload_id, *a);
  EXPECT_EQ((*listed)[1].upload_id, *b);
  // Initiated times come from the server's clock, to the second.
  EXPECT_GT((*listed)[0].initiated_unix_ms, before_ms - 60000);
  EXPECT_LT((*listed)[0].initiated_unix_ms, before_ms + 60000);
  ASSERT_TRUE(client_->AbortMultipartUpload(bucket_, prefix_ + "u/a", *a).ok());
  ASSERT_TRUE(client_->AbortMultipartUpload(bucket_, prefix_ + "u/b", *b).ok());
  ASSERT_TRUE(client_->AbortMultipartUpload(bucket_, prefix_ + "v/c", *other).ok());
  listed = client_->ListMultipartUploads(bucket_, prefix_);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_TRUE(listed->empty());
}

TEST_F(S3ClientTest, AbortedUploadLeavesNoObject) {
  const std::string key = prefix_ + "aborted";
  auto upload = client_->CreateMultipartUpload(bucket_, key);
  ASSERT_TRUE(upload.ok()) << upload.status();
  ASSERT_TRUE(client_->UploadPart(bucket_, key, *upload, 1, "bytes").ok());
  ASSERT_TRUE(client_->AbortMultipartUpload(bucket_, key, *upload).ok());
  EXPECT_EQ(client_->HeadObject(bucket_, key).status().code(), StatusCode::kNotFound);
  auto late = client_->UploadPart(bucket_, key, *upload, 2, "late");
  EXPECT_FALSE(late.ok()) << "a part of an aborted upload";
}

TEST_F(S3ClientTest, WrongCredentialsNameEndpointAndBucketNeverTheSecret) {
  for (const bool wrong_key_id : {false, true}) {
    S3Settings wrong = Server().settings;
    const std::string bad_secret = "not-the-secret-0123456789abcdef";
    wrong.credentials.secret_access_key = bad_secret;
    if (wrong_key_id) wrong.credentials.access_key_id = "AKIDUNKNOWN";
    auto c = S3Client::Create(wrong);
    ASSERT_TRUE(c.ok());
    auto put = (*c)->PutObject(bucket_, prefix_ + "denied", "x");
    ASSERT_FALSE(put.ok());
    const std::string m = put.status().ToString();
    EXPECT_EQ(put.status().code(), StatusCode::kFailedPrecondition) << m;
    EXPECT_NE(m.find(Server().settings.endpoint), std::string::npos) << m;
    EXPECT_NE(m.find("bucket '" + bucket_ + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("credentials"), std::string::npos) << m;
    EXPECT_EQ(m.find(bad_secret), std::string::npos) << m;
    EXPECT_EQ(m.find(Server().settings.credentials.secret_access_key), std::string::npos) << m;
    EXPECT_EQ((*c)->GetObject(bucket_, prefix_ + "denied").status().code(), StatusCode::kFailedPrecondition);
  }
  // Nothing was written.
  EXPECT_EQ(client_->HeadObject(bucket_, prefix_ + "denied").status().code(), StatusCode::kNotFound);
}

TEST_F(S3ClientTest, MissingBucketIsNotFoundNamingIt) {
  const std::string missing = "ckptdb-no-such-bucket";
  auto get = client_->GetObject(missing, "k");
  EXPECT_EQ(get.status().code(), StatusCode::kNotFound) << get.status();
  EXPECT_NE(get.status().message().find(missing), std::string::npos) << get.status();
  EXPECT_NE(get.status().message().find(Server().settings.endpoint), std::string::npos) << get.status();
  auto list = client_->ListObjectsV2(missing, "");
  EXPECT_EQ(list.status().code(), StatusCode::kNotFound) << list.status();
  EXPECT_NE(list.status().message().find("does not exist"), std::string::npos) << list.status();
}

TEST_F(S3ClientTest, VirtualHostedAddressing) {
  // The bucket in the host name (BUCKET.localhost:PORT; the server knows
  // "localhost" as its domain): the signed Host header and the URL agree.
  S3Settings settings = Server().settings;
  settings.endpoint = "http://localhost:" + std::to_string(Server().port);
  settings.addressing = AddressingStyle::kVirtual;
  auto c = S3Client::Create(settings);
  ASSERT_TRUE(c.ok()) << c.status();
  S3Client& virtual_client = **c;
  const std::string key = prefix_ + "virtual key+1";
  ASSERT_TRUE(virtual_client.PutObject(bucket_, key, "hosted", true).ok());
  auto got = client_->GetObject(bucket_, key);  // path-style sees the same object
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "hosted");
  auto range = virtual_client.GetObjectRange(bucket_, key, 1, 3);
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(*range, "ost");
  auto list = virtual_client.ListAll(bucket_, prefix_);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].key, key);
  auto upload = virtual_client.CreateMultipartUpload(bucket_, prefix_ + "mp");
  ASSERT_TRUE(upload.ok()) << upload.status();
  EXPECT_TRUE(virtual_client.AbortMultipartUpload(bucket_, prefix_ + "mp", *upload).ok());
  EXPECT_EQ(virtual_client.PutObject(bucket_, key, "again", true).status().code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(virtual_client.DeleteObject(bucket_, key).ok());
}

TEST_F(S3ClientTest, HttpsWithTheServersCertificate) {
  if (Server().https_endpoint.empty()) GTEST_SKIP() << "the test server has no https port (no openssl command)";
  S3Settings settings = Server().settings;
  settings.endpoint = Server().https_endpoint;
  settings.ca_bundle = Server().ca_file;  // as AWS_CA_BUNDLE gives it
  auto c = S3Client::Create(settings);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string key = prefix_ + "over-tls";
  const std::string data = RandomBytes(300000, 4);
  ASSERT_TRUE((*c)->PutObject(bucket_, key, data).ok());
  auto got = (*c)->GetObject(bucket_, key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == data);

  // Without it the certificate is not trusted: a clear error, not retried.
  settings.ca_bundle.clear();
  auto untrusting = S3Client::Create(settings);
  ASSERT_TRUE(untrusting.ok());
  auto refused = (*untrusting)->GetObject(bucket_, key);
  const std::string m = refused.status().ToString();
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << m;
  EXPECT_NE(m.find(Server().https_endpoint), std::string::npos) << m;
  EXPECT_NE(m.find("AWS_CA_BUNDLE"), std::string::npos) << m;
  EXPECT_EQ(m.find("tries"), std::string::npos) << m;
}

TEST(S3ClientUnreachable, ClosedPortIsUnavailableNamingEndpointAndObject) {
  // A port nothing listens on: bound, then closed.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  close(fd);

  S3Settings settings;
  settings.endpoint = "http://127.0.0.1:" + std::to_string(port);
  settings.credentials = {"AKID", "secret-never-shown", ""};
  S3ClientOptions options;
  options.max_attempts = 3;
  options.initial_backoff_ms = 1;
  options.max_backoff_ms = 5;
  auto c = S3Client::Create(settings, options);
  ASSERT_TRUE(c.ok());
  auto put = (*c)->PutObject("some-bucket", "some/key", "x");
  ASSERT_FALSE(put.ok());
  const std::string m = put.status().ToString();
  EXPECT_EQ(put.status().code(), StatusCode::kUnavailable) << m;
  EXPECT_NE(m.find(settings.endpoint), std::string::npos) << m;
  EXPECT_NE(m.find("s3://some-bucket/some/key"), std::string::npos) << m;
  EXPECT_NE(m.find("after 3 tries"), std::string::npos) << m;
  EXPECT_NE(m.find("AWS_ENDPOINT_URL"), std::string::npos) << m;
  EXPECT_EQ(m.find("secret-never-shown"), std::string::npos) << m;
}

}  // namespace
}  // namespace s3
}  // namespace ckptdb
