#include "s3/s3_client.h"

#include <openssl/evp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <thread>
#include <tuple>

#include "s3/s3_xml.h"
#include "s3/sigv4.h"
#include "util/crc32c.h"
#include "util/status_macros.h"

namespace ckptdb {
namespace s3 {

struct S3Client::Call {
  const char* op;  // "PutObject", ... for messages
  std::string method;
  std::string bucket;
  std::string key;  // "" for bucket operations
  NameValues query;
  NameValues headers;
  HttpBody body;
  // Sent but not signed: If-None-Match and If-Match. AWS asks only for
  // host and x-amz-* to be signed; leaving the preconditions out of the
  // signature lets a test proxy strip them as a server that ignores them
  // would, and their loss is what the store's probe catches
  // (bucket/conditional_probe.h).
  NameValues unsigned_headers = {};
  bool conditional = false;  // carries If-None-Match: a 409 conflict is retried
  // S3 may answer 200 and put an error in the body (CompleteMultipartUpload):
  // a transient one there is retried like a 500.
  bool error_in_ok_body = false;
  char* sink = nullptr;  // a 2xx body goes here (HttpRequest::sink)
  size_t sink_capacity = 0;
  HttpBodyStream* stream = nullptr;  // or here (HttpRequest::stream)
};

struct S3Client::Outcome {
  int attempts = 0;
  // An earlier try may have been applied by the server (sent, then the
  // connection broke or a 5xx came back).
  bool earlier_attempt_may_have_landed = false;
};

namespace {

constexpr const char* kCrc32cHeader = "x-amz-checksum-crc32c";

// Lower-case hex of a digest of the body's pieces, in order.
std::string DigestHex(const HttpBody& body, const EVP_MD* type) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), type, nullptr);
  for (std::string_view p : body.pieces()) EVP_DigestUpdate(ctx.get(), p.data(), p.size());
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  return HexEncode(std::string_view(reinterpret_cast<const char*>(md), len));
}

std::string Md5Hex(const HttpBody& data) { return DigestHex(data, EVP_md5()); }

uint32_t BodyCrc32c(const HttpBody& body) {
  uint32_t crc = 0;
  for (std::string_view p : body.pieces()) crc = Crc32c(p.data(), p.size(), crc);
  return crc;
}

std::string Unquote(std::string etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  return etag;
}

bool IsRetryableStatus(long status) {
  return status == 500 || status == 502 || status == 503 || status == 504 || status == 429;
}

int BackoffMs(int attempt, int initial, int cap) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  const int64_t ceiling = std::min<int64_t>(cap, static_cast<int64_t>(initial) << std::min(attempt, 20));
  return static_cast<int>(std::uniform_int_distribution<int64_t>(0, std::max<int64_t>(ceiling, 1))(rng));
}

// "2026-12-02T18:56:35.123Z" -> Unix ms; false when it is not that shape.
bool ParseIsoTime(const std::string& text, int64_t* ms) {
  std::tm tm{};
  int millis = 0;
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  const int n = std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3d", &year, &month, &day, &hour, &minute,
                            &second, &millis);
  if (n < 6) return false;
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  *ms = static_cast<int64_t>(timegm(&tm)) * 1000 + (n == 7 ? millis : 0);
  return true;
}

