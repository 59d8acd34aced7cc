// The gloo-over-TCP Communicator. Only small control messages travel here.
// Variable-size messages go as a fixed-size message (or round) holding each
// length and up to 1 KiB of the message, and a second one only for what is
// longer; every call is bounded by the configured timeout, and gloo's
// exceptions become Status at this edge. Rooted calls (Broadcast, Gather,
// Scatter) are point-to-point messages between the root and each rank
// (gloo's unbound buffers), so that a rank other than the root moves O(1)
// bytes and a lost rank fails only its own exchange with the root;
// AllGather and Barrier are gloo's collectives.
#include <gloo/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <map>
#include <functional>
#include <mutex>
#include <thread>
#include <system_error>
#include <vector>

#include "ckptdb/distributed.h"
#include "comm/bind_address.h"
#include "comm/descriptor_limit.h"
#include "comm/rendezvous.h"
#include "comm/rendezvous_store.h"
#include "format/status_codec.h"
#include "util/le_bytes.h"
#include "util/thread_fanout.h"
#include "util/status_macros.h"

namespace ckptdb {

namespace {

using Clock = std::chrono::steady_clock;

Status FromException(const std::exception& e, const std::string& what) {
  std::string m = what + ": " + e.what();
  if (m.find("imed out") != std::string::npos || m.find("imeout") != std::string::npos) {
    return Status::DeadlineExceeded(m);
  }
  return Status::Unavailable(m);
}

// Connections are made on up to kConnectThreads threads at once
// (util/thread_fanout.h: fewer where no more can be started), so that
// connecting takes one timeout, not one per peer in turn, without a thread
// per peer: rank 0 of thousands of ranks would start thousands at once.
constexpr size_t kConnectThreads = 64;
void ConnectEach(const std::vector<int>& peers, const std::function<void(int)>& connect) {
  ThreadFanout fanout(peers.size(), kConnectThreads, [&](size_t i) { connect(peers[i]); });
  fanout.Join();
}

// A gloo context over pairs that ConnectGloo connected itself.
class MeshContext final : public gloo::Context {
 public:
  MeshContext(int my_rank, int world_size) : gloo::Context(my_rank, world_size) {}
  void Adopt(std::shared_ptr<gloo::transport::Device> device, std::shared_ptr<gloo::transport::Context> pairs) {
    device_ = std::move(device);
    transportContext_ = std::move(pairs);
  }
};

// Waits on gloo's unbound buffers until a deadline without gloo's own
// timeout: an expired gloo wait closes every pair of the context, so that
// the root of a gather that timed out on one rank could tell no other rank.
// A thread aborts the wait in progress at the deadline; after it, each wait
// still gets kGrace, so that a message that came before the deadline but is
// waited for after it (behind a rank that hung) still counts.
class Waiter {
 public:
  explicit Waiter(Clock::time_point deadline) : deadline_(deadline), thread_([this] { Run(); }) {}
  ~Waiter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;

  // True when b's receive (send) completed; false when it was aborted.
  // Throws what gloo throws (a broken pair). A buffer is waited for once.
  bool Wait(gloo::transport::UnboundBuffer* b, bool recv) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      current_ = b;
      recv_ = recv;
      since_ = Clock::now();
    }
    cv_.notify_all();
    bool done = false;
    try {
      done = recv ? b->waitRecv(nullptr, kForever) : b->waitSend(nullptr, kForever);
    } catch (...) {
      Clear();
      throw;
    }
    Clear();
    return done;
  }

 private:
  static constexpr std::chrono::milliseconds kForever{std::chrono::hours(24 * 365)};
  static constexpr std::chrono::milliseconds kGrace{2};

  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = nullptr;
  }

  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      const auto now = Clock::now();
      if (now < deadline_) {
        cv_.wait_until(lock, deadline_);
      } else if (current_ != nullptr && now - since_ >= kGrace) {
        if (recv_) {
          current_->abortWaitRecv();
        } else {
          current_->abortWaitSend();
        }
        current_ = nullptr;
      } else {
        cv_.wait_for(lock, std::chrono::milliseconds(1));
      }
    }
  }

  const Clock::time_point deadline_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  gloo::transport::UnboundBuffer* current_ = nullptr;  // the wait in progress
  bool recv_ = true;
  Clock::time_point since_;
  std::thread thread_;  // (last: it starts once the rest is made)
};

class GlooCommunicator final : public Communicator {
 public:
  // `pairs`: this rank's transport context, whose pairs with `connected`
  // are connected (a star around rank 0); more connect on demand.
  GlooCommunicator(std::shared_ptr<gloo::transport::Device> device, std::shared_ptr<gloo::Context> ctx,
                   std::shared_ptr<gloo::transport::Context> pairs, std::chrono::milliseconds timeout,
                   const std::vector<int>& connected)
      : device_(std::move(device)), ctx_(std::move(ctx)), pairs_(std::move(pairs)), timeout_(timeout),
        send_seq_(ctx_->size, 0), recv_seq_(ctx_->size, 0), peer_failed_(ctx_->size), lost_(ctx_->size),
        connected_(ctx_->size, 0), star_(ctx_->size, 0), unreachable_(ctx_->size) {
    for (int p : connected) connected_[p] = 1;
    connected_count_ = static_cast<int>(connected.size());
    star_[0] = 1;
  }

