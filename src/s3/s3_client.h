// The S3 operations a bucket store needs, over the SigV4 signer and libcurl:
// objects (put, conditional put, get, ranged get into the caller's memory,
// head, delete, batch delete), listings (ListObjectsV2, paginated) and
// multipart uploads (create, parts, complete, conditional complete, abort,
// list),
// plus CreateBucket and HeadBucket.
//
// Errors name the operation, the object (s3://BUCKET/KEY), the endpoint and
// the HTTP status with S3's error Code and Message; never a secret. Codes:
//   NotFound            no such key, bucket or upload
//   AlreadyExists       a conditional write (If-None-Match: *) lost: the
//                       object exists
//   FailedPrecondition  credentials refused (403: the message says which
//                       key id and where it came from), TLS not trusted
//   InvalidArgument     a request S3 calls malformed (400), a bad range
//   Unavailable         500/502/503/504, 429, connection refused, reset or
//                       stalled, still failing after the retries
//   DataLoss            a response that is not what S3 sends (bad XML)
// Retries: up to max_attempts tries per request with full-jitter exponential
// backoff, for transient failures only. A conditional put whose earlier try
// may have landed (the connection broke after sending, or a 5xx) and whose
// retry gets 412 reads the object back: the same bytes (ETag = MD5) are its
// own success, not AlreadyExists. Multipart completion does the same with
// the multipart ETag (MD5 of the parts' MD5s, "-N"), which S3 and SeaweedFS
// compute alike.
//
// Thread safety: all methods may be called concurrently; each call takes a
// connection (one libcurl handle) from a pool and gives it back, so
// connections are reused across calls and threads.
#ifndef CKPTDB_SRC_S3_S3_CLIENT_H_
#define CKPTDB_SRC_S3_S3_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/status.h"
#include "s3/http_client.h"
#include "s3/s3_config.h"

namespace ckptdb {
namespace s3 {

struct S3ClientOptions {
  HttpOptions http;
  // Tries per request, the first included. Default 5.
  int max_attempts = 5;
  // Of those, tries that may end by the server not answering (the stall or
  // connect limit of HttpOptions): a server that went silent twice in a row
  // is taken as down, so a request against a hung server ends within about
  // max_stalled_attempts x stall_timeout_s. Default 2.
  int max_stalled_attempts = 2;
  // Backoff before retry n is uniform in [0, min(max, initial * 2^n)] ms.
  int initial_backoff_ms = 50;
  int max_backoff_ms = 2000;
  // Hash every body into the signature (x-amz-content-sha256). Turning it
  // off sends UNSIGNED-PAYLOAD: only sensible over https, or with
  // crc32c_payloads.
  bool sign_payload = true;
  // May a store send CRC-32C instead of signing the SHA-256 of its uploads
  // (S3Client::set_crc32c_payloads) where the server is found to check it?
  // CKPTDB_S3_PAYLOAD_CHECKSUM=sha256 says no: every body's SHA-256 is then
  // signed, whatever the server (the default, "auto", says yes).
  bool allow_crc32c_payloads = true;
  // Idle connections kept for reuse.
  size_t max_idle_connections = 64;
};

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
  std::string etag;  // as S3 gives it, quotes included
  // When the server last wrote the object, by the server's clock
  // (ListObjectsV2's LastModified; 0 from HeadObject).
  int64_t last_modified_unix_ms = 0;
};

struct ListPage {
  std::vector<ObjectInfo> objects;
  std::vector<std::string> common_prefixes;  // with a delimiter only
  bool truncated = false;
  std::string next_continuation_token;  // when truncated
  // The server's clock when it answered (its Date header, 1 s resolution;
  // 0 when it sent none): what LastModified times are compared with.
  int64_t server_unix_ms = 0;
};

// Every object under a prefix, with the server's clock at the last page.
struct Listing {
  std::vector<ObjectInfo> objects;
  int64_t server_unix_ms = 0;
};

// A multipart upload not yet completed or aborted.
struct MultipartUploadInfo {
  std::string key;
  std::string upload_id;
  int64_t initiated_unix_ms = 0;  // from S3's <Initiated>
};

struct CompletedPart {
  int part_number = 0;  // 1..10000
  std::string etag;     // UploadPart's result
  // The part's x-amz-checksum-crc32c when it was sent with one (the client's
  // crc32c_payloads), else empty; CompleteMultipartUpload lists it.
  std::string checksum_crc32c;
};

// The limits a client runs with, from the environment where set there:
//   CKPTDB_S3_STALL_TIMEOUT    seconds without a byte moving before a try is
//                              abandoned (HttpOptions::stall_timeout_s; 10)
//   CKPTDB_S3_CONNECT_TIMEOUT  seconds to connect (connect_timeout_ms; 10)
//   AWS_MAX_ATTEMPTS           tries per request, the first included (AWS's
//                              own variable; 5)
//   CKPTDB_S3_PAYLOAD_CHECKSUM auto (default) or sha256
//                              (allow_crc32c_payloads)
// InvalidArgument naming the variable when one is not a positive number.
StatusOr<S3ClientOptions> S3ClientOptionsFromEnvironment();

// What every S3Client of this process sent and received since it started,
// for benchmarks that count what a job asks of the server: requests (every
// try), of them GETs, and the response bytes that came back (bodies, and
// what went into callers' memory).
struct ProcessS3Traffic {
  uint64_t requests = 0;
  uint64_t gets = 0;
  uint64_t bytes_received = 0;
};
ProcessS3Traffic ProcessS3TrafficSoFar();

class S3Client {
 public:
  // InvalidArgument for an endpoint that is not http(s)://host[:port].
  static StatusOr<std::unique_ptr<S3Client>> Create(S3Settings settings, S3ClientOptions options = {});
  ~S3Client();