// An HTTP Date ("Thu, 03 Dec 2026 21:05:00 GMT") -> Unix ms; 0 when absent
// or not that shape.
int64_t ParseHttpDate(const std::string& text) {
  std::tm tm{};
  const char* end = strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S", &tm);
  if (end == nullptr) return 0;
  return static_cast<int64_t>(timegm(&tm)) * 1000;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

namespace {

// A positive number of seconds from `name`; `fallback` when it is unset.
StatusOr<double> SecondsFromEnvironment(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  if (*end != '\0' || !(d > 0) || d > 86400) {
    return Status::InvalidArgument(std::string(name) + " is '" + v + "'; it must be a number of seconds in (0, 86400]");
  }
  return d;
}

}  // namespace

StatusOr<S3ClientOptions> S3ClientOptionsFromEnvironment() {
  S3ClientOptions o;
  ASSIGN_OR_RETURN(double stall, SecondsFromEnvironment("CKPTDB_S3_STALL_TIMEOUT", o.http.stall_timeout_s));
  ASSIGN_OR_RETURN(double connect,
                   SecondsFromEnvironment("CKPTDB_S3_CONNECT_TIMEOUT", o.http.connect_timeout_ms / 1000.0));
  // libcurl counts the stall limit in whole seconds.
  o.http.stall_timeout_s = std::max<long>(1, static_cast<long>(stall + 0.5));
  o.http.connect_timeout_ms = std::max<long>(1, static_cast<long>(connect * 1000));
  if (const char* v = std::getenv("AWS_MAX_ATTEMPTS"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 1 || n > 100) {
      return Status::InvalidArgument(std::string("AWS_MAX_ATTEMPTS is '") + v + "'; it must be a whole number in [1, 100]");
    }
    o.max_attempts = static_cast<int>(n);
  }
  if (const char* v = std::getenv("CKPTDB_S3_PAYLOAD_CHECKSUM"); v != nullptr && *v != '\0') {
    const std::string mode = v;
    if (mode != "auto" && mode != "sha256") {
      return Status::InvalidArgument("CKPTDB_S3_PAYLOAD_CHECKSUM is '" + mode +
                                     "'; it must be 'auto' (CRC-32C where the server checks it, else SHA-256) "
                                     "or 'sha256' (every upload's SHA-256 signed)");
    }
    o.allow_crc32c_payloads = mode == "auto";
  }
  return o;
}

StatusOr<std::unique_ptr<S3Client>> S3Client::Create(S3Settings settings, S3ClientOptions options) {
  const std::string& e = settings.endpoint;
  const size_t sep = e.find("://");
  if (sep == std::string::npos || (e.compare(0, sep, "http") != 0 && e.compare(0, sep, "https") != 0)) {
    return Status::InvalidArgument("S3 endpoint '" + e + "' is not an http:// or https:// URL");
  }
  std::string host_port = e.substr(sep + 3);
  while (!host_port.empty() && host_port.back() == '/') host_port.pop_back();
  if (host_port.empty() || host_port.find('/') != std::string::npos) {
    return Status::InvalidArgument("S3 endpoint '" + e + "' must be scheme://host[:port] without a path");
  }
  if (options.max_attempts < 1) options.max_attempts = 1;
  if (options.http.ca_file.empty()) options.http.ca_file = settings.ca_bundle;
  return std::unique_ptr<S3Client>(
      new S3Client(std::move(settings), std::move(options), e.substr(0, sep), std::move(host_port)));
}

S3Client::S3Client(S3Settings settings, S3ClientOptions options, std::string scheme, std::string host_port)
    : settings_(std::move(settings)),
      options_(std::move(options)),
      scheme_(std::move(scheme)),
      host_port_(std::move(host_port)) {}

S3Client::~S3Client() = default;

std::unique_ptr<HttpConnection> S3Client::AcquireConnection() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  return std::make_unique<HttpConnection>(options_.http);
}

void S3Client::ReleaseConnection(std::unique_ptr<HttpConnection> connection) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < options_.max_idle_connections) idle_.push_back(std::move(connection));
}

std::string S3Client::Describe(const Call& call) const {
  std::string object = "s3://" + call.bucket + (call.key.empty() ? std::string() : "/" + call.key);
  return std::string("S3 ") + call.op + " of " + object + " at " + settings_.endpoint;
}

namespace {

std::atomic<uint64_t> process_requests{0}, process_gets{0}, process_bytes_received{0};

}  // namespace

ProcessS3Traffic ProcessS3TrafficSoFar() {
  return ProcessS3Traffic{process_requests.load(), process_gets.load(), process_bytes_received.load()};
}