  int rank() const override { return ctx_->rank; }
  int world_size() const override { return ctx_->size; }
  CollectiveStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    CollectiveStats s = stats_;
    s.peers = static_cast<uint64_t>(connected_count_.load());  // connections made so far
    return s;
  }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  // Point to point through gloo's unbound buffers: the slot of a message is
  // its sequence number in its direction between the two ranks (under a
  // prefix no collective uses), so that sender and receiver agree on it
  // without a word.
  Status Send(int peer, const void* data, size_t n) override {
    RETURN_IF_ERROR(CheckPeer(peer));
    RETURN_IF_ERROR(PeerReady(peer));
    if (n == 0) return Status::OK();
    return Timed(("send to rank " + std::to_string(peer)).c_str(), n, peer, [&] {
      auto buf = ctx_->createUnboundBuffer(const_cast<void*>(data), n);
      buf->send(peer, gloo::Slot::build(kPointToPointPrefix, send_seq_[peer]++));
      buf->waitSend(timeout_);
    });
  }

  Status Recv(int peer, void* data, size_t n) override {
    RETURN_IF_ERROR(CheckPeer(peer));
    RETURN_IF_ERROR(PeerReady(peer));
    if (n == 0) return Status::OK();
    return Timed(("receive from rank " + std::to_string(peer)).c_str(), 0, peer, [&] {
      auto buf = ctx_->createUnboundBuffer(data, n);
      buf->recv(peer, gloo::Slot::build(kPointToPointPrefix, recv_seq_[peer]++));
      buf->waitRecv(timeout_);
    });
  }

  // Every part's buffer is posted before the first is waited for: gloo
  // moves a message only once its receive is posted, so parts posted
  // together travel back to back instead of a round trip apart.
  Status SendParts(int peer, const std::vector<Part>& parts) override {
    RETURN_IF_ERROR(CheckPeer(peer));
    RETURN_IF_ERROR(PeerReady(peer));
    size_t total = 0;
    for (const Part& p : parts) total += p.n;
    return Timed(("send to rank " + std::to_string(peer)).c_str(), total, peer, [&] {
      std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> bufs;
      bufs.reserve(parts.size());
      for (const Part& p : parts) {
        if (p.n == 0) continue;
        bufs.push_back(ctx_->createUnboundBuffer(const_cast<void*>(p.data), p.n));
        bufs.back()->send(peer, gloo::Slot::build(kPointToPointPrefix, send_seq_[peer]++));
      }
      for (auto& b : bufs) b->waitSend(timeout_);
    });
  }

  Status RecvParts(int peer, const std::vector<MutablePart>& parts) override {
    RETURN_IF_ERROR(CheckPeer(peer));
    RETURN_IF_ERROR(PeerReady(peer));
    return Timed(("receive from rank " + std::to_string(peer)).c_str(), 0, peer, [&] {
      std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> bufs;
      bufs.reserve(parts.size());
      for (const MutablePart& p : parts) {
        if (p.n == 0) continue;
        bufs.push_back(ctx_->createUnboundBuffer(p.data, p.n));
        bufs.back()->recv(peer, gloo::Slot::build(kPointToPointPrefix, recv_seq_[peer]++));
      }
      for (auto& b : bufs) b->waitRecv(timeout_);
    });
  }

  // Rooted calls: messages between the root and each other rank only (see
  // Outgoing); a rank lost to the root is skipped by it from then on.
  Status Broadcast(std::string* data, int root) override {
    RETURN_IF_ERROR(CheckRoot(root, "broadcast"));
    RETURN_IF_ERROR(EnsureStar(root));
    const uint32_t seq = rooted_seq_++;
    if (ctx_->rank == root) {
      return RootSends("broadcast", seq, [&](int) -> const std::string& { return *data; });
    }
    return ReceiveFromRoot("broadcast", root, seq, data);
  }

  Status Scatter(const std::vector<std::string>& parts, int root, std::string* mine) override {
    RETURN_IF_ERROR(CheckRoot(root, "scatter"));
    RETURN_IF_ERROR(EnsureStar(root));
    const uint32_t seq = rooted_seq_++;
    if (ctx_->rank == root) {
      if (parts.size() != static_cast<size_t>(ctx_->size)) {
        return Status::InvalidArgument("scatter: " + std::to_string(parts.size()) + " parts for " +
                                       std::to_string(ctx_->size) + " ranks");
      }
      *mine = parts[root];
      return RootSends("scatter", seq, [&](int p) -> const std::string& { return parts[p]; });
    }
    return ReceiveFromRoot("scatter", root, seq, mine);
  }

  Status Gather(const std::string& mine, int root, std::vector<std::string>* out,
                std::map<int, Status>* missing) override {
    RETURN_IF_ERROR(CheckRoot(root, "gather"));
    RETURN_IF_ERROR(EnsureStar(root));
    const uint32_t seq = rooted_seq_++;
    out->clear();
    if (missing) missing->clear();
    if (ctx_->rank != root) {
      const std::string what = "gather on rank " + std::to_string(ctx_->rank) + ": sending to the root, rank " +
                               std::to_string(root);
      RETURN_IF_ERROR(PeerReady(root));
      return Timed(what.c_str(), mine.size(), [&] {
        Outgoing m(mine);
        auto head = ctx_->createUnboundBuffer(m.head.data(), m.head.size());
        head->send(root, RootedSlot(seq, 0));
        std::unique_ptr<gloo::transport::UnboundBuffer> rest;
        if (m.rest_n > 0) {
          rest = ctx_->createUnboundBuffer(const_cast<char*>(m.rest), m.rest_n);
          rest->send(root, RootedSlot(seq, 1));
        }
        head->waitSend(timeout_);
        if (rest) rest->waitSend(timeout_);
        Count(1 + (m.rest_n > 0), 0, 0);
      });
    }
    if (missing == nullptr) return Status::InvalidArgument("gather: the root needs `missing`");
    RETURN_IF_ERROR(FailedEarlier("gather"));
    const auto t0 = Clock::now();
    const auto deadline = t0 + timeout_;
    LoseUnconnected(missing);
    out->assign(ctx_->size, std::string());
    (*out)[root] = mine;
    // Every head is posted before any is waited for; then the rests (the
    // rests get a timeout of their own: they follow their heads at once),
    // each received in place after its head's bytes (a coordinator gathers
    // a report per piece of the step: a copy would hold it twice).
    std::vector<std::string> heads(ctx_->size);
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> bufs(ctx_->size);
    for (int p = 0; p < ctx_->size; ++p) {
      if (p == root) continue;
      if (Status lost = LostPeer(p); !lost.ok()) {
        (*missing)[p] = lost;
        continue;
      }
      heads[p].assign(kHead, '\0');
      Post(p, "gather", missing, [&] {
        bufs[p] = ctx_->createUnboundBuffer(heads[p].data(), kHead);
        bufs[p]->recv(p, RootedSlot(seq, 0));
      });
    }
    {
      Waiter waiter(deadline);
      for (int p = 0; p < ctx_->size; ++p) {
        // (A peer lost while posting is not waited for: its receive may not
        // be posted. RootSends skips such peers alike.)
        if (!bufs[p] || !LostPeer(p).ok() || !WaitFor(waiter, p, "gather", true, &bufs[p], missing)) continue;
        const uint64_t n = GetLE64(heads[p].data());
        (*out)[p].assign(heads[p].data() + 8, std::min<uint64_t>(n, kInline));
        Count(0, kHead, 1);
        bufs[p].reset();
        if (n > kInline) {
          (*out)[p].resize(n);
          Post(p, "gather", missing, [&] {
            bufs[p] = ctx_->createUnboundBuffer((*out)[p].data() + kInline, n - kInline);
            bufs[p]->recv(p, RootedSlot(seq, 1));
          });
        }
      }
    }
    Waiter waiter(Clock::now() + timeout_);
    for (int p = 0; p < ctx_->size; ++p) {
      if (!bufs[p]) continue;
      if (!LostPeer(p).ok() || !WaitFor(waiter, p, "gather", true, &bufs[p], missing)) {
        (*out)[p].clear();
        continue;
      }
      Count(0, (*out)[p].size() - kInline, 1);
    }
    AddCall(mine.size(), t0);
    return Status::OK();
  }

  // Through rank 0 (a gather, then a broadcast of every part): only the
  // connections to rank 0 are used. A part that did not reach rank 0 fails
  // every rank alike, naming the rank.
  Status AllGather(const std::string& mine, std::vector<std::string>* out) override {
    return ThroughRankZero("all-gather", mine, out);
  }

  Status Barrier() override {
    std::vector<std::string> unused;
    return ThroughRankZero("barrier", std::string(), &unused);
  }

 private:
  // Bytes of a message that travel in a collective's first round, with its
  // length; only longer messages need a second round for the rest.
  static constexpr size_t kInline = 1016;
  // The slot prefix of point-to-point messages (gloo's collectives use 1-8).
  static constexpr uint8_t kPointToPointPrefix = 0x40;

  Status CheckPeer(int peer) const {
    if (peer < 0 || peer >= ctx_->size || peer == ctx_->rank) {
      return Status::InvalidArgument("rank " + std::to_string(peer) + " is not a peer of rank " +
                                     std::to_string(ctx_->rank) + " (world size " + std::to_string(ctx_->size) + ")");
    }
    return Status::OK();
  }


  // A rooted message: a head of kHead bytes (its length and up to kInline
  // bytes), and, only when longer, the rest as a second message; its slots
  // are the call's sequence number (the same on every rank: every rank
  // makes every rooted call) under a prefix of their own.
  static constexpr size_t kHead = 8 + kInline;
  static constexpr uint8_t kRootedPrefix = 0x41;
  static gloo::Slot RootedSlot(uint32_t seq, uint32_t part) {
    return gloo::Slot::build(kRootedPrefix, seq * 2 + part);
  }
  struct Outgoing {
    explicit Outgoing(const std::string& data) : source(&data), head(kHead, '\0') {
      PutLE64(&head[0], data.size());
      std::memcpy(&head[8], data.data(), std::min(data.size(), kInline));
      rest = data.data() + std::min(data.size(), kInline);
      rest_n = data.size() > kInline ? data.size() - kInline : 0;
    }
    const std::string* source;  // the message, which must outlive this
    std::string head;
    const char* rest;
    size_t rest_n;
  };

  Status CheckRoot(int root, const char* what) const {
    if (root < 0 || root >= ctx_->size) return Status::InvalidArgument(std::string(what) + " root " + std::to_string(root));
    return Status::OK();
  }

  Status FailedEarlier(const char* what) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.ok()) return failed_.WithContext(std::string(what) + ": the communicator failed earlier");
    return Status::OK();
  }

  // Why the root lost rank p (OK when it did not).
  Status LostPeer(int p) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (lost_[p].ok()) return Status::OK();
    return lost_[p].WithContext("rank " + std::to_string(p) + " was lost earlier");
  }

  // The root loses rank p: nothing more goes to or comes from it in rooted
  // calls. (A buffer that gloo still holds a message for is safe to free:
  // gloo's pairs hold weak pointers to unbound buffers.)
  void Lose(int p, const Status& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (lost_[p].ok()) lost_[p] = why;
  }

  static std::chrono::milliseconds Left(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return std::max(left, std::chrono::milliseconds(1));
  }

  // The root posts a message to or from rank p; when gloo refuses (p's
  // pair broke), p is lost, with why in *missing (when given).
  template <typename F>
  void Post(int p, const char* what, std::map<int, Status>* missing, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      Status why = FromException(e, std::string(what) + " on rank " + std::to_string(ctx_->rank) + ": rank " +
                                        std::to_string(p));
      if (missing) (*missing)[p] = why;
      Lose(p, why);
    }
  }

  // The root waits for its message to or from rank p; false (and p lost,
  // with why in *missing when given) when it did not complete by the
  // waiter's deadline or p's pair broke.
  bool WaitFor(Waiter& waiter, int p, const char* what, bool recv,
               std::unique_ptr<gloo::transport::UnboundBuffer>* buf, std::map<int, Status>* missing) {
    Status why;
    try {
      if (waiter.Wait(buf->get(), recv)) return true;
      why = Status::DeadlineExceeded(std::string(what) + " on rank " + std::to_string(ctx_->rank) +
                                     (recv ? ": nothing came from rank " : ": rank ") + std::to_string(p) +
                                     (recv ? "" : " took nothing") + " within " + std::to_string(timeout_.count()) +
                                     " ms");
    } catch (const std::exception& e) {
      why = FromException(e, std::string(what) + " on rank " + std::to_string(ctx_->rank) + ": rank " +
                                 std::to_string(p));
    }
    if (missing) (*missing)[p] = why;
    Lose(p, why);
    buf->reset();
    return false;
  }

  // The root sends part(p) to each rank p it has not lost, all at once; a
  // rank it cannot reach is lost (it fails on its own side).
  template <typename PartOf>
  Status RootSends(const char* what, uint32_t seq, PartOf part) {
    RETURN_IF_ERROR(FailedEarlier(what));
    LoseUnconnected(nullptr);
    const auto t0 = Clock::now();
    const auto deadline = t0 + timeout_;
    struct Pending {
      std::shared_ptr<const Outgoing> message;
      std::unique_ptr<gloo::transport::UnboundBuffer> head_buf, rest_buf;
    };
    std::vector<Pending> pending(ctx_->size);
    std::shared_ptr<const Outgoing> last;
    size_t sent = 0;
    for (int p = 0; p < ctx_->size; ++p) {
      if (p == ctx_->rank || !LostPeer(p).ok()) continue;
      const std::string& data = part(p);
      Pending& q = pending[p];
      // (A broadcast's peers share one head: the same part for each.)
      if (!last || last->source != &data) last = std::make_shared<const Outgoing>(data);
      q.message = last;
      const Outgoing& m = *q.message;
      Post(p, what, nullptr, [&] {
        q.head_buf = ctx_->createUnboundBuffer(const_cast<char*>(m.head.data()), m.head.size());
        q.head_buf->send(p, RootedSlot(seq, 0));
        if (m.rest_n > 0) {
          q.rest_buf = ctx_->createUnboundBuffer(const_cast<char*>(m.rest), m.rest_n);
          q.rest_buf->send(p, RootedSlot(seq, 1));
        }
      });
      sent += data.size();
      Count(1 + (m.rest_n > 0), 0, 0);
    }
    Waiter waiter(deadline);
    for (int p = 0; p < ctx_->size; ++p) {
      Pending& q = pending[p];
      if (!q.head_buf || !LostPeer(p).ok()) continue;
      if (WaitFor(waiter, p, what, false, &q.head_buf, nullptr) && q.rest_buf) {
        WaitFor(waiter, p, what, false, &q.rest_buf, nullptr);
      }
    }
    AddCall(sent, t0);
    return Status::OK();
  }

  // A rank other than the root receives its message of a rooted call.
  Status ReceiveFromRoot(const char* what, int root, uint32_t seq, std::string* out) {
    RETURN_IF_ERROR(PeerReady(root));
    const std::string context = std::string(what) + " on rank " + std::to_string(ctx_->rank) +
                                ": waiting for the root, rank " + std::to_string(root);
    return Timed(context.c_str(), 0, [&] {
      const auto deadline = Clock::now() + 2 * timeout_;
      std::string head(kHead, '\0');
      auto buf = ctx_->createUnboundBuffer(head.data(), head.size());
      buf->recv(root, RootedSlot(seq, 0));
      buf->waitRecv(Left(deadline));
      const uint64_t n = GetLE64(head.data());
      std::string data(n, '\0');
      std::memcpy(data.data(), head.data() + 8, std::min<uint64_t>(n, kInline));
      Count(0, kHead, 1);
      if (n > kInline) {
        auto rest = ctx_->createUnboundBuffer(&data[kInline], n - kInline);
        rest->recv(root, RootedSlot(seq, 1));
        rest->waitRecv(Left(deadline));
        Count(0, n - kInline, 1);
      }
      *out = std::move(data);
    });
  }

  void Count(uint64_t messages_sent, uint64_t bytes_received, uint64_t messages_received) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.messages_sent += messages_sent;
    stats_.bytes_received += bytes_received;
    stats_.messages_received += messages_received;
  }

  void AddCall(size_t bytes_sent, Clock::time_point t0) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.calls++;
    stats_.bytes_sent += bytes_sent;
    stats_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  Status ThroughRankZero(const char* what, const std::string& mine, std::vector<std::string>* out) {
    std::vector<std::string> parts;
    std::map<int, Status> missing;
    RETURN_IF_ERROR(Gather(mine, 0, &parts, &missing).WithContext(what));
    // Rank 0's answer: the outcome, then every part behind its length.
    std::string answer;
    if (ctx_->rank == 0) {
      Status st;
      if (!missing.empty()) {
        std::string ranks;
        for (const auto& [r, why] : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
        st = Status::CheckpointError(std::string(what) + ": nothing came from rank(s) " + ranks, std::move(missing));
      }
      AppendLEString(&answer, EncodeStatus(st));
      if (st.ok()) {
        for (const std::string& part : parts) AppendLEString(&answer, part);
      }
    }
    RETURN_IF_ERROR(Broadcast(&answer, 0).WithContext(what));
    LECursor in(answer);
    std::string encoded;
    if (!in.String(&encoded)) return Status::Internal(std::string(what) + ": a malformed answer from rank 0");
    Status st = DecodeStatus(encoded);
    if (!st.ok()) return st;
    out->assign(ctx_->size, std::string());
    for (int r = 0; r < ctx_->size; ++r) {
      if (!in.String(&(*out)[r])) return Status::Internal(std::string(what) + ": a malformed answer from rank 0");
    }
    return Status::OK();
  }

  // OK when this rank is connected to rank p; else why not.
  Status PeerReady(int p) const {
    if (connected_[p]) return Status::OK();
    if (!unreachable_[p].ok()) return unreachable_[p];
    return Status::FailedPrecondition(
        "rank " + std::to_string(ctx_->rank) + " has no connection to rank " + std::to_string(p) +
        ": ranks connect to rank 0, and to the root of a rooted call (Broadcast, Gather, Scatter) from its first "
        "call on; point-to-point messages go only over such connections");
  }

  // The root loses the ranks it has no connection to (the star around it
  // could not be made to them).
  void LoseUnconnected(std::map<int, Status>* missing) {
    for (int p = 0; p < ctx_->size; ++p) {
      if (p == ctx_->rank || connected_[p] || !LostPeer(p).ok()) continue;
      Status why = PeerReady(p);
      if (missing) (*missing)[p] = why;
      Lose(p, why);
    }
  }

  // Connections on demand: before the first rooted call with root R (not
  // rank 0), R connects to every rank, each rank's pair address relayed by
  // rank 0 (a gather and a scatter over the star around it, which every
  // rank joins: all ranks make the same rooted calls). A rank that cannot
  // be reached is lost to R, and R to it (each call between them fails).
  Status EnsureStar(int root) {
    if (star_[root]) return Status::OK();
    star_[root] = 1;  // (tried once, on every rank alike)
    const int me = ctx_->rank, n = ctx_->size;
    auto relayed = [&](int p) { return p != 0 && p != root; };  // the ranks R connects to now
    std::string part;
    try {
      if (me == root) {
        for (int p = 0; p < n; ++p) {
          if (!relayed(p)) continue;
          AppendLEString(&part, connected_[p] ? std::string() : PairBytes(p));
        }
      } else if (me != 0 && !connected_[root]) {
        part = PairBytes(root);
      }
    } catch (const std::exception& e) {
      return FromException(e, "connecting rank " + std::to_string(me) + " to rank " + std::to_string(root));
    }
    std::vector<std::string> parts;
    std::map<int, Status> missing;
    const std::string what = "connecting rank " + std::to_string(root) + " to every rank through rank 0";
    RETURN_IF_ERROR(Gather(part, 0, &parts, &missing).WithContext(what));
    std::vector<std::string> out(n);
    if (me == 0) {
      // R's part: its address for each relayed rank, in rank order.
      std::vector<std::string> root_addresses(n);
      if (!missing.count(root)) {
        LECursor in(parts[root]);
        for (int p = 0; p < n; ++p) {
          if (relayed(p)) (void)in.String(&root_addresses[p]);
        }
      }
      for (int p = 0; p < n; ++p) {
        if (!relayed(p)) continue;
        out[p] = root_addresses[p];
        AppendLEString(&out[root], missing.count(p) ? std::string() : parts[p]);
      }
    }
    std::string mine;
    RETURN_IF_ERROR(Scatter(out, 0, &mine).WithContext(what));
    if (me == 0) return Status::OK();
    std::vector<int> peers;
    std::vector<std::string> addresses(n);
    if (me == root) {
      LECursor in(mine);
      for (int p = 0; p < n; ++p) {
        std::string a;
        if (!relayed(p) || !in.String(&a)) continue;
        if (connected_[p]) continue;
        if (a.empty()) {
          Lose(p, Status::Unavailable(what + ": rank " + std::to_string(p) + " sent no address"));
          continue;
        }
        addresses[p].assign(a);
        peers.push_back(p);
      }
    } else if (!connected_[root]) {
      if (mine.empty()) {
        unreachable_[root] = Status::Unavailable(what + ": rank " + std::to_string(root) + " sent no address");
        return Status::OK();  // (the rooted call fails, naming it)
      }
      addresses[root] = mine;
      peers.push_back(root);
    }
    std::vector<Status> why(n);
    ConnectEach(peers, [&](int p) {
      try {
        pairs_->getPair(p)->connect(std::vector<char>(addresses[p].begin(), addresses[p].end()));
      } catch (const std::exception& e) {
        why[p] = FromException(e, what + ": rank " + std::to_string(me) + " to rank " + std::to_string(p));
      }
    });
    for (int p : peers) {
      if (why[p].ok()) {
        connected_[p] = 1;
        ++connected_count_;
      } else if (me == root) {
        Lose(p, why[p]);
      } else {
        unreachable_[p] = why[p];
      }
    }
    return Status::OK();
  }

  // The address of a new pair of this rank's with rank p (made once).
  std::string PairBytes(int p) {
    const std::vector<char> b = pairs_->createPair(p)->address().bytes();
    return std::string(b.begin(), b.end());
  }

  // A collective (peer -1) runs only while nothing failed; a point-to-point
  // message only while nothing failed between this rank and its peer (a
  // stream from one rank that broke leaves the others' streams going).
  template <typename F>
  Status Timed(const char* what, size_t bytes, F&& f) {
    return Timed(what, bytes, -1, std::forward<F>(f));
  }
  template <typename F>
  Status Timed(const char* what, size_t bytes, int peer, F&& f) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      const Status& before = peer < 0 ? failed_ : peer_failed_[peer];
      if (!before.ok()) return before.WithContext(std::string(what) + ": the communicator failed earlier");
    }
    auto t0 = Clock::now();
    Status st;
    try {
      f();
    } catch (const std::exception& e) {
      st = FromException(e, std::string(what) + " on rank " + std::to_string(ctx_->rank));
    }
    std::lock_guard<std::mutex> lock(mu_);
    // gloo pairs are unusable after an error (and a buffer whose receive
    // timed out may still be written into): nothing more goes through them.
    if (!st.ok() && failed_.ok()) failed_ = st;
    if (!st.ok() && peer >= 0 && peer_failed_[peer].ok()) peer_failed_[peer] = st;
    stats_.calls++;
    stats_.bytes_sent += bytes;
    stats_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    return st;
  }

  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> ctx_;
  std::shared_ptr<gloo::transport::Context> pairs_;  // ctx_'s pairs
  std::chrono::milliseconds timeout_;
  // Point-to-point sequence numbers per peer: each touched only by the one
  // thread sending to (receiving from) that peer.
  std::vector<uint32_t> send_seq_, recv_seq_;
  mutable std::mutex mu_;  // guards failed_ and stats_ (Send and Recv may run on several threads)
  Status failed_;
  std::vector<Status> peer_failed_;  // point-to-point failures, per peer
  std::vector<Status> lost_;         // ranks the root of a rooted call lost, and why
  uint32_t rooted_seq_ = 0;          // rooted calls so far (the same on every rank)
  CollectiveStats stats_;
  // Connections (a star around rank 0, and around the root of each rooted
  // call since its first: EnsureStar), changed only by rooted calls.
  std::vector<char> connected_;     // per rank: a connected pair
  std::vector<char> star_;          // per rank: the star around it was made (or tried)
  std::vector<Status> unreachable_;  // per rank: why no pair with it could be made
  std::atomic<int> connected_count_{0};
};

