// SST files written through the object upload env (src/bucket/
// object_upload_env.h) straight into the S3Server fixture's bucket: the
// object reads back value for value, a file of many parts keeps its memory
// bound, and a part that fails leaves neither an object nor an open upload.
#include <gtest/gtest.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/file_system.h>
#include <rocksdb/sst_file_writer.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bucket/object_upload_env.h"
#include "store/borrowing_file.h"
#include "s3/s3_client.h"
#include "s3_fault_proxy.h"
#include "s3_test_server.h"
#include "test_util.h"
#include "util/crc32c.h"

namespace ckptdb {
namespace bucket {
namespace {

using ::ckptdb::testing::RandomBytes;
using ::ckptdb::testing::TempDir;

const ::ckptdb::testing::S3TestServer& Server() { return ::ckptdb::testing::TestS3Server(); }

constexpr char kRoot[] = "/ckptdb-upload/";

std::unique_ptr<s3::S3Client> Client(const std::string& endpoint = "", int max_attempts = 5) {
  s3::S3Settings settings = Server().settings;
  if (!endpoint.empty()) settings.endpoint = endpoint;
  s3::S3ClientOptions o;
  o.max_attempts = max_attempts;
  auto c = s3::S3Client::Create(settings, o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

std::string Key(int i) {
  char b[16];
  std::snprintf(b, sizeof(b), "k%08d", i);
  return b;
}

// Writes n values of value_bytes through `env` into ROOT/name; returns
// Finish's status and its info.
rocksdb::Status WriteSst(rocksdb::Env* env, const std::string& name, int n, size_t value_bytes,
                         rocksdb::ExternalSstFileInfo* info) {
  rocksdb::Options o;
  o.env = env;
  o.compression = rocksdb::kNoCompression;
  rocksdb::SstFileWriter w(rocksdb::EnvOptions(), o);
  rocksdb::Status s = w.Open(std::string(kRoot) + name);
  for (int i = 0; s.ok() && i < n; ++i) s = w.Put(Key(i), RandomBytes(value_bytes, i));
  if (s.ok()) s = w.Finish(info);
  return s;
}

// Reads the object back as a local SST file and checks every value.
void ExpectValues(s3::S3Client* client, const std::string& key, int n, size_t value_bytes) {
  StatusOr<std::string> bytes = client->GetObject(Server().bucket, key);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  TempDir dir;
  const std::string path = dir.path() + "/copy.sst";
  std::ofstream(path, std::ios::binary) << *bytes;
  rocksdb::Options o;
  rocksdb::SstFileReader r(o);
  ASSERT_TRUE(r.Open(path).ok());
  ASSERT_TRUE(r.VerifyChecksum().ok());
  std::unique_ptr<rocksdb::Iterator> it(r.NewIterator(rocksdb::ReadOptions()));
  int i = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next(), ++i) {
    ASSERT_EQ(it->key().ToString(), Key(i));
    ASSERT_EQ(it->value().ToString(), RandomBytes(value_bytes, i)) << Key(i);
  }
  ASSERT_TRUE(it->status().ok());
  EXPECT_EQ(i, n);
}

class ObjectUploadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Server().skip_reason.empty()) GTEST_SKIP() << Server().skip_reason;
    client_ = Client();
    ASSERT_NE(client_, nullptr);
    prefix_ = ::ckptdb::testing::UniqueTestPrefix();
  }
  std::unique_ptr<s3::S3Client> client_;
  std::string prefix_;
  UploadLedger ledger_;
};

TEST_F(ObjectUploadTest, ASmallFileIsOneObjectReadableValueForValue) {
  auto env = NewObjectUploadEnv(nullptr, client_.get(), Server().bucket, prefix_, kRoot, {}, &ledger_);
  rocksdb::ExternalSstFileInfo info;
  ASSERT_TRUE(WriteSst(env.get(), "rank-0-0.sst", 100, 1000, &info).ok());
  EXPECT_EQ(ledger_.objects(), (std::map<std::string, uint64_t>{{prefix_ + "rank-0-0.sst", info.file_size}}));
  EXPECT_EQ(info.smallest_key, Key(0));
  EXPECT_EQ(info.largest_key, Key(99));
  ExpectValues(client_.get(), prefix_ + "rank-0-0.sst", 100, 1000);
}

TEST_F(ObjectUploadTest, AFileOfManyPartsKeepsAtMostInFlightPlusOnePartsInMemory) {
  ObjectUploadOptions o;
  o.part_bytes = 5 << 20;  // SeaweedFS refuses smaller parts but the last
  o.parts_in_flight = 2;
  auto env = NewObjectUploadEnv(nullptr, client_.get(), Server().bucket, prefix_, kRoot, o, &ledger_);
  rocksdb::ExternalSstFileInfo info;
  rocksdb::Status s = WriteSst(env.get(), "big.sst", 400, 70000, &info);  // ~27 MiB: 6 parts
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_GT(info.file_size, 5 * o.part_bytes);
  EXPECT_EQ(ledger_.objects().at(prefix_ + "big.sst"), info.file_size);
  EXPECT_GT(ledger_.peak_buffered_bytes(), o.part_bytes);  // parts did overlap the writing
  EXPECT_LE(ledger_.peak_buffered_bytes(), 3 * o.part_bytes);
  ExpectValues(client_.get(), prefix_ + "big.sst", 400, 70000);
}

// Bytes lent to a file (store/borrowing_file.h) are sent from where they
// lie, among copied ones, across part boundaries, signed by their SHA-256 or
// carried with their CRC-32C: the object is every byte in order, and no
// part held a lent byte in memory of its own.
TEST_F(ObjectUploadTest, LentBytesAreSentWhereTheyLieAndNoPartHoldsThem) {
  ObjectUploadOptions o;
  o.part_bytes = 5 << 20;
  o.parts_in_flight = 2;
  const std::string a = RandomBytes(12 << 20, 1), b = RandomBytes((7 << 20) + 3, 2), c = RandomBytes(1000, 3);
  for (bool crc : {false, true}) {
    client_->set_crc32c_payloads(crc);
    for (bool small : {false, true}) {
      UploadLedger ledger;
      auto env = NewObjectUploadEnv(nullptr, client_.get(), Server().bucket, prefix_, kRoot, o, &ledger);
      const std::string name = std::string(small ? "small" : "big") + (crc ? "-crc" : "-sha");
      std::unique_ptr<rocksdb::FSWritableFile> file;
      ASSERT_TRUE(env->GetFileSystem()->NewWritableFile(kRoot + name, rocksdb::FileOptions(), &file, nullptr).ok());
      auto* lending = dynamic_cast<BorrowingFile*>(file.get());
      ASSERT_NE(lending, nullptr);
      std::string expected;
      auto copy = [&](std::string_view bytes) {
        ASSERT_TRUE(file->Append(rocksdb::Slice(bytes.data(), bytes.size()), rocksdb::IOOptions(), nullptr).ok());
        expected.append(bytes);
      };
      // In three pieces, as a box's rows.
      auto lend = [&](std::string_view bytes) {
        const size_t third = bytes.size() / 3;
        const std::vector<std::string_view> pieces = {bytes.substr(0, third), bytes.substr(third, third),
                                                      bytes.substr(2 * third)};
        std::vector<uint32_t> crcs;
        for (std::string_view p : pieces) crcs.push_back(Crc32c(p.data(), p.size()));
        ASSERT_TRUE(lending->AppendBorrowed(pieces, crcs).ok());
        expected.append(bytes);
      };
      copy("head");
      if (small) {
        lend(c);
        copy("middle");
        lend(std::string_view(c).substr(10, 500));
      } else {
        lend(a);
        copy(std::string_view(c).substr(0, 77));
        lend(b);
        lend(c);
      }
      copy("tail");
      EXPECT_EQ(file->GetFileSize(rocksdb::IOOptions(), nullptr), expected.size());
      ASSERT_TRUE(file->Close(rocksdb::IOOptions(), nullptr).ok()) << ledger.first_error();
      EXPECT_EQ(ledger.objects().at(prefix_ + name), expected.size());
      EXPECT_LT(ledger.peak_buffered_bytes(), 1000u) << name;  // only the copied bytes
      StatusOr<std::string> got = client_->GetObject(Server().bucket, prefix_ + name);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_TRUE(*got == expected) << name;
      // Every part but the last was part_bytes, lent bytes cut where a
      // part ends: the multipart ETag counts ceil(size / part_bytes) parts.
      if (!small) {
        StatusOr<s3::ObjectInfo> head = client_->HeadObject(Server().bucket, prefix_ + name);
        ASSERT_TRUE(head.ok()) << head.status();
        const uint64_t parts = (expected.size() + o.part_bytes - 1) / o.part_bytes;
        EXPECT_NE(head->etag.find("-" + std::to_string(parts) + "\""), std::string::npos) << head->etag;
      }
    }
  }
  // A CRC-32C that is not the lent bytes' fails the part (SeaweedFS checks
  // what it receives against it): no object appears. (The piece of 12 MiB
  // is cut at 5 and 10 MiB: the wrong CRC reaches the last part.) As many
  // CRCs as pieces, or the file refuses them.
  client_->set_crc32c_payloads(true);
  UploadLedger ledger;
  auto env = NewObjectUploadEnv(nullptr, client_.get(), Server().bucket, prefix_, kRoot, o, &ledger);
  std::unique_ptr<rocksdb::FSWritableFile> file;
  ASSERT_TRUE(env->GetFileSystem()->NewWritableFile(std::string(kRoot) + "wrong", rocksdb::FileOptions(), &file,
                                                    nullptr).ok());
  auto* lending = dynamic_cast<BorrowingFile*>(file.get());
  ASSERT_NE(lending, nullptr);
  const rocksdb::IOStatus lent = lending->AppendBorrowed({a}, {Crc32c(a.data(), a.size()) ^ 1});
  const rocksdb::IOStatus closed = lent.ok() ? file->Close(rocksdb::IOOptions(), nullptr) : lent;
  EXPECT_FALSE(closed.ok());
  EXPECT_FALSE(client_->HeadObject(Server().bucket, prefix_ + "wrong").ok());
  std::unique_ptr<rocksdb::FSWritableFile> other;
  ASSERT_TRUE(env->GetFileSystem()->NewWritableFile(std::string(kRoot) + "other", rocksdb::FileOptions(), &other,
                                                    nullptr).ok());
  EXPECT_TRUE(dynamic_cast<BorrowingFile*>(other.get())->AppendBorrowed({c, c}, {0}).IsInvalidArgument());
  client_->set_crc32c_payloads(false);
}

TEST_F(ObjectUploadTest, APartThatFailsFailsTheFileAndLeavesNoObjectNorUpload) {
  using Action = ::ckptdb::testing::S3FaultProxy::Action;
  ::ckptdb::testing::S3FaultProxy proxy(Server().port);
  std::unique_ptr<s3::S3Client> faulty = Client(proxy.endpoint(), 1);
  ASSERT_NE(faulty, nullptr);
  // Create the upload, one part, then a part the server fails.
  proxy.Script({Action::kPass, Action::kPass, Action::kInternalError});
  ObjectUploadOptions o;
  o.part_bytes = 5 << 20;  // SeaweedFS refuses smaller parts but the last
  o.parts_in_flight = 2;
  auto env = NewObjectUploadEnv(nullptr, faulty.get(), Server().bucket, prefix_, kRoot, o, &ledger_);
  rocksdb::ExternalSstFileInfo info;
  rocksdb::Status s = WriteSst(env.get(), "failed.sst", 400, 70000, &info);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("InternalError"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find("failed.sst"), std::string::npos) << s.ToString();
  EXPECT_TRUE(ledger_.objects().empty());
  StatusOr<s3::ObjectInfo> head = client_->HeadObject(Server().bucket, prefix_ + "failed.sst");
  EXPECT_EQ(head.status().code(), StatusCode::kNotFound) << head.status();
  auto uploads = client_->ListMultipartUploads(Server().bucket, prefix_);
  ASSERT_TRUE(uploads.ok()) << uploads.status();
  EXPECT_TRUE(uploads->empty());
}

}  // namespace
}  // namespace bucket
}  // namespace ckptdb