StatusOr<HttpResponse> S3Client::Execute(const Call& call, Outcome* outcome) {
  // Virtual-hosted style puts the bucket in the host name; it needs a bucket
  // that is a valid DNS label (no dots, for TLS certificates to match).
  const bool virtual_host =
      settings_.addressing == AddressingStyle::kVirtual ||
      (settings_.addressing == AddressingStyle::kAuto && call.bucket.find('.') == std::string::npos &&
       (EndsWith(host_port_, ".amazonaws.com") || host_port_.find(".amazonaws.com:") != std::string::npos));
  const std::string host = virtual_host ? call.bucket + "." + host_port_ : host_port_;
  std::string path = virtual_host ? "/" + call.key : "/" + call.bucket + (call.key.empty() ? "" : "/" + call.key);
  std::string url = scheme_ + "://" + host + UriEncode(path, false);
  const std::string query = CanonicalQueryString(call.query);
  if (!query.empty()) url += "?" + query;
  // A body with its CRC-32C in a signed header is not hashed again.
  const bool crc_carried = std::any_of(call.headers.begin(), call.headers.end(),
                                       [](const auto& h) { return h.first == kCrc32cHeader; });
  const std::string payload_sha = (options_.sign_payload && !crc_carried) || call.body.empty()
                                      ? DigestHex(call.body, EVP_sha256())
                                      : std::string(kUnsignedPayload);

  // Why the last try failed, without the call's description (added once).
  Status last_error;
  bool never_connected = true;
  int stalled = 0;  // tries the server did not answer
  for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
    if (attempt > 0) {
      std::this_thread::sleep_for(
          std::chrono::milliseconds(BackoffMs(attempt - 1, options_.initial_backoff_ms, options_.max_backoff_ms)));
    }
    outcome->attempts = attempt + 1;
    // Signed anew on each try: the date is part of the signature.
    SignableRequest signable{call.method, path, call.query, call.headers, payload_sha};
    signable.headers.emplace_back("Host", host);
    if (call.method == "PUT" || call.method == "POST") {
      signable.headers.emplace_back("Content-Length", std::to_string(call.body.size()));
    }
    SignRequest(&signable, settings_.credentials, settings_.region, "s3", std::time(nullptr));
    for (const auto& h : call.unsigned_headers) signable.headers.push_back(h);
    HttpRequest request{call.method, url, std::move(signable.headers), call.body, call.sink, call.sink_capacity,
                        call.stream};

    auto connection = AcquireConnection();
    HttpResponse response;
    TransportError error;
    const bool ok = connection->Perform(request, &response, &error);
    ReleaseConnection(std::move(connection));
    process_requests.fetch_add(1, std::memory_order_relaxed);
    if (call.method == "GET") process_gets.fetch_add(1, std::memory_order_relaxed);
    if (ok) process_bytes_received.fetch_add(response.body.size() + response.sink_size, std::memory_order_relaxed);
    if (!ok) {
      last_error = error.status;
      if (error.maybe_sent) outcome->earlier_attempt_may_have_landed = true;
      never_connected = never_connected && !error.maybe_sent;
      if (!error.retryable) break;
      if (error.stalled && ++stalled >= options_.max_stalled_attempts) break;
      continue;
    }
    const bool conflict =
        call.conditional && response.status == 409 && ParseS3Error(response.body).code == "ConditionalRequestConflict";
    bool transient_in_ok_body = false;
    if (call.error_in_ok_body && response.status == 200) {
      const std::string code = ParseS3Error(response.body).code;
      transient_in_ok_body = code == "InternalError" || code == "SlowDown" || code == "ServiceUnavailable";
    }
    never_connected = false;
    if (IsRetryableStatus(response.status) || conflict || transient_in_ok_body) {
      last_error = Status(StatusCode::kUnavailable, HttpErrorDetail(response));
      if (!conflict) outcome->earlier_attempt_may_have_landed = true;
      continue;
    }
    return response;
  }
  const std::string tries =
      outcome->attempts > 1 ? " (after " + std::to_string(outcome->attempts) + " tries)" : std::string();
  const std::string hint =
      never_connected && last_error.code() == StatusCode::kUnavailable
          ? " (is an S3 server listening at " + settings_.endpoint +
                "? It comes from AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or the profile's endpoint_url)"
          : std::string();
  const std::string tls_hint = last_error.code() == StatusCode::kFailedPrecondition &&
                                       last_error.message().find("TLS certificate") != std::string::npos
                                   ? " (set AWS_CA_BUNDLE to the certificate of the CA that signed it)"
                                   : std::string();
  return Status(last_error.code(), Describe(call) + ": " + last_error.message() + tries + hint + tls_hint);
}

std::string S3Client::HttpErrorDetail(const HttpResponse& response) {
  const S3ErrorBody err = ParseS3Error(response.body);
  std::string detail = "HTTP " + std::to_string(response.status);
  if (!err.code.empty()) detail += " " + err.code;
  if (!err.message.empty()) detail += ": " + err.message;
  return detail;
}

Status S3Client::ErrorFor(const Call& call, const HttpResponse& response) const {
  const S3ErrorBody err = ParseS3Error(response.body);
  const std::string what = Describe(call) + ": " + HttpErrorDetail(response);
  const long s = response.status;
  if (s == 404 || err.code == "NoSuchKey" || err.code == "NoSuchBucket" || err.code == "NoSuchUpload") {
    if (err.code == "NoSuchBucket") {
      return Status::NotFound(what + " (bucket '" + call.bucket + "' does not exist at " + settings_.endpoint +
                              "; create it or check the s3:// URL and AWS_ENDPOINT_URL)");
    }
    return Status::NotFound(what);
  }
  if (s == 401 || s == 403) {
    const std::string source =
        settings_.credentials_source.empty() ? std::string("the configured credentials") : settings_.credentials_source;
    return Status::FailedPrecondition(what + " (the server refused access key id '" +
                                      settings_.credentials.access_key_id + "' from " + source + " for bucket '" +
                                      call.bucket + "': check the credentials, their permissions and AWS_REGION)");
  }
  if (s == 412) return Status::AlreadyExists(what);
  if (s == 416) return Status::InvalidArgument(what + " (the range starts at or past the object's end)");
  if (IsRetryableStatus(s)) return Status::Unavailable(what);
  if (s == 400 || s == 405 || s == 411 || s == 413) return Status::InvalidArgument(what);
  if (s == 409) return Status::FailedPrecondition(what);
  return Status::IOError(what);
}

