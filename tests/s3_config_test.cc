// Bucket URLs and the AWS-convention settings (environment, profile files).
#include "s3/s3_config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include "test_util.h"

namespace ckptdb {
namespace s3 {
namespace {

TEST(S3Url, ParsesBucketAndPrefix) {
  auto u = S3Url::Parse("s3://my-bucket/ckpt/run1");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->bucket, "my-bucket");
  EXPECT_EQ(u->prefix, "ckpt/run1/");
  EXPECT_EQ(u->ToString(), "s3://my-bucket/ckpt/run1/");
  auto bare = S3Url::Parse("s3://my.bucket.1");
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->prefix, "");
  auto slash = S3Url::Parse("s3://abc/");
  ASSERT_TRUE(slash.ok());
  EXPECT_EQ(slash->prefix, "");
  EXPECT_TRUE(IsS3Url("s3://x"));
  EXPECT_FALSE(IsS3Url("/tmp/store"));
}

TEST(S3Url, RejectsBadUrlsNamingTheProblem) {
  struct Case {
    const char* url;
    const char* needle;
  };
  for (const Case& c : {Case{"gs://bucket/p", "expected s3://BUCKET/PREFIX"}, Case{"s3://", "3 to 63"},
                        Case{"s3://ab/p", "3 to 63"}, Case{"s3://My_Bucket/p", "lower-case"},
                        Case{"s3://-bucket/p", "start and end"}, Case{"s3://bucket/a//b", "'//'"}}) {
    auto u = S3Url::Parse(c.url);
    ASSERT_FALSE(u.ok()) << c.url;
    EXPECT_EQ(u.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(u.status().message().find(c.needle), std::string::npos) << u.status();
  }
}

class S3SettingsTest : public ::testing::Test {
 protected:
  static constexpr const char* kVars[] = {"AWS_ENDPOINT_URL_S3",
                                          "AWS_ENDPOINT_URL",
                                          "AWS_ACCESS_KEY_ID",
                                          "AWS_SECRET_ACCESS_KEY",
                                          "AWS_SESSION_TOKEN",
                                          "AWS_REGION",
                                          "AWS_DEFAULT_REGION",
                                          "AWS_PROFILE",
                                          "AWS_CONFIG_FILE",
                                          "AWS_SHARED_CREDENTIALS_FILE",
                                          "CKPTDB_S3_ADDRESSING_STYLE",
                                          "HOME",
                                          "AWS_CA_BUNDLE"};
  void SetUp() override {
    for (const char* v : kVars) {
      const char* old = std::getenv(v);
      if (old) saved_[v] = old;
      unsetenv(v);
    }
    setenv("HOME", home_.path().c_str(), 1);
  }
  void TearDown() override {
    for (const char* v : kVars) unsetenv(v);
    for (const auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
  }
  void Write(const std::string& relative, const std::string& text) {
    const std::string dir = home_.path() + "/.aws";
    mkdir(dir.c_str(), 0700);
    std::ofstream(home_.path() + "/" + relative) << text;
  }
  ckptdb::testing::TempDir home_;
  std::map<std::string, std::string> saved_;
};

TEST_F(S3SettingsTest, EnvironmentVariables) {
  setenv("AWS_ACCESS_KEY_ID", "AKID", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "SECRET", 1);
  setenv("AWS_SESSION_TOKEN", "TOKEN", 1);
  setenv("AWS_DEFAULT_REGION", "eu-west-1", 1);
  setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/", 1);
  auto s = S3Settings::FromEnvironment();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->credentials.access_key_id, "AKID");
  EXPECT_EQ(s->credentials.secret_access_key, "SECRET");
  EXPECT_EQ(s->credentials.session_token, "TOKEN");
  EXPECT_EQ(s->credentials_source, "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY");
  EXPECT_EQ(s->region, "eu-west-1");
  EXPECT_EQ(s->endpoint, "http://127.0.0.1:9000");
  EXPECT_EQ(s->addressing, AddressingStyle::kAuto);
  // The S3-specific variables win over the general ones.
  setenv("AWS_REGION", "ap-south-1", 1);
  setenv("AWS_ENDPOINT_URL_S3", "https://s3.example.com", 1);
  s = S3Settings::FromEnvironment();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->region, "ap-south-1");
  EXPECT_EQ(s->endpoint, "https://s3.example.com");
}

TEST_F(S3SettingsTest, DefaultEndpointIsAwsForTheRegion) {
  setenv("AWS_ACCESS_KEY_ID", "AKID", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "SECRET", 1);
  auto s = S3Settings::FromEnvironment();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->region, "us-east-1");
  EXPECT_EQ(s->endpoint, "https://s3.us-east-1.amazonaws.com");
}