// gloo writes to its sockets with writev: once a peer has died, a write to
// it raises SIGPIPE, whose default action kills this (surviving) rank
// before the write's error can become a Status. So a process that left
// SIGPIPE at its default ignores it from here on; one that installed its
// own handler or ignores it already is left alone.
void IgnoreSigpipeUnlessHandled() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current;
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  });
}


// Connects this rank's pairs with `peers`, many at once (ConnectEach).
// `addresses[p]`: the address of rank p's pair for this rank.
Status ConnectPairs(gloo::transport::Context& pairs, const DistributedConfig& c,
                    const std::vector<std::vector<char>>& addresses, const std::vector<int>& peers) {
  std::vector<std::string> errors(c.world_size);
  ConnectEach(peers, [&](int peer) {
    try {
      pairs.getPair(peer)->connect(addresses[peer]);
    } catch (const std::exception& e) {
      errors[peer] = e.what();
    }
  });
  std::string failed, detail;
  bool timed_out = false;
  for (int peer = 0; peer < c.world_size; ++peer) {
    if (errors[peer].empty()) continue;
    failed += (failed.empty() ? "" : ", ") + std::to_string(peer);
    detail += "; rank " + std::to_string(peer) + ": " + errors[peer];
    timed_out = timed_out || errors[peer].find("imeout") != std::string::npos;
  }
  if (failed.empty()) return Status::OK();
  std::string m = "connecting rank " + std::to_string(c.rank) + " to rank(s) " + failed + " (job '" + c.job_id +
                  "', timeout " + std::to_string(c.timeout.count()) + " ms; did they die?)" + detail;
  return timed_out ? Status::DeadlineExceeded(m) : Status::Unavailable(m);
}

