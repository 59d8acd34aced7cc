// AWS Signature Version 4 for S3 requests, with the S3 rules: the path is
// URI-encoded once per segment ('/' kept, no dot-segment normalisation, no
// double encoding), the query string sorted by encoded name then value (a
// bare `?uploads` signs as `uploads=`), header names lower-cased and sorted,
// values trimmed with inner runs of spaces collapsed, and
// `x-amz-content-sha256` on every request. curl's built-in SigV4 gets several
// of these wrong for S3, which is why ckptdb signs itself (third_party/README.md, libcurl).
//
// Everything here is a pure function of its arguments (the clock is passed
// in), tested against AWS's published SigV4 test suite and the S3 examples.
//
// Thread safety: free functions without shared state.
#ifndef CKPTDB_SRC_S3_SIGV4_H_
#define CKPTDB_SRC_S3_SIGV4_H_

#include <cstddef>
#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/hex.h"

namespace ckptdb {
namespace s3 {

// The payload hash value that skips hashing the body (for https only: the
// body is then protected by TLS, not by the signature).
inline constexpr const char* kUnsignedPayload = "UNSIGNED-PAYLOAD";

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;  // never printed
  std::string session_token;      // empty unless temporary credentials (STS)
};

using NameValues = std::vector<std::pair<std::string, std::string>>;

// A request as the signer sees it.
struct SignableRequest {
  std::string method;  // "GET", "PUT", ...
  // The decoded path ("/bucket/my key"); encoded by the signer and by the
  // URL builder the same way. Empty means "/".
  std::string path;
  NameValues query;            // decoded name/value pairs; a bare name has value ""
  NameValues headers;          // as sent; Host must be among them; names any case
  std::string payload_sha256;  // lower-case hex, or kUnsignedPayload
};

// Lower-case hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);
// Raw 32-byte HMAC-SHA256.
std::string HmacSha256(std::string_view key, std::string_view data);
// (Lower-case hex of raw bytes: HexEncode, util/hex.h.)

// RFC 3986 percent-encoding as SigV4 wants it: A-Z a-z 0-9 - . _ ~ are kept,
// '/' is kept when !encode_slash, every other byte becomes %XX (upper-case).
std::string UriEncode(std::string_view s, bool encode_slash);

// The encoded query string, sorted as SigV4 requires ("" when none). Also
// usable as the URL's query: both must be the same bytes.
std::string CanonicalQueryString(const NameValues& query);

// The canonical request; *signed_headers receives "host;x-amz-date;...".
std::string CanonicalRequest(const SignableRequest& request, std::string* signed_headers);

// "20150830T123600Z" for a UTC time.
std::string AmzDate(std::time_t t);

// The credential scope: "20150830/us-east-1/s3/aws4_request".
std::string CredentialScope(std::string_view amz_date, std::string_view region, std::string_view service);

std::string StringToSign(std::string_view amz_date, std::string_view scope, std::string_view canonical_request);

// The derived key: HMAC chain over date, region, service, "aws4_request".
std::string SigningKey(std::string_view secret, std::string_view date, std::string_view region,
                       std::string_view service);

// The Authorization header's value for `request` exactly as given (no header
// is added): the form the AWS test suite checks.
std::string AuthorizationFor(const SignableRequest& request, const Credentials& credentials, std::string_view amz_date,
                             std::string_view region, std::string_view service);

// Signs an S3 request in place: adds x-amz-date (from `now`),
// x-amz-content-sha256 (request->payload_sha256), x-amz-security-token when
// the credentials have one, then Authorization. REQUIRES: none of these is
// already among request->headers; payload_sha256 set.
void SignRequest(SignableRequest* request, const Credentials& credentials, std::string_view region,
                 std::string_view service, std::time_t now);

}  // namespace s3
}  // namespace ckptdb

#endif  // CKPTDB_SRC_S3_SIGV4_H_