  const S3Settings& settings() const { return settings_; }

  // Creates the bucket; OK when it already exists and is ours.
  Status CreateBucket(const std::string& bucket);
  // OK when the bucket exists and these credentials may use it; NotFound
  // naming it otherwise (a store's open checks this first).
  Status HeadBucket(const std::string& bucket);

  // Writes the whole object; returns its ETag. With if_none_match, only if
  // no object has that key (AlreadyExists otherwise): a create-once write.
  StatusOr<std::string> PutObject(const std::string& bucket, const std::string& key, std::string_view data,
                                  bool if_none_match = false);

  // PutObject of a body (in pieces or not) whose CRC-32C the caller took
  // as it made it, as UploadPartWithItsCrc32c below.
  StatusOr<std::string> PutObjectWithItsCrc32c(const std::string& bucket, const std::string& key,
                                               const HttpBody& data, uint32_t data_crc32c);

  // PutObject and UploadPart that send `crc32c_base64` as the body's
  // x-amz-checksum-crc32c whatever the body is (with UNSIGNED-PAYLOAD): how
  // a probe learns whether the server checks it (bucket/checksum_probe.h).
  StatusOr<std::string> PutObjectWithCrc32c(const std::string& bucket, const std::string& key, std::string_view data,
                                            const std::string& crc32c_base64);
  StatusOr<CompletedPart> UploadPartWithCrc32c(const std::string& bucket, const std::string& key,
                                               const std::string& upload_id, int part_number, std::string_view data,
                                               const std::string& crc32c_base64);

  // Writes the whole object only if its current ETag is `etag` (If-Match):
  // a compare-and-swap. Aborted when the object changed (or is gone) since
  // that ETag was read; the caller re-reads and decides. A try that may have
  // landed and whose retry gets 412 is read back: our own bytes there are
  // success. Returns the new ETag.
  StatusOr<std::string> PutObjectIfMatch(const std::string& bucket, const std::string& key, std::string_view data,
                                         const std::string& etag);

  StatusOr<std::string> GetObject(const std::string& bucket, const std::string& key);
  // The object and its ETag (quotes included), for a later PutObjectIfMatch.
  struct VersionedObject {
    std::string data;
    std::string etag;
  };
  StatusOr<VersionedObject> GetObjectVersioned(const std::string& bucket, const std::string& key);
  // Bytes [offset, offset + length); fewer when the object ends first.
  // InvalidArgument when offset is at or past the end (S3's 416).
  StatusOr<std::string> GetObjectRange(const std::string& bucket, const std::string& key, uint64_t offset,
                                       uint64_t length);
  // The same range read straight into out[0, length): returns the bytes
  // written (fewer than length when the object ends first). No copy.
  StatusOr<size_t> GetObjectRangeInto(const std::string& bucket, const std::string& key, uint64_t offset,
                                      uint64_t length, char* out);
  // The same range handed to `stream` as it arrives (HttpRequest::stream):
  // for a reader that places the bytes itself. A retried GET hands them over
  // again from the first. Returns the bytes handed over.
  StatusOr<size_t> GetObjectRangeTo(const std::string& bucket, const std::string& key, uint64_t offset,
                                    uint64_t length, HttpBodyStream* stream);
  StatusOr<ObjectInfo> HeadObject(const std::string& bucket, const std::string& key);
  // OK also when there was no such object (S3 semantics).
  Status DeleteObject(const std::string& bucket, const std::string& key);
  // Deletes up to 1000 keys in one request (S3's DeleteObjects; missing keys
  // count as deleted). The first key S3 could not delete fails the call,
  // naming it and how many others failed. InvalidArgument beyond 1000 keys.
  Status DeleteObjects(const std::string& bucket, const std::vector<std::string>& keys);

  // One page of keys under `prefix`, in key order. `continuation_token` is ""
  // for the first page, then the previous page's next_continuation_token.
  StatusOr<ListPage> ListObjectsV2(const std::string& bucket, const std::string& prefix,
                                   const std::string& continuation_token = "", int max_keys = 1000,
                                   const std::string& delimiter = "");
  // Every key under `prefix`, all pages.
  StatusOr<std::vector<ObjectInfo>> ListAll(const std::string& bucket, const std::string& prefix);
  // The same with the server's clock (its Date header) at the last page.
  StatusOr<Listing> ListAllTimed(const std::string& bucket, const std::string& prefix);