TEST_F(S3SettingsTest, ProfileFiles) {
  Write(".aws/credentials",
        "[default]\naws_access_key_id = DEFAULTID\naws_secret_access_key = DEFAULTSECRET\n\n"
        "# a comment\n[work]\naws_access_key_id=WORKID\naws_secret_access_key=WORKSECRET\naws_session_token=WT\n");
  Write(".aws/config",
        "[default]\nregion = us-west-2\n\n[profile work]\nregion = eu-central-1\n"
        "s3 =\n  addressing_style = path\n  endpoint_url = http://10.0.0.5:8333\n");
  auto s = S3Settings::FromEnvironment();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->credentials.access_key_id, "DEFAULTID");
  EXPECT_EQ(s->region, "us-west-2");
  EXPECT_EQ(s->endpoint, "https://s3.us-west-2.amazonaws.com");

  setenv("AWS_PROFILE", "work", 1);
  s = S3Settings::FromEnvironment();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->credentials.access_key_id, "WORKID");
  EXPECT_EQ(s->credentials.secret_access_key, "WORKSECRET");
  EXPECT_EQ(s->credentials.session_token, "WT");
  EXPECT_EQ(s->region, "eu-central-1");
  EXPECT_EQ(s->endpoint, "http://10.0.0.5:8333");
  EXPECT_EQ(s->addressing, AddressingStyle::kPath);
  EXPECT_EQ(s->profile, "work");
  EXPECT_EQ(s->credentials_source, "profile 'work' in " + home_.path() + "/.aws/credentials");

  // The environment's keys win over the profile's.
  setenv("AWS_ACCESS_KEY_ID", "ENVID", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "ENVSECRET", 1);
  s = S3Settings::FromEnvironment();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->credentials.access_key_id, "ENVID");
  EXPECT_EQ(s->credentials.session_token, "");
}

TEST_F(S3SettingsTest, FilesNamedByVariables) {
  const std::string creds = home_.path() + "/elsewhere-credentials";
  std::ofstream(creds) << "[default]\naws_access_key_id = ELSEID\naws_secret_access_key = ELSESECRET\n";
  setenv("AWS_SHARED_CREDENTIALS_FILE", creds.c_str(), 1);
  setenv("CKPTDB_S3_ADDRESSING_STYLE", "virtual", 1);
  setenv("AWS_CA_BUNDLE", "/etc/private-ca.pem", 1);
  auto s = S3Settings::FromEnvironment();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->credentials.access_key_id, "ELSEID");
  EXPECT_EQ(s->addressing, AddressingStyle::kVirtual);
  EXPECT_EQ(s->ca_bundle, "/etc/private-ca.pem");
}

TEST_F(S3SettingsTest, ClearErrors) {
  auto none = S3Settings::FromEnvironment();
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("AWS_ACCESS_KEY_ID"), std::string::npos) << none.status();

  setenv("AWS_ACCESS_KEY_ID", "AKID", 1);
  auto half = S3Settings::FromEnvironment();
  EXPECT_EQ(half.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(half.status().message().find("AWS_SECRET_ACCESS_KEY"), std::string::npos) << half.status();

  setenv("AWS_SECRET_ACCESS_KEY", "SECRET", 1);
  setenv("AWS_ENDPOINT_URL", "127.0.0.1:9000", 1);
  auto bad_endpoint = S3Settings::FromEnvironment();
  EXPECT_EQ(bad_endpoint.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_endpoint.status().message().find("AWS_ENDPOINT_URL"), std::string::npos) << bad_endpoint.status();
  EXPECT_EQ(bad_endpoint.status().message().find("SECRET"), std::string::npos) << bad_endpoint.status();
  setenv("AWS_ENDPOINT_URL", "http://host:9000/bucket", 1);
  EXPECT_EQ(S3Settings::FromEnvironment().status().code(), StatusCode::kInvalidArgument);
  unsetenv("AWS_ENDPOINT_URL");

  setenv("CKPTDB_S3_ADDRESSING_STYLE", "sideways", 1);
  auto bad_style = S3Settings::FromEnvironment();
  EXPECT_NE(bad_style.status().message().find("CKPTDB_S3_ADDRESSING_STYLE"), std::string::npos) << bad_style.status();
  unsetenv("CKPTDB_S3_ADDRESSING_STYLE");

  setenv("AWS_PROFILE", "nowhere", 1);
  auto no_profile = S3Settings::FromEnvironment();
  EXPECT_EQ(no_profile.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_profile.status().message().find("'nowhere'"), std::string::npos) << no_profile.status();
  unsetenv("AWS_PROFILE");

  Write(".aws/config", "[default]\nregion\n");
  auto bad_file = S3Settings::FromEnvironment();
  EXPECT_EQ(bad_file.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_file.status().message().find("config:2"), std::string::npos) << bad_file.status();
}

}  // namespace
}  // namespace s3
}  // namespace ckptdb
