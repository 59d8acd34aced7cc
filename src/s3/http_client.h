// One HTTP connection's worth of libcurl: an easy handle reused request after
// request (so the TCP/TLS connection is kept alive between them), TLS checked
// against the system's CAs, connect and stall timeouts. Transport failures
// become a Status naming the method and the URL; HTTP statuses are returned
// to the caller, who knows what they mean.
//
// Thread safety: one HttpConnection per thread at a time (S3Client keeps a
// pool); distinct connections may be used concurrently.
#ifndef CKPTDB_SRC_S3_HTTP_CLIENT_H_
#define CKPTDB_SRC_S3_HTTP_CLIENT_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckptdb/status.h"

namespace ckptdb {
namespace s3 {

struct HttpOptions {
  // Connecting (TCP and TLS) gives up after this long. Default 10 s.
  long connect_timeout_ms = 10000;
  // The stall limit: a request that moves no byte, in either direction, for
  // this many seconds is abandoned (a hung server whose socket stays open, a
  // partitioned network, a load balancer that holds the connection and says
  // nothing). It bounds waiting for the answer's first byte as well as a
  // body that stops mid-way, sent or received. Default 10 s: a real object
  // store under load may take a second or two for a first byte, not 10;
  // a failing request then ends in about 2 x 10 s (max_stalled_attempts),
  // within a job's default 60 s collective timeout.
  long stall_timeout_s = 10;
  // An upper bound on a whole request; 0 = none (large parts take long).
  long total_timeout_ms = 0;
  // A CA bundle instead of the system's (tests with a private CA).
  std::string ca_file;
  // libcurl's receive buffer per connection (its default is 16 KiB): a
  // response is read from the socket this much per call. 512 KiB cut a
  // 512 MiB bucket load's client CPU by about a tenth (fewer recv and poll
  // calls); the memory is per pooled connection.
  long receive_buffer_bytes = 512 << 10;
};

// Takes a response body piece by piece as it arrives (HttpRequest::stream).
class HttpBodyStream {
 public:
  virtual ~HttpBodyStream() = default;
  // Bytes [at, at + n) of the body: `at` counts the bytes this response
  // handed over before, so a retried request starts again at 0. False stops
  // the transfer: the request fails (not retried), naming the stream's
  // Why().
  virtual bool Write(uint64_t at, const char* data, size_t n) = 0;
  virtual std::string Why() const = 0;
};

// A request body: one span of memory, or several sent one after another
// without being joined first (an upload part whose blocks stay where they
// were built, some of them in the caller's own memory). It refers to the
// bytes, which must outlive every request that sends it.
class HttpBody {
 public:
  HttpBody() = default;
  HttpBody(std::string_view whole);  // NOLINT: a span is a body
  HttpBody(const std::string& whole) : HttpBody(std::string_view(whole)) {}  // NOLINT
  HttpBody(const char* whole) : HttpBody(std::string_view(whole)) {}         // NOLINT
  // The pieces in order (empty ones are dropped).
  explicit HttpBody(std::vector<std::string_view> pieces);

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const std::vector<std::string_view>& pieces() const { return pieces_; }

 private:
  std::vector<std::string_view> pieces_;
  size_t size_ = 0;
};

struct HttpRequest {
  std::string method;  // GET HEAD PUT POST DELETE
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  HttpBody body;  // sent for PUT and POST; its bytes must outlive Perform
  // Where a successful (2xx) response body goes instead of
  // HttpResponse::body: up to sink_capacity bytes (a body longer than that
  // fails the transfer). Error bodies still go to HttpResponse::body.
  char* sink = nullptr;
  size_t sink_capacity = 0;
  // Instead of sink (when sink is null): a successful body goes to the
  // stream, up to sink_capacity bytes (the same rule).
  HttpBodyStream* stream = nullptr;
};

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  size_t sink_size = 0;  // bytes written into HttpRequest::sink (or its stream)
};

// Why a request failed before an HTTP status came back.
struct TransportError {
  Status status;  // Unavailable (retryable), or FailedPrecondition (TLS, bad URL)
  bool retryable = false;
  // False only when the request surely never reached the server (no
  // connection was made): a write that failed with `sent` may have happened.
  bool maybe_sent = true;
  // The server stopped answering: no byte moved for stall_timeout_s, or no
  // connection within connect_timeout_ms.
  bool stalled = false;
};

class HttpConnection {
 public:
  explicit HttpConnection(HttpOptions options);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Performs the request. On a transport failure returns false and fills
  // *error; otherwise fills *response (any HTTP status) and returns true.
  bool Perform(const HttpRequest& request, HttpResponse* response, TransportError* error);

 private:
  HttpOptions options_;
  void* curl_;  // CURL*
};

}  // namespace s3
}  // namespace ckptdb

#endif  // CKPTDB_SRC_S3_HTTP_CLIENT_H_