// Both ConnectGloo: the rendezvous in `store`, then the pairs. `deadline`
// bounds phase 1 (config.timeout from the start of the call): every rank
// arrives, the ranks agree, and they exchange their addresses.
StatusOr<std::unique_ptr<Communicator>> ConnectThrough(const DistributedConfig& config, RendezvousStore& store,
                                                       Clock::time_point deadline, const ListenAddress& listen,
                                                       const std::string& what_to_do) {
  IgnoreSigpipeUnlessHandled();
  const std::string where = "job '" + config.job_id + "'" +
                            (config.launch_id.empty() ? "" : " (launch '" + config.launch_id + "')") +
                            " on rendezvous " + config.rendezvous;
  ASSIGN_OR_RETURN(std::string prefix, LaunchPrefix(store, config, deadline, where, what_to_do));
  Rendezvous rdv(store, config, prefix, where, what_to_do);
  RETURN_IF_ERROR(rdv.Join(deadline));
  // Room for a connection to every other rank: rank 0 makes them now, and
  // any rank that coordinates a rooted call later makes them then. Rank 0
  // records a limit too low to raise, so that every rank fails alike.
  if (Status room = EnsureDescriptorsFor(static_cast<uint64_t>(config.world_size - 1),
                                         "rank " + std::to_string(config.rank) + " of " + where);
      !room.ok() && config.rank == 0) {
    return rdv.Fail(room);
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = listen.address;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    std::shared_ptr<gloo::transport::Context> pairs = device->createContext(config.rank, config.world_size);
    // gloo waits 5 times a pair's timeout for its connection: phase 2,
    // connecting, is bounded by config.timeout too. (Collectives set their
    // own timeout on every call.)
    pairs->setTimeout(std::max(std::chrono::milliseconds(1), config.timeout / 5));
    // Connections: a star around rank 0 (every rank's partner in the
    // protocols' rooted calls by default); the star around another rank is
    // made by its first rooted call (EnsureStar). Each rank sends rank 0 its card and its pair's address for rank 0;
    // rank 0 checks every card (a rank on loopback in a job across hosts
    // fails every rank alike: rank 0 records it) and answers each rank with
    // its own pair's address for it. What a rank other than 0 reads does not
    // grow with the world size.
    std::vector<int> now;
    std::vector<std::vector<char>> addresses(config.world_size);
    const std::string card = EncodePeerCard(MyPeerCard(listen));
    auto address_bytes = [&](int peer) {
      const std::vector<char> bytes = pairs->createPair(peer)->address().bytes();
      return std::string(bytes.begin(), bytes.end());
    };
    auto malformed = [&](int r) {
      return rdv.Fail(Status::InvalidArgument("rank " + std::to_string(r) + " published an address rank " +
                                              std::to_string(config.rank) + " cannot read (" + where +
                                              "): is it running another version of ckptdb?"));
    };
    if (config.rank == 0) {
      std::string mine;
      AppendLEString(&mine, card);
      ASSIGN_OR_RETURN(std::vector<std::string> published, rdv.GatherToRoot("address", mine, deadline));
      std::vector<PeerCard> cards(config.world_size);
      for (int r = 0; r < config.world_size; ++r) {
        LECursor in(published[r]);
        std::string card_bytes, address;
        if (!in.String(&card_bytes) || !DecodePeerCard(card_bytes, &cards[r]) ||
            (r != 0 && (!in.String(&address) || address.empty()))) {
          return malformed(r);
        }
        if (r != 0) addresses[r].assign(address.begin(), address.end());
      }
      if (Status st = CheckPeersCanReachEachOther(cards); !st.ok()) return rdv.Fail(st);
      std::vector<std::string> parts(config.world_size);
      for (int r = 1; r < config.world_size; ++r) {
        parts[r] = address_bytes(r);
        now.push_back(r);
      }
      RETURN_IF_ERROR(rdv.ScatterFromRoot("address", parts));
    } else {
      std::string mine;
      AppendLEString(&mine, card);
      AppendLEString(&mine, address_bytes(0));
      RETURN_IF_ERROR(rdv.GatherToRoot("address", mine, deadline).status());
      ASSIGN_OR_RETURN(std::string zero, rdv.ReceiveFromRoot("address", deadline));
      if (zero.empty()) return malformed(0);
      addresses[0].assign(zero.begin(), zero.end());
      now.push_back(0);
    }
    RETURN_IF_ERROR(ConnectPairs(*pairs, config, addresses, now));
    // A rank of another launch that took a rank id of this one is found by
    // the rank that lost it, which records it: check once more.
    RETURN_IF_ERROR(rdv.CheckNoFailure());
    auto ctx = std::make_shared<MeshContext>(config.rank, config.world_size);
    ctx->setTimeout(config.timeout);
    ctx->Adopt(device, pairs);
    return std::unique_ptr<Communicator>(
        new GlooCommunicator(std::move(device), std::move(ctx), pairs, config.timeout, now));
  } catch (const std::exception& e) {
    return FromException(e, "connecting rank " + std::to_string(config.rank) + " to its peers");
  }
}

}  // namespace

