#include "s3_test_server.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <random>

namespace ckptdb {
namespace testing {

S3TestServer ReadS3ServerEnv(const std::string& path) {
  S3TestServer s;
  std::map<std::string, std::string> env;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  if (!env["CKPTDB_S3_UNAVAILABLE"].empty()) {
    s.skip_reason = env["CKPTDB_S3_UNAVAILABLE"];
    return s;
  }
  s.settings.endpoint = env["CKPTDB_S3_ENDPOINT"];
  s.settings.credentials = {env["CKPTDB_S3_ACCESS_KEY"], env["CKPTDB_S3_SECRET_KEY"], ""};
  s.settings.addressing = s3::AddressingStyle::kPath;
  s.bucket = env["CKPTDB_S3_BUCKET"];
  s.https_endpoint = env["CKPTDB_S3_HTTPS_ENDPOINT"];
  s.ca_file = env["CKPTDB_S3_CA_FILE"];
  const size_t colon = s.settings.endpoint.rfind(':');
  if (s.settings.endpoint.empty() || colon == std::string::npos) {
    s.skip_reason = path + " names no server";
    return s;
  }
  s.port = std::atoi(s.settings.endpoint.c_str() + colon + 1);
  return s;
}

const S3TestServer& TestS3Server() {
  static const S3TestServer server = [] {
    S3TestServer s;
    const char* path = std::getenv("CKPTDB_S3_TEST_SERVER");
    if (path == nullptr) {
      s.skip_reason =
          "no S3 test server: run through ctest (fixture S3Server) or set CKPTDB_S3_TEST_SERVER to the server.env "
          "written by tests/s3_server_fixture.sh start";
      return s;
    }
    s = ReadS3ServerEnv(path);
    if (s.skip_reason.empty() && s.bucket.empty()) s.skip_reason = std::string(path) + " names no bucket";
    return s;
  }();
  return server;
}

std::string UniqueTestPrefix() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "." + info->name() + "-" + std::to_string(std::random_device{}()) + "/";
}

void S3ServerTest::SetUp() {
  const S3TestServer& server = TestS3Server();
  if (!server.skip_reason.empty()) GTEST_SKIP() << server.skip_reason;
  auto c = s3::S3Client::Create(server.settings);
  ASSERT_TRUE(c.ok()) << c.status();
  client_ = std::move(*c);
  bucket_ = server.bucket;
  prefix_ = UniqueTestPrefix();
}

void SetAwsVariablesForTestServer() {
  const S3TestServer& server = TestS3Server();
  setenv("AWS_ENDPOINT_URL", server.settings.endpoint.c_str(), 1);
  setenv("AWS_ACCESS_KEY_ID", server.settings.credentials.access_key_id.c_str(), 1);
  setenv("AWS_SECRET_ACCESS_KEY", server.settings.credentials.secret_access_key.c_str(), 1);
  setenv("AWS_REGION", "us-east-1", 1);
  setenv("AWS_CONFIG_FILE", "/nonexistent", 1);
  setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent", 1);
}

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

}  // namespace testing
}  // namespace ckptdb
