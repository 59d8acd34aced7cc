// The `ckptdb` command on stores in a bucket, against the real SeaweedFS of
// the S3Server fixture: `ckptdb cp` directory -> bucket -> directory keeps
// every entry bit for bit, with metrics, note and tags, and the bucket
// deduplicates unchanged chunks; a copy run again leaves identical steps as
// they are, and one onto other content stops naming the step; ls, info,
// verify, cat, tag, rm, gc, diff and export work on s3:// URLs; an
// unreachable endpoint is named.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ckptdb/ckptdb.h"
#include "s3_test_server.h"
#include "test_util.h"

namespace ckptdb {
namespace {

using ::ckptdb::testing::PatternTensor;
using ::ckptdb::testing::RunCommand;

const ::ckptdb::testing::S3TestServer& Server() { return ::ckptdb::testing::TestS3Server(); }

class S3CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Server().skip_reason.empty()) GTEST_SKIP() << Server().skip_reason;
    ::ckptdb::testing::SetAwsVariablesForTestServer();
    std::string prefix = ::ckptdb::testing::UniqueTestPrefix();
    url_ = "s3://" + Server().bucket + "/" + prefix;
  }

  ::ckptdb::testing::CommandResult Cli(const std::string& args) {
    return RunCommand(std::string(CKPTDB_CLI) + " " + args + " 2>&1");
  }

  // Three steps into a directory store: a sharded weight of which a quarter
  // changes every step, a bytes entry, metrics, a note; a tag on step 2.
  void MakeSource() {
    auto w = OpenStoreWriter(source_.path());
    ASSERT_TRUE(w.ok()) << w.status();
    for (int64_t step = 1; step <= 3; ++step) {
      // 16 MiB: four chunks of the default 4 MiB.
      Tensor weight = PatternTensor(DType::kF32, {4096, 1024}, 7);
      float* f = static_cast<float*>(weight.data());
      for (int64_t i = 0; i < 64 * 1024; ++i) f[i] += static_cast<float>(step);  // rows 0-63 change
      std::vector<Shard> shards{Shard{{0, 0}, weight}};
      StateDict sd;
      ASSERT_TRUE(sd.Add("w", ShardedTensor::Create(DType::kF32, {4096, 1024}, std::move(shards)).value()).ok());
      ASSERT_TRUE(sd.AddBytes("cfg", "config " + std::to_string(step)).ok());
      SaveOptions o;
      o.step = step;
      o.no_dist = true;
      o.metrics = {{"loss", 1.0 / static_cast<double>(step)}};
      o.note = "note " + std::to_string(step);
      ASSERT_TRUE(Save(sd, **w, o).ok());
    }
    ASSERT_TRUE((*w)->Tag(2, "good").ok());
  }

  // Every step of `a` and `b`: the same numbers, entries, metrics and notes.
  void ExpectSameSteps(const std::string& a, const std::string& b) {
    auto ra = OpenStoreReader(a);
    auto rb = OpenStoreReader(b);
    ASSERT_TRUE(ra.ok()) << ra.status();
    ASSERT_TRUE(rb.ok()) << rb.status();
    auto sa = (*ra)->ListSteps();
    auto sb = (*rb)->ListSteps();
    ASSERT_TRUE(sa.ok() && sb.ok());
    ASSERT_EQ(sa->size(), sb->size());
    for (size_t i = 0; i < sa->size(); ++i) {
      const int64_t step = (*sa)[i].step;
      EXPECT_EQ(step, (*sb)[i].step);
      EXPECT_EQ((*sa)[i].metrics, (*sb)[i].metrics);
      EXPECT_EQ((*sa)[i].note, (*sb)[i].note);
      auto wa = LoadWhole(**ra, step);
      auto wb = LoadWhole(**rb, step);
      ASSERT_TRUE(wa.ok() && wb.ok()) << wa.status() << " / " << wb.status();
      EXPECT_TRUE(std::get<Tensor>(*wa->Find("w")).BitwiseEquals(std::get<Tensor>(*wb->Find("w")))) << step;
      EXPECT_EQ(std::get<Bytes>(*wa->Find("cfg")).data, std::get<Bytes>(*wb->Find("cfg")).data);
      auto ma = (*ra)->ReadMetadata(step);
      auto mb = (*rb)->ReadMetadata(step);
      ASSERT_TRUE(ma.ok() && mb.ok());
      EXPECT_EQ(ma->Find("w")->kind, mb->Find("w")->kind);
    }
  }

  std::string url_;
  ::ckptdb::testing::TempDir source_, back_;
};