StatusOr<std::unique_ptr<Communicator>> ConnectGloo(const DistributedConfig& config) {
  const auto deadline = Clock::now() + config.timeout;
  RETURN_IF_ERROR(config.Validate());
  // Before the rendezvous, so that a typo fails at once.
  ASSIGN_OR_RETURN(const ListenAddress listen, ChooseListenAddress(config, RouteHost(config)));
  ASSIGN_OR_RETURN(std::unique_ptr<RendezvousStore> store, OpenRendezvousStore(config.rendezvous, deadline));
  const bool is_file = config.rendezvous.rfind("file://", 0) == 0;
  const std::string what_to_do =
      (is_file ? "Remove the rendezvous directory " + config.rendezvous.substr(7)
               : "Delete the rendezvous's keys '" + config.job_id + "/*'") +
      " once no launch of this job runs, or use a new CKPTDB_JOB_ID; a launch id per launch (CKPTDB_LAUNCH_ID, "
      "set by ckptdb-launch; torchrun's TORCHELASTIC_RUN_ID) keeps launches apart";
  return ConnectThrough(config, *store, deadline, listen, what_to_do);
}

StatusOr<std::unique_ptr<Communicator>> ConnectGloo(const DistributedConfig& config, RendezvousStore& store) {
  const auto deadline = Clock::now() + config.timeout;
  RETURN_IF_ERROR(ValidateConfigExceptRendezvous(config));
  if (config.rendezvous.empty()) {
    return Status::InvalidArgument("DistributedConfig::rendezvous must name the store the application brings");
  }
  ASSIGN_OR_RETURN(const ListenAddress listen, ChooseListenAddress(config, RouteHost(config)));
  return ConnectThrough(config, store, deadline, listen,
                        "Use a job id of its own for each connection through one store (keys of job '" +
                            config.job_id + "' are there already)");
}

}  // namespace ckptdb