Status S3Client::CreateBucket(const std::string& bucket) {
  Call call{"CreateBucket", "PUT", bucket, "", {}, {}, {}};
  std::string body;
  if (settings_.region != "us-east-1") {
    body = "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><LocationConstraint>" +
           XmlEscape(settings_.region) + "</LocationConstraint></CreateBucketConfiguration>";
    call.body = body;
  }
  Outcome outcome;
  ASSIGN_OR_RETURN(HttpResponse r, Execute(call, &outcome));
  if (r.status == 200) return Status::OK();
  if (r.status == 409 && ParseS3Error(r.body).code == "BucketAlreadyOwnedByYou") return Status::OK();
  return ErrorFor(call, r);
}

Status S3Client::HeadBucket(const std::string& bucket) {
  Call call{"HeadBucket", "HEAD", bucket, "", {}, {}, {}};
  Outcome outcome;
  ASSIGN_OR_RETURN(HttpResponse r, Execute(call, &outcome));
  if (r.status == 200) return Status::OK();
  if (r.status == 404) {
    return Status::NotFound(Describe(call) + ": HTTP 404 (bucket '" + bucket + "' does not exist at " +
                            settings_.endpoint + "; create it or check the s3:// URL and AWS_ENDPOINT_URL)");
  }
  return ErrorFor(call, r);
}

StatusOr<std::string> S3Client::PutObject(const std::string& bucket, const std::string& key, std::string_view data,
                                          bool if_none_match) {
  return Put(bucket, key, data, if_none_match, nullptr);
}

StatusOr<std::string> S3Client::PutObjectWithCrc32c(const std::string& bucket, const std::string& key,
                                                    std::string_view data, const std::string& crc32c_base64) {
  return Put(bucket, key, data, false, &crc32c_base64);
}

StatusOr<std::string> S3Client::PutObjectWithItsCrc32c(const std::string& bucket, const std::string& key,
                                                       const HttpBody& data, uint32_t data_crc32c) {
  if (!crc32c_payloads()) return Put(bucket, key, data, false, nullptr);
  const std::string crc = Crc32cToBase64(data_crc32c);
  return Put(bucket, key, data, false, &crc);
}

StatusOr<std::string> S3Client::Put(const std::string& bucket, const std::string& key, const HttpBody& data,
                                    bool if_none_match, const std::string* crc32c) {
  Call call{"PutObject", "PUT", bucket, key, {}, {}, data, {}, if_none_match};
  if (crc32c != nullptr) {
    call.headers.emplace_back(kCrc32cHeader, *crc32c);
  } else if (crc32c_payloads()) {
    call.headers.emplace_back(kCrc32cHeader, Crc32cToBase64(BodyCrc32c(data)));
  }
  if (if_none_match) call.unsigned_headers.emplace_back("If-None-Match", "*");
  Outcome outcome;
  ASSIGN_OR_RETURN(HttpResponse r, Execute(call, &outcome));
  if (r.status == 200) return r.headers["etag"];
  if (r.status == 412 && outcome.earlier_attempt_may_have_landed) {
    // Our own earlier try may be what exists now: the same bytes are success.
    auto head = HeadObject(bucket, key);
    if (head.ok() && Unquote(head->etag) == Md5Hex(data)) return head->etag;
  }
  Status st = ErrorFor(call, r);
  if (st.code() == StatusCode::kAlreadyExists) {
    return Status::AlreadyExists(Describe(call) + ": the object already exists (If-None-Match: *)");
  }
  return st;
}

StatusOr<std::string> S3Client::PutObjectIfMatch(const std::string& bucket, const std::string& key,
                                                 std::string_view data, const std::string& etag) {
  Call call{"PutObject", "PUT", bucket, key, {}, {}, data, {}, true};
  call.unsigned_headers.emplace_back("If-Match", etag);
  Outcome outcome;
  ASSIGN_OR_RETURN(HttpResponse r, Execute(call, &outcome));
  if (r.status == 200) return r.headers["etag"];
  if ((r.status == 412 || r.status == 404) && outcome.earlier_attempt_may_have_landed) {
    auto head = HeadObject(bucket, key);
    if (head.ok() && Unquote(head->etag) == Md5Hex(data)) return head->etag;
  }
  if (r.status == 412 || r.status == 404) {
    return Status::Aborted(Describe(call) + ": the object changed since it was read (If-Match: " + etag + ")");
  }
  return ErrorFor(call, r);
}

