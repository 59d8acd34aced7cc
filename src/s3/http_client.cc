#include "s3/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <utility>

namespace ckptdb {
namespace s3 {

HttpBody::HttpBody(std::string_view whole) : size_(whole.size()) {
  if (!whole.empty()) pieces_.push_back(whole);
}

HttpBody::HttpBody(std::vector<std::string_view> pieces) : pieces_(std::move(pieces)) {
  pieces_.erase(std::remove_if(pieces_.begin(), pieces_.end(), [](std::string_view p) { return p.empty(); }),
                pieces_.end());
  for (std::string_view p : pieces_) size_ += p.size();
}

namespace {

// curl_global_init is not thread-safe before curl 7.84 and must run once.
void GlobalInitOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// Where curl is in the body: piece `piece`, `in_piece` bytes into it.
struct UploadState {
  const HttpBody* body;
  size_t piece = 0;
  size_t in_piece = 0;
};

// Copies the body's next bytes into curl's buffer (its only copy of them:
// the pieces are read where they lie).
size_t ReadBody(char* buffer, size_t size, size_t nitems, void* userdata) {
  auto* st = static_cast<UploadState*>(userdata);
  const std::vector<std::string_view>& pieces = st->body->pieces();
  size_t room = size * nitems, n = 0;
  while (room > 0 && st->piece < pieces.size()) {
    const std::string_view p = pieces[st->piece];
    const size_t take = std::min(room, p.size() - st->in_piece);
    std::memcpy(buffer + n, p.data() + st->in_piece, take);
    n += take;
    room -= take;
    st->in_piece += take;
    if (st->in_piece == p.size()) {
      ++st->piece;
      st->in_piece = 0;
    }
  }
  return n;
}

// Rewinding lets curl resend the body on a redirect or an auth retry.
int SeekBody(void* userdata, curl_off_t offset, int origin) {
  auto* st = static_cast<UploadState*>(userdata);
  if (origin != SEEK_SET || offset < 0 || static_cast<size_t>(offset) > st->body->size()) return CURL_SEEKFUNC_FAIL;
  size_t rest = static_cast<size_t>(offset);
  st->piece = 0;
  const std::vector<std::string_view>& pieces = st->body->pieces();
  while (st->piece < pieces.size() && rest >= pieces[st->piece].size()) rest -= pieces[st->piece++].size();
  st->in_piece = rest;
  return CURL_SEEKFUNC_OK;
}

struct DownloadState {
  CURL* curl;
  const HttpRequest* request;
  HttpResponse* response;
  bool sink_overflow = false;
  bool stream_stopped = false;
};

size_t WriteBody(char* data, size_t size, size_t nmemb, void* userdata) {
  auto* st = static_cast<DownloadState*>(userdata);
  const size_t n = size * nmemb;
  long status = 0;
  curl_easy_getinfo(st->curl, CURLINFO_RESPONSE_CODE, &status);
  if ((st->request->sink != nullptr || st->request->stream != nullptr) && status >= 200 && status < 300) {
    HttpResponse* r = st->response;
    if (r->sink_size + n > st->request->sink_capacity) {
      st->sink_overflow = true;
      return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
    }
    if (st->request->sink != nullptr) {
      std::memcpy(st->request->sink + r->sink_size, data, n);
    } else if (!st->request->stream->Write(r->sink_size, data, n)) {
      st->stream_stopped = true;
      return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
    }
    r->sink_size += n;
    return n;
  }
  st->response->body.append(data, n);
  return n;
}

size_t WriteHeader(char* data, size_t size, size_t nitems, void* userdata) {
  auto* response = static_cast<HttpResponse*>(userdata);
  const size_t n = size * nitems;
  std::string_view line(data, n);
  if (line.rfind("HTTP/", 0) == 0) {
    response->headers.clear();  // a new response (after 100 Continue)
    return n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return n;
  std::string name(line.substr(0, colon));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' '))
    value.remove_suffix(1);
  response->headers[name] = std::string(value);
  return n;
}

// Aborts a transfer that moved no byte, either way, for `limit_s` seconds.
struct StallWatch {
  long limit_s;
  curl_off_t last_down, last_up;
  std::chrono::steady_clock::time_point last_move;
  bool stalled;
};

// libcurl calls this at least about once a second, also while idle.
int OnProgress(void* userdata, curl_off_t, curl_off_t dlnow, curl_off_t, curl_off_t ulnow) {
  auto* w = static_cast<StallWatch*>(userdata);
  const auto now = std::chrono::steady_clock::now();
  if (dlnow != w->last_down || ulnow != w->last_up) {
    w->last_down = dlnow;
    w->last_up = ulnow;
    w->last_move = now;
    return 0;
  }
  if (now - w->last_move >= std::chrono::seconds(w->limit_s)) {
    w->stalled = true;
    return 1;  // CURLE_ABORTED_BY_CALLBACK
  }
  return 0;
}

// 10000 -> "10", 500 -> "0.5".
std::string SecondsText(long ms) {
  std::string s = std::to_string(ms / 1000);
  if (ms % 1000 != 0) {
    char frac[8];
    std::snprintf(frac, sizeof(frac), ".%03ld", ms % 1000);
    std::string f(frac);
    while (f.back() == '0') f.pop_back();
    s += f;
  }
  return s;
}

}  // namespace

HttpConnection::HttpConnection(HttpOptions options) : options_(std::move(options)) {
  GlobalInitOnce();
  curl_ = curl_easy_init();
}

HttpConnection::~HttpConnection() {
  if (curl_ != nullptr) curl_easy_cleanup(static_cast<CURL*>(curl_));
}

bool HttpConnection::Perform(const HttpRequest& request, HttpResponse* response, TransportError* error) {
  const std::string what = request.method + " " + request.url;
  if (curl_ == nullptr) {
    *error = {Status::Internal("cannot create a libcurl handle for " + what), false, false};
    return false;
  }
  CURL* curl = static_cast<CURL*>(curl_);
  // Reset drops the options, not the connection cache: the next request to
  // the same host reuses the open connection.
  curl_easy_reset(curl);
  *response = HttpResponse();
  UploadState upload{&request.body};
  char error_buffer[CURL_ERROR_SIZE] = {0};

  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, options_.connect_timeout_ms);
  // The stall limit, by the progress callback (libcurl's own low-speed
  // check averages over several seconds, so a burst before a stall delays
  // it by that much).
  StallWatch stall{options_.stall_timeout_s, 0, 0, std::chrono::steady_clock::now(), false};
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &stall);
  if (options_.total_timeout_ms > 0) curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, options_.total_timeout_ms);
  if (!options_.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, options_.ca_file.c_str());
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, options_.receive_buffer_bytes);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, WriteBody);
  DownloadState download{curl, &request, response};
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &download);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, WriteHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, response);

  if (request.method == "GET") {
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  } else if (request.method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (request.method == "PUT") {
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  } else if (request.method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  } else {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }
  if (request.method == "PUT" || request.method == "POST") {
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, ReadBody);
    curl_easy_setopt(curl, CURLOPT_READDATA, &upload);
    curl_easy_setopt(curl, CURLOPT_SEEKFUNCTION, SeekBody);
    curl_easy_setopt(curl, CURLOPT_SEEKDATA, &upload);
  }

  curl_slist* headers = nullptr;
  for (const auto& [name, value] : request.headers) {
    headers = curl_slist_append(headers, (name + ": " + value).c_str());
  }
  // No 100-continue round trip, and no default form Content-Type on POST
  // (it would not be among the signed headers).
  headers = curl_slist_append(headers, "Expect:");
  headers = curl_slist_append(headers, "Content-Type:");
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);

  const CURLcode rc = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  if (rc == CURLE_WRITE_ERROR && download.stream_stopped) {
    *error = {Status::Internal(what + ": the response body's reader stopped it: " + request.stream->Why()), false,
              true};
    return false;
  }
  if (rc == CURLE_WRITE_ERROR && download.sink_overflow) {
    *error = {Status::DataLoss(what + ": the response body is longer than the " +
                               std::to_string(request.sink_capacity) + " bytes asked for"),
              false, true};
    return false;
  }
  if (rc == CURLE_ABORTED_BY_CALLBACK && stall.stalled) {
    double connect_s = 0;
    curl_easy_getinfo(curl, CURLINFO_CONNECT_TIME, &connect_s);
    *error = {Status::Unavailable(what + ": no answer for " + std::to_string(options_.stall_timeout_s) +
                                  " s (the stall limit; CKPTDB_S3_STALL_TIMEOUT sets it)"),
              true, /*maybe_sent=*/connect_s > 0, true};
    return false;
  }
  if (rc != CURLE_OK) {
    std::string detail = error_buffer[0] != '\0' ? std::string(error_buffer) : std::string(curl_easy_strerror(rc));
    switch (rc) {
      case CURLE_COULDNT_RESOLVE_HOST:
      case CURLE_COULDNT_RESOLVE_PROXY:
      case CURLE_COULDNT_CONNECT:
        *error = {Status::Unavailable(what + ": cannot connect: " + detail), true, false};
        break;
      case CURLE_OPERATION_TIMEDOUT: {
        // A connection never made (the request was not sent), or a whole
        // request past total_timeout_ms (it may have been acted on).
        double connect_s = 0;
        curl_easy_getinfo(curl, CURLINFO_CONNECT_TIME, &connect_s);
        if (connect_s <= 0) {
          *error = {Status::Unavailable(what + ": cannot connect: no answer for " +
                                        SecondsText(options_.connect_timeout_ms) + " s (" + detail + ")"),
                    true, false, true};
        } else {
          *error = {Status::Unavailable(what + ": " + detail), true, true, false};
        }
        break;
      }
      case CURLE_SEND_ERROR:
      case CURLE_RECV_ERROR:
      case CURLE_GOT_NOTHING:
      case CURLE_PARTIAL_FILE:
      case CURLE_HTTP2:
      case CURLE_HTTP2_STREAM:
        *error = {Status::Unavailable(what + ": " + detail), true, true};
        break;
      case CURLE_SSL_CONNECT_ERROR:
        // A handshake cut short is usually the network; retry it.
        *error = {Status::Unavailable(what + ": TLS handshake failed: " + detail), true, false};
        break;
      case CURLE_PEER_FAILED_VERIFICATION:
      case CURLE_SSL_CACERT_BADFILE:
      case CURLE_SSL_CERTPROBLEM:
        *error = {Status::FailedPrecondition(what + ": the server's TLS certificate is not trusted: " + detail), false,
                  false};
        break;
      case CURLE_URL_MALFORMAT:
      case CURLE_UNSUPPORTED_PROTOCOL:
        *error = {Status::InvalidArgument(what + ": bad endpoint URL: " + detail), false, false};
        break;
      default:
        *error = {Status::Unavailable(what + ": " + detail), true, true};
    }
    return false;
  }
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response->status);
  return true;
}

}  // namespace s3
}  // namespace ckptdb
