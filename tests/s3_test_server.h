// The S3 server the S3Server ctest fixture started (tests/s3_server_fixture.sh),
// as the tests see it: its settings and warm bucket, or why there is none.
#ifndef CKPTDB_TESTS_S3_TEST_SERVER_H_
#define CKPTDB_TESTS_S3_TEST_SERVER_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "s3/s3_client.h"
#include "s3/s3_config.h"

namespace ckptdb {
namespace testing {

struct S3TestServer {
  s3::S3Settings settings;  // path-style, the server's own identity
  std::string bucket;       // created and warmed by the fixture
  int port = 0;
  std::string https_endpoint;  // "" when the server has no https port
  std::string ca_file;         // its certificate
  std::string skip_reason;     // non-empty: no server, skip saying this
};

// A server.env as tools/seaweedfs.sh writes it (with CKPTDB_S3_BUCKET when
// the fixture made one); skip_reason says what is wrong with it.
S3TestServer ReadS3ServerEnv(const std::string& path);

// Read once from $CKPTDB_S3_TEST_SERVER (the fixture's server.env).
const S3TestServer& TestS3Server();

// A key prefix of its own for the running test (tests share the bucket and
// may run in parallel).
std::string UniqueTestPrefix();

std::string RandomBytes(size_t n, uint64_t seed);

// Sets AWS's variables (endpoint, keys, region; no config files) to reach
// the test server, as a user's environment does, for this process and the
// ones it starts.
void SetAwsVariablesForTestServer();

// A test of the fixture's server, skipped (saying why) when there is none.
// client_ reaches it (path style, the server's identity), bucket_ is its
// warm bucket, prefix_ a key prefix of the test's own (UniqueTestPrefix,
// ending in '/'). A fixture that adds to SetUp calls this one first and
// returns when it skipped or failed.
class S3ServerTest : public ::testing::Test {
 protected:
  void SetUp() override;

  std::shared_ptr<s3::S3Client> client_;
  std::string bucket_;
  std::string prefix_;
};

}  // namespace testing
}  // namespace ckptdb

#endif  // CKPTDB_TESTS_S3_TEST_SERVER_H_