StatusOr<S3Client::VersionedObject> S3Client::GetObjectVersioned(const std::string& bucket, const std::string& key) {
  Call call{"GetObject", "GET", bucket, key, {}, {}, {}};
  Outcome outcome;
  ASSIGN_OR_RETURN(HttpResponse r, Execute(call, &outcome));
  if (r.status == 200) return VersionedObject{std::move(r.body), r.headers["etag"]};
  return ErrorFor(call, r);
}

StatusOr<std::string> S3Client::GetObject(const std::string& bucket, const std::string& key) {
  Call call{"GetObject", "GET", bucket, key, {}, {}, {}};
  Outcome outcome;
  ASSIGN_OR_RETURN(HttpResponse r, Execute(call, &outcome));
  if (r.status == 200) return std::move(r.body);
  return ErrorFor(call, r);
}

StatusOr<std::string> S3Client::GetObjectRange(const std::string& bucket, const std::string& key, uint64_t offset,
                                               uint64_t length) {
  std::string out(length, '\0');
  ASSIGN_OR_RETURN(size_t got, GetObjectRangeInto(bucket, key, offset, length, out.data()));
  out.resize(got);
  return out;
}

StatusOr<size_t> S3Client::GetObjectRangeInto(const std::string& bucket, const std::string& key, uint64_t offset,
                                              uint64_t length, char* out) {
  return GetRange(bucket, key, offset, length, out, nullptr);
}

StatusOr<size_t> S3Client::GetObjectRangeTo(const std::string& bucket, const std::string& key, uint64_t offset,
                                            uint64_t length, HttpBodyStream* stream) {
  return GetRange(bucket, key, offset, length, nullptr, stream);
}

