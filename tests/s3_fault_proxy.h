// A fault-injecting HTTP proxy for the S3 client's tests: it sits between
// the client and the real server on 127.0.0.1 and makes the faults a real
// server cannot be told to make. Each request takes the next scripted
// action (kPass once the script is used up). One request per connection:
// the proxy adds "Connection: close" upstream and closes after answering,
// so it never has to frame responses.
//
// Thread safety: Script and counters may be called while requests flow.
#ifndef CKPTDB_TESTS_S3_FAULT_PROXY_H_
#define CKPTDB_TESTS_S3_FAULT_PROXY_H_

#include <atomic>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ckptdb {
namespace testing {

class S3FaultProxy {
 public:
  enum class Action {
    kPass,                 // forward, relay the answer
    kServiceUnavailable,   // answer 503 SlowDown without forwarding
    kInternalError,        // answer 500 InternalError without forwarding
    kOkWithInternalError,  // answer 200 with an InternalError body, as S3 may for CompleteMultipartUpload
    kResetBeforeSending,   // reset the connection without forwarding
    kLoseResponse,         // forward (the server acts on it), then reset instead of answering
    kHoldBeforeSending,    // keep the request, answer nothing, until the proxy goes
    kHoldAfterForwarding,  // forward (the server acts on it), answer nothing, until the proxy goes
    kStallMidBody,         // forward, relay the head and half the body, then nothing until the proxy goes
    kStopReadingUpload,    // read the request's head, then stop reading its body; answer nothing
    kAnswerLate,           // forward, then relay the answer only after late_answer_ms
    kAcceptUnseen,         // answer 200 with an ETag without forwarding: a server that took
                           // whatever came (a wrong checksum, say) without looking
  };

  // Forwards to `upstream_port` on 127.0.0.1.
  explicit S3FaultProxy(int upstream_port);
  ~S3FaultProxy();

  // "http://127.0.0.1:PORT": the endpoint to give the client.
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // The actions of the next requests, in order.
  void Script(std::vector<Action> actions);
  // How long kAnswerLate holds an answer.
  void set_late_answer_ms(int ms) { late_answer_ms_ = ms; }
  // Forward requests without their If-None-Match and If-Match headers: a
  // server that ignores conditional writes (the client does not sign them).
  void set_strip_conditional_headers(bool strip) { strip_conditional_ = strip; }
  // Answer 503 SlowDown, without forwarding, to every request whose request
  // line (method, path, query) contains `part` ("" ends it); scripts aside.
  void set_fail_requests_containing(const std::string& part) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_containing_ = part;
  }
  // Forward every request whose request line contains `part` ("" ends it)
  // with the last byte of its body flipped: damage on the way that only a
  // checksum of the body can catch.
  void set_corrupt_bodies_containing(const std::string& part) {
    std::lock_guard<std::mutex> lock(mu_);
    corrupt_containing_ = part;
  }
  int requests() const { return requests_.load(); }
  // The most requests that were being served at once, so far.
  int most_in_flight() const { return most_in_flight_.load(); }
  // How many requests so far had a request line (method, path, query)
  // containing `part`.
  int requests_containing(const std::string& part) {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const std::string& line : request_lines_) n += line.find(part) != std::string::npos ? 1 : 0;
    return n;
  }
  int forwarded() const { return forwarded_.load(); }
  // Requests held (kHold...) so far: counted once the action took effect
  // (after the server's answer, for kHoldAfterForwarding).
  int held() const { return held_.load(); }

 private:
  void AcceptLoop();
  void Serve(int client);
  Action Next();
  void HoldUntilGone();

  int upstream_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> requests_{0};
  std::atomic<int> in_flight_{0};
  std::atomic<int> most_in_flight_{0};
  std::atomic<int> forwarded_{0};
  std::atomic<int> held_{0};
  std::atomic<int> late_answer_ms_{0};
  std::atomic<bool> strip_conditional_{false};
  std::mutex mu_;
  std::deque<Action> script_;         // guarded by mu_
  std::string fail_containing_;       // guarded by mu_
  std::string corrupt_containing_;    // guarded by mu_
  std::vector<std::thread> workers_;  // guarded by mu_
  std::vector<std::string> request_lines_;  // of every request, in order; guarded by mu_
  std::thread acceptor_;
};

}  // namespace testing
}  // namespace ckptdb

#endif  // CKPTDB_TESTS_S3_FAULT_PROXY_H_
