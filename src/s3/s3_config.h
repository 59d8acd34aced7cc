// Where a bucket is and who we are there, found the way AWS's own tools find
// it, so that existing setups work unchanged:
//   endpoint     AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
//                `endpoint_url` (also under its `s3 =` section), else
//                https://s3.REGION.amazonaws.com
//   credentials  AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+
//                AWS_SESSION_TOKEN), else the profile in the credentials
//                file (AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials), else
//                in the config file (AWS_CONFIG_FILE, ~/.aws/config)
//   region       AWS_REGION, AWS_DEFAULT_REGION, the profile's `region`, else
//                us-east-1
//   profile      AWS_PROFILE, else "default" ([default] / [profile NAME])
//   CA bundle    AWS_CA_BUNDLE or the profile's `ca_bundle`: certificates
//                trusted for https instead of the system's
//   addressing   CKPTDB_S3_ADDRESSING_STYLE or the profile's
//                `s3 = addressing_style`: path, virtual or auto (virtual-
//                hosted on AWS's own endpoints, path-style elsewhere: most
//                S3-compatible servers and IP endpoints want path-style)
// A store URL is s3://BUCKET/PREFIX.
//
// Thread safety: values. FromEnvironment reads the environment (getenv).
#ifndef CKPTDB_SRC_S3_S3_CONFIG_H_
#define CKPTDB_SRC_S3_S3_CONFIG_H_

#include <map>
#include <string>
#include <string_view>

#include "ckptdb/status.h"
#include "s3/sigv4.h"

namespace ckptdb {
namespace s3 {

enum class AddressingStyle { kAuto, kPath, kVirtual };

struct S3Settings {
  std::string endpoint;  // "http://127.0.0.1:8333", "https://s3.eu-west-1.amazonaws.com"
  std::string region = "us-east-1";
  Credentials credentials;
  AddressingStyle addressing = AddressingStyle::kAuto;
  std::string ca_bundle;  // a PEM file of trusted CAs; "" = the system's
  std::string profile;    // the profile used ("" when none applied), for messages
  // Where the credentials came from, for messages ("AWS_ACCESS_KEY_ID /
  // AWS_SECRET_ACCESS_KEY", "profile 'work' in /home/u/.aws/credentials").
  std::string credentials_source;

  // Reads the settings above. InvalidArgument naming the variable or file
  // and line when one is malformed; FailedPrecondition when no credentials
  // are found anywhere (naming the places looked at).
  static StatusOr<S3Settings> FromEnvironment();
};

// s3://BUCKET/PREFIX. The prefix has no leading '/' and, when not empty, ends
// with '/'. InvalidArgument for another scheme, an empty or invalid bucket
// name (S3's rules: 3-63 characters of a-z 0-9 . -, starting and ending with
// a letter or digit).
struct S3Url {
  std::string bucket;
  std::string prefix;

  static StatusOr<S3Url> Parse(std::string_view url);
  std::string ToString() const { return "s3://" + bucket + "/" + prefix; }
};

// Whether `url` names a bucket store (starts with "s3://").
bool IsS3Url(std::string_view url);

// An INI file as AWS's tools read it: [section] -> key -> value; the lines
// indented under `s3 =` become "s3.KEY". InvalidArgument naming `path` and
// the line when a line is neither.
StatusOr<std::map<std::string, std::map<std::string, std::string>>> ParseAwsIniFile(const std::string& text,
                                                                                    const std::string& path);

}  // namespace s3
}  // namespace ckptdb

#endif  // CKPTDB_SRC_S3_S3_CONFIG_H_