StatusOr<size_t> S3Client::GetRange(const std::string& bucket, const std::string& key, uint64_t offset,
                                    uint64_t length, char* out, HttpBodyStream* stream) {
  if (length == 0) return size_t{0};
  Call call{"GetObject", "GET", bucket, key, {}, {}, {}};
  call.headers.emplace_back("Range", "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + length - 1));
  call.sink = out;
  call.stream = stream;
  call.sink_capacity = length;
  Outcome outcome;
  ASSIGN_OR_RETURN(HttpResponse r, Execute(call, &outcome));
  if (r.status == 206) return r.sink_size;
  if (r.status == 200) {
    // The whole object came: right only when the range starts at 0 and
    // covers it (a longer object overflowed the buffer and failed above).
    if (offset == 0) return r.sink_size;
    return Status::FailedPrecondition(Describe(call) + ": the server ignored the Range header (HTTP 200, not 206)");
  }
  return ErrorFor(call, r);
}

StatusOr<ObjectInfo> S3Client::HeadObject(const std::string& bucket, const std::string& key) {
  Call call{"HeadObject", "HEAD", bucket, key, {}, {}, {}};
  Outcome outcome;
  ASSIGN_OR_RETURN(HttpResponse r, Execute(call, &outcome));
  if (r.status != 200) {
    if (r.status == 404) return Status::NotFound(Describe(call) + ": HTTP 404 (no such object)");
    return ErrorFor(call, r);
  }
  ObjectInfo info;
  info.key = key;
  info.etag = r.headers["etag"];
  try {
    info.size = std::stoull(r.headers["content-length"]);
  } catch (const std::exception&) {
    return Status::DataLoss(Describe(call) + ": no valid Content-Length in the response");
  }
  return info;
}

Status S3Client::DeleteObject(const std::string& bucket, const std::string& key) {
  Call call{"DeleteObject", "DELETE", bucket, key, {}, {}, {}};
  Outcome outcome;
  ASSIGN_OR_RETURN(HttpResponse r, Execute(call, &outcome));
  if (r.status == 204 || r.status == 200) return Status::OK();
  if (r.status == 404 && ParseS3Error(r.body).code == "NoSuchKey") return Status::OK();
  return ErrorFor(call, r);
}

Status S3Client::DeleteObjects(const std::string& bucket, const std::vector<std::string>& keys) {
  if (keys.empty()) return Status::OK();
  if (keys.size() > 1000) {
    return Status::InvalidArgument("S3 DeleteObjects of s3://" + bucket + ": " + std::to_string(keys.size()) +
                                   " keys in one call; at most 1000");
  }
  // Quiet mode: the answer lists only the keys that failed.
  std::string body = "<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Quiet>true</Quiet>";
  for (const std::string& key : keys) body += "<Object><Key>" + XmlEscape(key) + "</Key></Object>";
  body += "</Delete>";
  // S3 requires a checksum of the body for this call.
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  EVP_Digest(body.data(), body.size(), md, &md_len, EVP_md5(), nullptr);
  unsigned char b64[64];
  const int b64_len = EVP_EncodeBlock(b64, md, static_cast<int>(md_len));
  Call call{"DeleteObjects", "POST", bucket, "", {{"delete", ""}}, {}, body};
  call.headers.emplace_back("Content-MD5", std::string(reinterpret_cast<const char*>(b64), b64_len));
  Outcome outcome;
  ASSIGN_OR_RETURN(HttpResponse r, Execute(call, &outcome));
  if (r.status != 200) return ErrorFor(call, r);
  ASSIGN_OR_RETURN(XmlElement doc, ParseXml(r.body, Describe(call) + " response"));
  if (doc.name == "Error") {
    HttpResponse as_error = r;
    as_error.status = 500;
    return ErrorFor(call, as_error);
  }
  std::vector<const XmlElement*> errors;
  for (const XmlElement& e : doc.children) {
    if (e.name == "Error") errors.push_back(&e);
  }
  if (errors.empty()) return Status::OK();
  const XmlElement& first = *errors.front();
  return Status::IOError(Describe(call) + ": key '" + first.ChildText("Key") +
                         "' was not deleted: " + first.ChildText("Code") + ": " + first.ChildText("Message") +
                         (errors.size() > 1 ? " (and " + std::to_string(errors.size() - 1) + " more keys)" : ""));
}

StatusOr<ListPage> S3Client::ListObjectsV2(const std::string& bucket, const std::string& prefix,
                                           const std::string& continuation_token, int max_keys,
                                           const std::string& delimiter) {
  Call call{"ListObjectsV2", "GET", bucket, "", {{"list-type", "2"}}, {}, {}};
  if (!prefix.empty()) call.query.emplace_back("prefix", prefix);
  if (!continuation_token.empty()) call.query.emplace_back("continuation-token", continuation_token);
  if (!delimiter.empty()) call.query.emplace_back("delimiter", delimiter);
  call.query.emplace_back("max-keys", std::to_string(max_keys));
  Outcome outcome;
  ASSIGN_OR_RETURN(HttpResponse r, Execute(call, &outcome));
  if (r.status != 200) return ErrorFor(call, r);
  const std::string what = Describe(call) + " (prefix '" + prefix + "') response";
  ASSIGN_OR_RETURN(XmlElement doc, ParseXml(r.body, what));
  if (doc.name != "ListBucketResult") {
    return Status::DataLoss(what + " is a <" + doc.name + ">, expected <ListBucketResult>");
  }
  ListPage page;
  for (const XmlElement& e : doc.children) {
    if (e.name == "Contents") {
      ObjectInfo info;
      info.key = e.ChildText("Key");
      info.etag = e.ChildText("ETag");
      try {
        info.size = std::stoull(e.ChildText("Size"));
      } catch (const std::exception&) {
        return Status::DataLoss(what + ": key '" + info.key + "' has no valid <Size>");
      }
      if (!ParseIsoTime(e.ChildText("LastModified"), &info.last_modified_unix_ms)) {
        return Status::DataLoss(what + ": key '" + info.key + "' has no valid <LastModified>");
      }
      page.objects.push_back(std::move(info));
    } else if (e.name == "CommonPrefixes") {
      page.common_prefixes.push_back(e.ChildText("Prefix"));
    }
  }
  page.server_unix_ms = ParseHttpDate(r.headers["date"]);
  page.truncated = doc.ChildText("IsTruncated") == "true";
  page.next_continuation_token = doc.ChildText("NextContinuationToken");
  if (page.truncated && page.next_continuation_token.empty()) {
    return Status::DataLoss(what + " is truncated but has no NextContinuationToken");
  }
  return page;
}

StatusOr<std::vector<ObjectInfo>> S3Client::ListAll(const std::string& bucket, const std::string& prefix) {
  ASSIGN_OR_RETURN(Listing listing, ListAllTimed(bucket, prefix));
  return std::move(listing.objects);
}

StatusOr<Listing> S3Client::ListAllTimed(const std::string& bucket, const std::string& prefix) {
  Listing all;
  std::string token;
  do {
    ASSIGN_OR_RETURN(ListPage page, ListObjectsV2(bucket, prefix, token));
    for (auto& o : page.objects) all.objects.push_back(std::move(o));
    all.server_unix_ms = page.server_unix_ms;
    token = page.truncated ? page.next_continuation_token : std::string();
  } while (!token.empty());
  return all;
}

StatusOr<std::vector<MultipartUploadInfo>> S3Client::ListMultipartUploads(const std::string& bucket,
                                                                          const std::string& prefix) {
  std::vector<MultipartUploadInfo> all;
  std::string key_marker, id_marker;
  while (true) {
    Call call{"ListMultipartUploads", "GET", bucket, "", {{"uploads", ""}}, {}, {}};
    if (!prefix.empty()) call.query.emplace_back("prefix", prefix);
    if (!key_marker.empty()) call.query.emplace_back("key-marker", key_marker);
    if (!id_marker.empty()) call.query.emplace_back("upload-id-marker", id_marker);
    Outcome outcome;
    ASSIGN_OR_RETURN(HttpResponse r, Execute(call, &outcome));
    if (r.status != 200) return ErrorFor(call, r);
    const std::string what = Describe(call) + " (prefix '" + prefix + "') response";
    ASSIGN_OR_RETURN(XmlElement doc, ParseXml(r.body, what));
    if (doc.name != "ListMultipartUploadsResult") {
      return Status::DataLoss(what + " is a <" + doc.name + ">, expected <ListMultipartUploadsResult>");
    }
    for (const XmlElement& e : doc.children) {
      if (e.name != "Upload") continue;
      MultipartUploadInfo u;
      u.key = e.ChildText("Key");
      u.upload_id = e.ChildText("UploadId");
      if (u.key.empty() || u.upload_id.empty() || !ParseIsoTime(e.ChildText("Initiated"), &u.initiated_unix_ms)) {
        return Status::DataLoss(what + ": an <Upload> lacks a Key, an UploadId or a valid Initiated time");
      }
      all.push_back(std::move(u));
    }
    if (doc.ChildText("IsTruncated") != "true") {
      // S3 lists in key order; SeaweedFS did not once (b before a).
      std::sort(all.begin(), all.end(), [](const MultipartUploadInfo& a, const MultipartUploadInfo& b) {
        return std::tie(a.key, a.initiated_unix_ms, a.upload_id) < std::tie(b.key, b.initiated_unix_ms, b.upload_id);
      });
      return all;
    }
    key_marker = doc.ChildText("NextKeyMarker");
    id_marker = doc.ChildText("NextUploadIdMarker");
    if (key_marker.empty()) return Status::DataLoss(what + " is truncated but has no NextKeyMarker");
  }
}

StatusOr<std::string> S3Client::CreateMultipartUpload(const std::string& bucket, const std::string& key) {
  Call call{"CreateMultipartUpload", "POST", bucket, key, {{"uploads", ""}}, {}, {}};
  if (crc32c_payloads()) call.headers.emplace_back("x-amz-checksum-algorithm", "CRC32C");
  Outcome outcome;
  ASSIGN_OR_RETURN(HttpResponse r, Execute(call, &outcome));
  if (r.status != 200) return ErrorFor(call, r);
  ASSIGN_OR_RETURN(XmlElement doc, ParseXml(r.body, Describe(call) + " response"));
  std::string id = doc.ChildText("UploadId");
  if (doc.name != "InitiateMultipartUploadResult" || id.empty()) {
    return Status::DataLoss(Describe(call) + ": the response has no UploadId");
  }
  return id;
}

StatusOr<CompletedPart> S3Client::UploadPart(const std::string& bucket, const std::string& key,
                                             const std::string& upload_id, int part_number, std::string_view data) {
  return Part(bucket, key, upload_id, part_number, data, nullptr);
}

StatusOr<CompletedPart> S3Client::UploadPartWithItsCrc32c(const std::string& bucket, const std::string& key,
                                                          const std::string& upload_id, int part_number,
                                                          const HttpBody& data, uint32_t data_crc32c) {
  if (!crc32c_payloads()) return Part(bucket, key, upload_id, part_number, data, nullptr);
  const std::string crc = Crc32cToBase64(data_crc32c);
  return Part(bucket, key, upload_id, part_number, data, &crc);
}

StatusOr<CompletedPart> S3Client::UploadPartWithCrc32c(const std::string& bucket, const std::string& key,
                                                       const std::string& upload_id, int part_number,
                                                       std::string_view data, const std::string& crc32c_base64) {
  return Part(bucket, key, upload_id, part_number, data, &crc32c_base64);
}

StatusOr<CompletedPart> S3Client::Part(const std::string& bucket, const std::string& key,
                                       const std::string& upload_id, int part_number, const HttpBody& data,
                                       const std::string* crc32c) {
  if (part_number < 1 || part_number > 10000) {
    return Status::InvalidArgument("S3 UploadPart of s3://" + bucket + "/" + key + ": part number " +
                                   std::to_string(part_number) + " is outside 1..10000");
  }
  Call call{"UploadPart", "PUT", bucket, key, {{"partNumber", std::to_string(part_number)}, {"uploadId", upload_id}},
            {},           data};
  CompletedPart part{part_number, "",
                     crc32c != nullptr ? *crc32c : crc32c_payloads() ? Crc32cToBase64(BodyCrc32c(data)) : std::string()};
  if (!part.checksum_crc32c.empty()) call.headers.emplace_back(kCrc32cHeader, part.checksum_crc32c);
  Outcome outcome;
  ASSIGN_OR_RETURN(HttpResponse r, Execute(call, &outcome));
  if (r.status != 200) return ErrorFor(call, r);
  part.etag = r.headers["etag"];
  if (part.etag.empty()) {
    return Status::DataLoss(Describe(call) + ": part " + std::to_string(part_number) + " has no ETag");
  }
  return part;
}

std::string S3Client::MultipartEtag(const std::vector<CompletedPart>& parts) {
  std::string digests;
  for (const CompletedPart& p : parts) {
    const std::string hex = Unquote(p.etag);
    for (size_t i = 0; i + 1 < hex.size(); i += 2) {
      digests.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    }
  }
  return Md5Hex(digests) + "-" + std::to_string(parts.size());
}

StatusOr<std::string> S3Client::CompleteMultipartUpload(const std::string& bucket, const std::string& key,
                                                        const std::string& upload_id,
                                                        const std::vector<CompletedPart>& parts, bool if_none_match) {
  std::string body = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">";
  for (const CompletedPart& p : parts) {
    body += "<Part><PartNumber>" + std::to_string(p.part_number) + "</PartNumber><ETag>" + XmlEscape(p.etag) +
            "</ETag>";
    if (!p.checksum_crc32c.empty()) body += "<ChecksumCRC32C>" + p.checksum_crc32c + "</ChecksumCRC32C>";
    body += "</Part>";
  }
  body += "</CompleteMultipartUpload>";
  Call call{"CompleteMultipartUpload", "POST", bucket, key, {{"uploadId", upload_id}}, {}, body, {}, if_none_match, true};
  if (if_none_match) call.unsigned_headers.emplace_back("If-None-Match", "*");
  Outcome outcome;
  ASSIGN_OR_RETURN(HttpResponse r, Execute(call, &outcome));
  if ((r.status == 412 || r.status == 404) && outcome.earlier_attempt_may_have_landed) {
    // The upload may have been completed by our own earlier try.
    auto head = HeadObject(bucket, key);
    if (head.ok() && Unquote(head->etag) == MultipartEtag(parts)) return head->etag;
  }
  if (r.status != 200) {
    Status st = ErrorFor(call, r);
    if (st.code() == StatusCode::kAlreadyExists) {
      return Status::AlreadyExists(Describe(call) + ": the object already exists (If-None-Match: *)");
    }
    return st;
  }
  // S3 may answer 200 and put the error in the body.
  ASSIGN_OR_RETURN(XmlElement doc, ParseXml(r.body, Describe(call) + " response"));
  if (doc.name == "Error") {
    HttpResponse as_error = r;
    as_error.status = doc.ChildText("Code") == "PreconditionFailed" ? 412 : 500;
    Status st = ErrorFor(call, as_error);
    if (st.code() == StatusCode::kAlreadyExists) {
      return Status::AlreadyExists(Describe(call) + ": the object already exists (If-None-Match: *)");
    }
    return st;
  }
  std::string etag = doc.ChildText("ETag");
  if (etag.empty()) {
    // Some servers leave it out: the object's own ETag is the answer.
    ASSIGN_OR_RETURN(ObjectInfo info, HeadObject(bucket, key));
    etag = info.etag;
  }
  return etag;
}

Status S3Client::AbortMultipartUpload(const std::string& bucket, const std::string& key, const std::string& upload_id) {
  Call call{"AbortMultipartUpload", "DELETE", bucket, key, {{"uploadId", upload_id}}, {}, {}};
  Outcome outcome;
  ASSIGN_OR_RETURN(HttpResponse r, Execute(call, &outcome));
  if (r.status == 204 || r.status == 200) return Status::OK();
  return ErrorFor(call, r);
}

}  // namespace s3
}  // namespace ckptdb