  // Returns the upload id. With crc32c_payloads, the upload declares
  // x-amz-checksum-algorithm: CRC32C, and every part must carry its CRC.
  StatusOr<std::string> CreateMultipartUpload(const std::string& bucket, const std::string& key);
  // Returns the part (its ETag, and its CRC-32C when crc32c_payloads).
  // Parts may be uploaded concurrently; every part but the last must be at
  // least 5 MiB on AWS.
  StatusOr<CompletedPart> UploadPart(const std::string& bucket, const std::string& key, const std::string& upload_id,
                                     int part_number, std::string_view data);
  // UploadPart of a body whose CRC-32C the caller took as it made it
  // (data_crc32c == Crc32c(data)): sent with crc32c_payloads as UploadPart
  // would send it, without reading the body again.
  // The body may be in pieces (HttpBody), sent where they lie.
  StatusOr<CompletedPart> UploadPartWithItsCrc32c(const std::string& bucket, const std::string& key,
                                                  const std::string& upload_id, int part_number, const HttpBody& data,
                                                  uint32_t data_crc32c);
  // Makes the object from `parts` (ascending part numbers); returns its ETag.
  // With if_none_match: AlreadyExists when the key exists, and the upload is
  // then still open (abort it).
  StatusOr<std::string> CompleteMultipartUpload(const std::string& bucket, const std::string& key,
                                                const std::string& upload_id, const std::vector<CompletedPart>& parts,
                                                bool if_none_match = false);
  Status AbortMultipartUpload(const std::string& bucket, const std::string& key, const std::string& upload_id);
  // Every multipart upload in progress under `prefix` (ListMultipartUploads,
  // all pages), sorted by key: what a process that died mid-upload left.
  StatusOr<std::vector<MultipartUploadInfo>> ListMultipartUploads(const std::string& bucket, const std::string& prefix);

  // The ETag S3 gives an object assembled from parts with these ETags.
  static std::string MultipartEtag(const std::vector<CompletedPart>& parts);

  const S3ClientOptions& options() const { return options_; }

  // How a body's integrity travels. Off (the default): the body's SHA-256
  // is signed (x-amz-content-sha256), which every S3 server checks. On:
  // UNSIGNED-PAYLOAD with the body's CRC-32C in x-amz-checksum-crc32c (a
  // signed header), for PutObject, UploadPart and multipart uploads created
  // while on: about 1/10 of the CPU per byte (the SHA-256 alone was ~25% of
  // a save's client CPU), and as strict where the server checks the CRC,
  // which older servers do not (they ignore the header): turn it on only
  // for a server that rejected a wrong CRC (bucket/checksum_probe.h).
  // Set before the uploads it is meant for; may be read concurrently.
  void set_crc32c_payloads(bool on) { crc32c_payloads_.store(on, std::memory_order_relaxed); }
  bool crc32c_payloads() const { return crc32c_payloads_.load(std::memory_order_relaxed); }

 private:
  struct Call;
  struct Outcome;
  S3Client(S3Settings settings, S3ClientOptions options, std::string scheme, std::string host_port);
  // crc32c: the x-amz-checksum-crc32c to send; null: the body's own when
  // crc32c_payloads, none otherwise.
  StatusOr<std::string> Put(const std::string& bucket, const std::string& key, const HttpBody& data,
                            bool if_none_match, const std::string* crc32c);
  StatusOr<CompletedPart> Part(const std::string& bucket, const std::string& key, const std::string& upload_id,
                               int part_number, const HttpBody& data, const std::string* crc32c);
  // Sends the call with retries; returns the final HTTP response (any
  // status but the retried ones) or the transport/5xx failure as Status.
  StatusOr<HttpResponse> Execute(const Call& call, Outcome* outcome);
  // GetObjectRangeInto (out) or GetObjectRangeTo (stream).
  StatusOr<size_t> GetRange(const std::string& bucket, const std::string& key, uint64_t offset, uint64_t length,
                            char* out, HttpBodyStream* stream);
  Status ErrorFor(const Call& call, const HttpResponse& response) const;
  // "HTTP 503 SlowDown: Please reduce your request rate."
  static std::string HttpErrorDetail(const HttpResponse& response);
  std::string Describe(const Call& call) const;
  std::unique_ptr<HttpConnection> AcquireConnection();
  void ReleaseConnection(std::unique_ptr<HttpConnection> connection);

  S3Settings settings_;
  S3ClientOptions options_;
  std::string scheme_;     // "http" or "https"
  std::string host_port_;  // "127.0.0.1:8333"
  std::atomic<bool> crc32c_payloads_{false};
  std::mutex mu_;
  std::vector<std::unique_ptr<HttpConnection>> idle_;  // guarded by mu_
};

}  // namespace s3
}  // namespace ckptdb

#endif  // CKPTDB_SRC_S3_S3_CLIENT_H_
