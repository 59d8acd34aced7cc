#include "s3_fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <thread>
#include <cstring>

namespace ckptdb {
namespace testing {

namespace {

bool WriteAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Closes with a TCP reset (SO_LINGER 0): the client sees a broken connection.
void Reset(int fd) {
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  close(fd);
}

// Reads a request's head, up to and with the blank line, into *data (which
// may then hold the first body bytes too). False when the client closed first.
bool ReadHead(int fd, std::string* data, size_t* head_end) {
  char buf[65536];
  while ((*head_end = data->find("\r\n\r\n")) == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    data->append(buf, static_cast<size_t>(n));
  }
  return true;
}

// Reads the rest of the request: Content-Length bytes of body after the head.
bool ReadBody(int fd, std::string* data, size_t head_end) {
  std::string lower = data->substr(0, head_end);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t length = 0;
  const size_t cl = lower.find("\r\ncontent-length:");
  if (cl != std::string::npos) length = std::stoul(lower.substr(cl + 17));
  char buf[65536];
  while (data->size() < head_end + 4 + length) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    data->append(buf, static_cast<size_t>(n));
  }
  return true;
}

// Removes the header lines named `name` (lower case, with the colon) from
// the head of `request`.
void RemoveHeader(std::string* request, const std::string& name) {
  size_t line = request->find("\r\n") + 2;
  while (true) {
    const size_t end = request->find("\r\n", line);
    if (end == std::string::npos || end == line) return;  // the blank line: the head is over
    std::string start = request->substr(line, name.size());
    for (char& c : start) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (start == name) {
      request->erase(line, end + 2 - line);
    } else {
      line = end + 2;
    }
  }
}

std::string CannedError(int status, const char* reason, const char* code) {
  const std::string body = std::string("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>") + code +
                           "</Code><Message>injected by the test proxy</Message></Error>";
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Type: application/xml\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

}  // namespace

S3FaultProxy::S3FaultProxy(int upstream_port) : upstream_port_(upstream_port) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  listen(listen_fd_, 64);
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

S3FaultProxy::~S3FaultProxy() {
  stopping_ = true;
  shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  close(listen_fd_);
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers.swap(workers_);
  }
  for (auto& w : workers) w.join();
}

void S3FaultProxy::Script(std::vector<Action> actions) {
  std::lock_guard<std::mutex> lock(mu_);
  script_.assign(actions.begin(), actions.end());
}

S3FaultProxy::Action S3FaultProxy::Next() {
  std::lock_guard<std::mutex> lock(mu_);
  if (script_.empty()) return Action::kPass;
  Action a = script_.front();
  script_.pop_front();
  return a;
}

void S3FaultProxy::AcceptLoop() {
  while (!stopping_) {
    const int client = accept(listen_fd_, nullptr, nullptr);
    if (client < 0) {
      if (stopping_) return;
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    workers_.emplace_back([this, client] { Serve(client); });
  }
}

void S3FaultProxy::HoldUntilGone() {
  ++held_;
  while (!stopping_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

void S3FaultProxy::Serve(int client) {
  std::string request;
  size_t head_end = 0;
  if (!ReadHead(client, &request, &head_end)) {
    close(client);
    return;
  }
  ++requests_;
  // Requests being served at once (until this one is answered or dropped).
  struct InFlight {
    explicit InFlight(S3FaultProxy* p) : proxy(p) {
      const int now = ++proxy->in_flight_;
      int most = proxy->most_in_flight_.load();
      while (now > most && !proxy->most_in_flight_.compare_exchange_weak(most, now)) {
      }
    }
    ~InFlight() { --proxy->in_flight_; }
    S3FaultProxy* proxy;
  } in_flight(this);
  std::string fail_containing, corrupt_containing;
  {
    std::lock_guard<std::mutex> lock(mu_);
    request_lines_.push_back(request.substr(0, request.find("\r\n")));
    fail_containing = fail_containing_;
    corrupt_containing = corrupt_containing_;
  }
  if (!fail_containing.empty() && request.substr(0, request.find("\r\n")).find(fail_containing) != std::string::npos) {
    if (ReadBody(client, &request, head_end)) WriteAll(client, CannedError(503, "Service Unavailable", "SlowDown"));
    close(client);
    return;
  }
  const Action action = Next();
  if (action == Action::kStopReadingUpload) {
    // The body stays unread: the client's sends fill the socket buffers and
    // block, as with a server that stopped mid-upload.
    HoldUntilGone();
    Reset(client);
    return;
  }
  if (!ReadBody(client, &request, head_end)) {
    close(client);
    return;
  }
  if (!corrupt_containing.empty() && request.size() > head_end + 4 &&
      request.substr(0, request.find("\r\n")).find(corrupt_containing) != std::string::npos) {
    request.back() = static_cast<char>(request.back() ^ 0x01);
  }
  if (strip_conditional_.load()) {
    RemoveHeader(&request, "if-none-match:");
    RemoveHeader(&request, "if-match:");
  }
  switch (action) {
    case Action::kServiceUnavailable:
      WriteAll(client, CannedError(503, "Service Unavailable", "SlowDown"));
      close(client);
      return;
    case Action::kInternalError:
      WriteAll(client, CannedError(500, "Internal Server Error", "InternalError"));
      close(client);
      return;
    case Action::kOkWithInternalError:
      WriteAll(client, CannedError(200, "OK", "InternalError"));
      close(client);
      return;
    case Action::kAcceptUnseen:
      WriteAll(client,
               "HTTP/1.1 200 OK\r\nETag: \"00000000000000000000000000000000\"\r\nConnection: close\r\n"
               "Content-Length: 0\r\n\r\n");
      close(client);
      return;
    case Action::kResetBeforeSending:
      Reset(client);
      return;
    case Action::kHoldBeforeSending:
      HoldUntilGone();
      Reset(client);
      return;
    case Action::kPass:
    case Action::kLoseResponse:
    case Action::kHoldAfterForwarding:
    case Action::kStallMidBody:
    case Action::kAnswerLate:
    case Action::kStopReadingUpload:
      break;
  }
  // One request per upstream connection; the response ends when it closes.
  const size_t first_line_end = request.find("\r\n");
  request.insert(first_line_end + 2, "Connection: close\r\n");
  const int upstream = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(upstream_port_));
  std::string response;
  if (connect(upstream, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && WriteAll(upstream, request)) {
    ++forwarded_;
    char buf[65536];
    ssize_t n;
    while ((n = recv(upstream, buf, sizeof(buf), 0)) > 0) response.append(buf, static_cast<size_t>(n));
  }
  close(upstream);
  if (action == Action::kHoldAfterForwarding) HoldUntilGone();
  if (action == Action::kStallMidBody) {
    // The head and half of the body, then silence.
    const size_t body_start = response.find("\r\n\r\n");
    const size_t cut = body_start == std::string::npos ? response.size() / 2
                                                       : body_start + 4 + (response.size() - body_start - 4) / 2;
    WriteAll(client, response.substr(0, cut));
    HoldUntilGone();
    Reset(client);
    return;
  }
  if (action == Action::kAnswerLate) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(late_answer_ms_.load());
    while (!stopping_.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (action == Action::kLoseResponse || action == Action::kHoldAfterForwarding || response.empty()) {
    Reset(client);
    return;
  }
  WriteAll(client, response);
  close(client);
}

}  // namespace testing
}  // namespace ckptdb