TEST_F(S3CliTest, CopyDirectoryToBucketToDirectoryKeepsEverything) {
  MakeSource();
  auto up = Cli("cp " + source_.path() + " " + url_ + " --tags");
  ASSERT_EQ(up.code, 0) << up.out;
  EXPECT_NE(up.out.find("step 3 (3 of 3): copied"), std::string::npos) << up.out;
  ExpectSameSteps(source_.path(), url_);
  auto bucket = OpenStoreReader(url_);
  ASSERT_TRUE(bucket.ok()) << bucket.status();
  EXPECT_EQ((*bucket)->ResolveTag("good").value(), 2);
  // Dedup in the bucket: steps 2 and 3 added about the chunk that changed.
  auto steps = (*bucket)->ListSteps();
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_LT((*steps)[2].stored_bytes, (*steps)[0].stored_bytes / 2) << (*steps)[2].stored_bytes;

  const std::string back = back_.path() + "/store";
  auto down = Cli("cp " + url_ + " " + back);
  ASSERT_EQ(down.code, 0) << down.out;
  ExpectSameSteps(source_.path(), back);
  EXPECT_EQ(Cli("verify " + back + " --all").code, 0);

  // Run again: nothing to do. Onto other content: stops, naming the step.
  auto again = Cli("cp " + url_ + " " + back);
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_NE(again.out.find("already there, identical"), std::string::npos) << again.out;
  ::ckptdb::testing::TempDir other;
  {
    auto w = OpenStoreWriter(other.path());
    ASSERT_TRUE(w.ok());
    StateDict sd;
    ASSERT_TRUE(sd.AddBytes("cfg", "something else").ok());
    SaveOptions o;
    o.step = 2;
    o.no_dist = true;
    ASSERT_TRUE(Save(sd, **w, o).ok());
  }
  auto clash = Cli("cp " + url_ + " " + other.path() + " --steps 1,good");
  EXPECT_EQ(clash.code, 1) << clash.out;
  EXPECT_NE(clash.out.find("step 2 is already in store"), std::string::npos) << clash.out;
  EXPECT_NE(clash.out.find("(the steps before it were)"), std::string::npos) << clash.out;
  auto missing = Cli("cp " + url_ + " " + other.path() + " --steps 9");
  EXPECT_EQ(missing.code, 1) << missing.out;
  EXPECT_NE(missing.out.find("step 9"), std::string::npos) << missing.out;
}

TEST_F(S3CliTest, ReadAndWriteCommandsTakeBucketUrls) {
  MakeSource();
  ASSERT_EQ(Cli("cp " + source_.path() + " " + url_).code, 0);
  auto ls = Cli("ls " + url_);
  ASSERT_EQ(ls.code, 0) << ls.out;
  EXPECT_NE(ls.out.find("loss"), std::string::npos) << ls.out;
  auto info = Cli("info " + url_ + " 2");
  EXPECT_EQ(info.code, 0) << info.out;
  EXPECT_NE(info.out.find("note 2"), std::string::npos) << info.out;
  EXPECT_EQ(Cli("info " + url_).code, 0);
  EXPECT_EQ(Cli("verify " + url_ + " --all").code, 0);
  auto cat = Cli("cat " + url_ + " best:loss cfg");
  EXPECT_EQ(cat.code, 0) << cat.out;
  EXPECT_NE(cat.out.find("config 3"), std::string::npos) << cat.out;
  ASSERT_EQ(Cli("tag " + url_ + " 1 first").code, 0);
  ASSERT_EQ(Cli("rm " + url_ + " 2").code, 0);
  auto gc = Cli("gc " + url_ + " --keep-last 1 --json");
  ASSERT_EQ(gc.code, 0) << gc.out;
  EXPECT_NE(gc.out.find("\"kept_steps\": [1, 3]"), std::string::npos) << gc.out;  // 1 is tagged
  auto json = Cli("ls " + url_ + " --json");
  EXPECT_NE(json.out.find("\"first\""), std::string::npos) << json.out;
  // Steps 1 and 3 differ in rows 0-63 of w (by 2) and in cfg.
  auto diff = Cli("diff " + url_ + " first 3");
  ASSERT_EQ(diff.code, 0) << diff.out;
  EXPECT_EQ(diff.out.rfind("step 1 -> step 3: 0 added, 0 removed, 2 changed, 0 unchanged\n", 0), 0u) << diff.out;
  EXPECT_NE(diff.out.find("65536 of 4194304 elements differ, max abs diff 2"), std::string::npos) << diff.out;
  const std::string out = back_.path() + "/step3.safetensors";
  auto exported = Cli("export " + url_ + " latest --format safetensors " + out);
  ASSERT_EQ(exported.code, 0) << exported.out;
  EXPECT_EQ(exported.out.rfind("exported step 3 to " + out + ": 1 tensors, 1 bytes entries", 0), 0u) << exported.out;
  EXPECT_GT(std::filesystem::file_size(out), 16u << 20);

  setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1", 1);
  auto down = Cli("ls " + url_);
  EXPECT_EQ(down.code, 1) << down.out;
  EXPECT_NE(down.out.find("127.0.0.1:1"), std::string::npos) << down.out;
}

}  // namespace
}  // namespace ckptdb
