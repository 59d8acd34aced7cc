// The `ckptdb` command, run as a user would: output and exit codes.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>

#include "ckptdb/ckptdb.h"
#include "test_util.h"

namespace ckptdb {
namespace {

struct CliRun {
  int code;
  std::string out;  // stdout and stderr
};

CliRun Ckptdb(const std::string& args) {
  std::string cmd = std::string(CKPTDB_CLI) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int rc = pclose(p);
  return CliRun{WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto w = OpenStoreWriter(store_);
    ASSERT_TRUE(w.ok());
    StateDict sd;
    std::vector<float> v = {0.5f, -1.25f, 3.0f, 1e-8f, 100.0f, -0.0f};
    ASSERT_OK(sd.Add("layer.weight", Tensor::Copy(DType::kF32, {2, 3}, v.data(), 24).value()));
    std::vector<uint16_t> bf = {0x3f80, 0xc000, 0x3e80};  // 1, -2, 0.25 in bf16
    ASSERT_OK(sd.Add("layer.bias", Tensor::Copy(DType::kBF16, {3}, bf.data(), 6).value()));
    std::vector<int64_t> big(5000);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<int64_t>(i);
    ASSERT_OK(sd.Add("counter", Tensor::Copy(DType::kI64, {5000}, big.data(), big.size() * 8).value()));
    int64_t step = 7;
    ASSERT_OK(sd.Add("step", Tensor::Copy(DType::kI64, {}, &step, 8).value()));
    ASSERT_OK(sd.AddBytes("meta", "{\"lr\": 0.1}\x01"));
    ASSERT_OK(testing::SaveNoDist(sd, **w, 4));
    ASSERT_OK(testing::SaveNoDist(sd, **w, 12));
  }
  testing::TempDir dir_;
  std::string store_ = dir_.Sub("store");
};

TEST_F(CliTest, LsListsSteps) {
  CliRun r = Ckptdb("ls " + store_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "STEP  CREATED               WORLD  ENTRIES  BYTES     STORED");
  EXPECT_NE(r.out.find("\n4     "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n12    "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  1      5        39.1 KiB  "), std::string::npos) << r.out;
}

TEST_F(CliTest, LsJsonHasOneObjectPerStep) {
  CliRun r = Ckptdb("ls " + store_ + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.front(), '[');
  EXPECT_NE(r.out.find("{\"step\": 4, \"created\": \""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("{\"step\": 12, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"entries\": 5, \"bytes\": 40050, "), std::string::npos) << r.out;
}

TEST_F(CliTest, LsStepListsEntries) {
  CliRun r = Ckptdb("ls " + store_ + " 4");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out,
            "FQN           KIND    DTYPE  SHAPE   SHARDS  BYTES\n"
            "layer.weight  tensor  f32    [2, 3]  1       24 B\n"
            "layer.bias    tensor  bf16   [3]     1       6 B\n"
            "counter       tensor  i64    [5000]  1       39.1 KiB\n"
            "step          tensor  i64    []      1       8 B\n"
            "meta          bytes   -      -       1       12 B\n");
  CliRun latest = Ckptdb("ls " + store_ + " latest --json");
  ASSERT_EQ(latest.code, 0) << latest.out;
  EXPECT_NE(latest.out.find("{\"fqn\": \"layer.bias\", \"kind\": \"tensor\", \"dtype\": \"bf16\", \"shape\": [3], "
                            "\"shards\": 1, \"bytes\": 6, "),
            std::string::npos)
      << latest.out;
}

TEST_F(CliTest, CatFormatsValuesPerDType) {
  CliRun r = Ckptdb("cat " + store_ + " 4 layer.weight");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "layer.weight: f32 [2, 3]\n[[0.5, -1.25, 3],\n [9.99999994e-09, 100, -0]]\n");
  EXPECT_EQ(Ckptdb("cat " + store_ + " latest layer.bias").out, "layer.bias: bf16 [3]\n[1, -2, 0.25]\n");
  EXPECT_EQ(Ckptdb("cat " + store_ + " 4 step").out, "step: i64 []\n7\n");
  EXPECT_EQ(Ckptdb("cat " + store_ + " 4 counter").out, "counter: i64 [5000]\n[0, 1, 2, ..., 4997, 4998, 4999]\n");
  EXPECT_EQ(Ckptdb("cat " + store_ + " 4 meta").out, "meta: bytes, 12 bytes\n{\"lr\": 0.1}\\x01\n");
}

TEST_F(CliTest, BadInputGetsAClearMessageAndExitCode) {
  struct Case {
    std::string args;
    int code;
    std::string fragment;
  };
  std::ofstream(dir_.Sub("plain")) << "x";
  const Case cases[] = {
      {"ls " + store_ + " 5", 1, "step 5 not found"},
      {"ls " + store_ + " abc", 1, "invalid step 'abc'"},
      {"ls " + store_ + " 99999999999999999999", 1, "is out of range"},
      {"ls " + store_ + " -3", 1, "step -3 is out of range"},
      {"cat " + store_ + " 4 nope", 1, "entry 'nope' is not in step 4"},
      {"ls " + dir_.Sub("plain"), 1, "is a file, not a ckptdb store"},
      {"ls " + dir_.Sub("missing"), 1, "no store at"},
      {"ls", 2, "expected STORE [STEP]"},
      {"ls " + store_ + " --frobnicate", 2, "unknown option --frobnicate"},
      {"cat " + store_ + " 4", 2, "expected STORE STEP FQN"},
      {"", 2, "missing command"},
      {"explode", 2, "unknown command 'explode'"},
  };
  for (const Case& c : cases) {
    CliRun r = Ckptdb(c.args);
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.fragment), std::string::npos) << c.args << "\n" << r.out;
  }
}

TEST_F(CliTest, LsWorksWhileAWriterHoldsTheStoreOpen) {
  auto w = OpenStoreWriter(store_);
  ASSERT_TRUE(w.ok());
  ASSERT_OK((*w)->OpenDatabase());  // holds RocksDB's lock, as a training job does
  StateDict sd;
  ASSERT_OK(sd.AddBytes("x", "y"));
  ASSERT_OK(testing::SaveNoDist(sd, **w, 13));
  CliRun r = Ckptdb("ls " + store_ + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("{\"step\": 13, "), std::string::npos) << r.out;
  EXPECT_EQ(Ckptdb("cat " + store_ + " 13 x").out, "x: bytes, 1 bytes\ny\n");
}

TEST_F(CliTest, HelpEverywhere) {
  for (std::string args : {"--help", "ls --help", "cat --help", "help"}) {
    CliRun r = Ckptdb(args);
    EXPECT_EQ(r.code, 0) << args;
    EXPECT_EQ(r.out.rfind("usage: ckptdb", 0), 0u) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("exit codes"), std::string::npos) << args;
  }
}

}  // namespace
}  // namespace ckptdb
