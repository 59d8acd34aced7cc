#include "comm/thread_communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "util/status_macros.h"

namespace ckptdb {

namespace {

enum class Kind { kBroadcast, kGather, kScatter, kAllGather, kBarrier };

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kGather:
      return "gather";
    case Kind::kScatter:
      return "scatter";
    case Kind::kAllGather:
      return "all-gather";
    case Kind::kBarrier:
      return "barrier";
  }
  return "collective";
}

std::string RankList(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size() && i < 8; ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 8) out += " and " + std::to_string(ranks.size() - 8) + " more";
  return out;
}

}  // namespace

struct ThreadJob::Hub {
  struct Round {
    Kind kind = Kind::kBarrier;
    int root = 0;
    bool mismatch = false;
    std::vector<std::string> slots;
    std::vector<bool> present;
    int arrived = 0;
    int departed = 0;
  };
  struct RankState {
    uint64_t next_round = 0;
    bool left = false;
    CollectiveStats stats;
    std::set<int> peers;
    std::set<int> lost;  // ranks this rank, as a root, lost (skipped from then on)
  };
  // A message of a rooted call.
  struct Rooted {
    Kind kind;
    int root;
    std::string data;
  };

  Hub(int world, std::chrono::milliseconds t) : world_size(world), timeout(t), wake(world), ranks(world) {}

  const int world_size;
  const std::chrono::milliseconds timeout;
  mutable std::mutex mu;
  // One per rank: what its threads wait on, notified when something for
  // that rank arrives (a message, its round complete, a rank leaving). One
  // variable for the whole job woke every waiting thread-rank for each
  // message: W wake-ups a message, O(W^2) a collective, which at thousands
  // of thread-ranks was most of a job's time.
  std::vector<std::condition_variable> wake;
  std::map<uint64_t, Round> rounds;                         // guarded by mu
  std::vector<RankState> ranks;                             // guarded by mu
  std::map<std::pair<int, int>, std::deque<std::string>> mail;  // (from, to); guarded by mu
  std::map<std::pair<int, int>, std::deque<Rooted>> rooted;     // (from, to); guarded by mu

  // Rooted calls, under mu. A message from `from` to `to`.
  void Post(int from, int to, Kind kind, int root, std::string data) {
    Count(from, to, data.size(), 0);
    ranks[from].stats.messages_sent++;
    rooted[{from, to}].push_back(Rooted{kind, root, std::move(data)});
    wake[to].notify_all();
  }
  // Something every rank may be waiting for: a round complete, a rank gone.
  void WakeAll() {
    for (std::condition_variable& cv : wake) cv.notify_all();
  }
  // Takes the next rooted message from `from` to `to`, waiting until
  // `deadline`.
  Status Take(std::unique_lock<std::mutex>& lock, int from, int to, Kind kind, int root,
              std::chrono::steady_clock::time_point deadline, std::string* data) {
    auto& box = rooted[{from, to}];
    wake[to].wait_until(lock, deadline, [&] { return !box.empty() || ranks[from].left; });
    const std::string what =
        std::string(KindName(kind)) + " on rank " + std::to_string(to) + ": rank " + std::to_string(from);
    if (box.empty()) {
      if (ranks[from].left) return Status::Unavailable(what + " left the job (its thread ended)");
      return Status::DeadlineExceeded(what + " sent nothing within " + std::to_string(timeout.count()) + " ms");
    }
    Rooted m = std::move(box.front());
    box.pop_front();
    if (m.kind != kind || m.root != root) {
      return Status::Internal(what + " called " + KindName(m.kind) + " (root " + std::to_string(m.root) +
                              ") at the same point");
    }
    Count(to, from, 0, m.data.size());
    ranks[to].stats.messages_received++;
    *data = std::move(m.data);
    return Status::OK();
  }

  CollectiveStats Stats(int rank) const {
    std::lock_guard<std::mutex> lock(mu);
    CollectiveStats s = ranks[rank].stats;
    s.peers = ranks[rank].peers.size();
    return s;
  }

  void Count(int rank, int peer, uint64_t sent, uint64_t received) {
    RankState& s = ranks[rank];
    s.stats.bytes_sent += sent;
    s.stats.bytes_received += received;
    s.peers.insert(peer);
  }

  // What this rank of a direct AllGather or Barrier sends and receives.
  void CountCollective(int rank, const Round& r) {
    RankState& s = ranks[rank];
    const uint64_t others = static_cast<uint64_t>(world_size - 1);
    uint64_t all = 0;
    for (const std::string& slot : r.slots) all += slot.size();
    const uint64_t mine = r.slots[rank].size();
    auto everyone = [&] {
      for (int p = 0; p < world_size; ++p) {
        if (p != rank) s.peers.insert(p);
      }
    };
    switch (r.kind) {
      case Kind::kAllGather:
        s.stats.bytes_sent += mine * others;
        s.stats.bytes_received += all - mine;
        s.stats.messages_sent += others;
        s.stats.messages_received += others;
        everyone();
        break;
      case Kind::kBarrier:
        s.stats.messages_sent += rank == r.root ? others : 1;
        s.stats.messages_received += rank == r.root ? others : 1;
        if (rank == r.root) {
          everyone();
        } else {
          s.peers.insert(r.root);
        }
        break;
      default:  // (rooted calls are counted message by message)
        break;
    }
    if (world_size == 1) s.peers.clear();
  }

  // Runs rank `rank`'s next collective; `take` reads the round's deposits
  // (under the lock) once every rank has arrived.
  Status Collective(int rank, Kind kind, int root, std::string mine,
                    const std::function<void(const std::vector<std::string>&)>& take) {
    std::unique_lock<std::mutex> lock(mu);
    const uint64_t k = ranks[rank].next_round++;
    Round& r = rounds[k];
    if (r.slots.empty()) {
      r.slots.resize(world_size);
      r.present.assign(world_size, false);
      r.kind = kind;
      r.root = root;
    }
    if (r.kind != kind || r.root != root) r.mismatch = true;
    r.slots[rank] = std::move(mine);
    r.present[rank] = true;
    if (++r.arrived == world_size) WakeAll();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto missing_left = [&] {
      std::vector<int> gone;
      for (int p = 0; p < world_size; ++p) {
        if (!r.present[p] && ranks[p].left) gone.push_back(p);
      }
      return gone;
    };
    wake[rank].wait_until(lock, deadline, [&] { return r.arrived == world_size || !missing_left().empty(); });
    Status st;
    const std::string what = std::string(KindName(kind)) + " on rank " + std::to_string(rank);
    if (r.arrived == world_size) {
      if (r.mismatch) {
        st = Status::Internal(what + ": the ranks called different collectives (or roots) at the same point");
      } else {
        CountCollective(rank, r);
        ranks[rank].stats.calls++;
        take(r.slots);
      }
    } else if (std::vector<int> gone = missing_left(); !gone.empty()) {
      st = Status::Unavailable(what + ": rank " + RankList(gone) + " left the job (its thread ended)");
    } else {
      std::vector<int> absent;
      for (int p = 0; p < world_size; ++p) {
        if (!r.present[p]) absent.push_back(p);
      }
      st = Status::DeadlineExceeded(what + ": rank " + RankList(absent) + " did not arrive within " +
                                    std::to_string(timeout.count()) + " ms");
    }
    // (A round that failed stays, so that a rank arriving late finds who
    // was there and who left, instead of a new round that names everyone
    // who has gone since.)
    if (++r.departed == world_size) rounds.erase(k);
    return st;
  }
};

namespace {

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadJob::Hub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}
  ~ThreadCommunicator() override {
    std::lock_guard<std::mutex> lock(hub_->mu);
    hub_->ranks[rank_].left = true;
    hub_->WakeAll();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return hub_->world_size; }
  std::chrono::milliseconds timeout() const override { return hub_->timeout; }
  CollectiveStats stats() const override { return hub_->Stats(rank_); }

  Status Broadcast(std::string* data, int root) override {
    RETURN_IF_ERROR(CheckRoot(root, "broadcast"));
    std::vector<std::string> parts;
    if (rank_ == root) parts.assign(hub_->world_size, *data);
    return RootToEach(Kind::kBroadcast, root, parts, data);
  }
  Status Scatter(const std::vector<std::string>& parts, int root, std::string* mine) override {
    RETURN_IF_ERROR(CheckRoot(root, "scatter"));
    if (rank_ == root && parts.size() != static_cast<size_t>(hub_->world_size)) {
      return Status::InvalidArgument("scatter: " + std::to_string(parts.size()) + " parts for " +
                                     std::to_string(hub_->world_size) + " ranks");
    }
    return RootToEach(Kind::kScatter, root, parts, mine);
  }
  Status Gather(const std::string& mine, int root, std::vector<std::string>* out,
                std::map<int, Status>* missing) override {
    RETURN_IF_ERROR(CheckRoot(root, "gather"));
    out->clear();
    if (missing) missing->clear();
    if (!failed_.ok()) return failed_.WithContext("the communicator failed earlier");
    std::unique_lock<std::mutex> lock(hub_->mu);
    if (rank_ != root) {
      if (hub_->ranks[root].left) return Fail(Status::Unavailable("gather on rank " + std::to_string(rank_) + ": the root, rank " + std::to_string(root) + ", left the job"));
      hub_->Post(rank_, root, Kind::kGather, root, mine);
      hub_->ranks[rank_].stats.calls++;
      return Status::OK();
    }
    if (missing == nullptr) return Status::InvalidArgument("gather: the root needs `missing`");
    out->assign(hub_->world_size, std::string());
    (*out)[rank_] = mine;
    const auto deadline = std::chrono::steady_clock::now() + hub_->timeout;
    std::set<int>& lost = hub_->ranks[rank_].lost;
    for (int p = 0; p < hub_->world_size; ++p) {
      if (p == rank_) continue;
      if (lost.count(p)) {
        (*missing)[p] = Status::Unavailable("rank " + std::to_string(p) + " was lost in an earlier call");
        continue;
      }
      Status st = hub_->Take(lock, p, rank_, Kind::kGather, root, deadline, &(*out)[p]);
      if (st.code() == StatusCode::kInternal) return Fail(st);
      if (!st.ok()) {
        (*missing)[p] = st;
        lost.insert(p);
      }
    }
    hub_->ranks[rank_].stats.calls++;
    return Status::OK();
  }
  Status AllGather(const std::string& mine, std::vector<std::string>* out) override {
    return Run(Kind::kAllGather, 0, mine, [&](const std::vector<std::string>& all) { *out = all; });
  }
  Status Barrier() override {
    return Run(Kind::kBarrier, 0, std::string(), [](const std::vector<std::string>&) {});
  }

  Status Send(int peer, const void* data, size_t n) override {
    RETURN_IF_ERROR(CheckPeer(peer));
    if (n == 0) return Status::OK();
    std::lock_guard<std::mutex> lock(hub_->mu);
    hub_->mail[{rank_, peer}].emplace_back(static_cast<const char*>(data), n);
    hub_->Count(rank_, peer, n, 0);
    hub_->ranks[rank_].stats.messages_sent++;
    hub_->wake[peer].notify_all();
    return Status::OK();
  }

  Status Recv(int peer, void* data, size_t n) override {
    RETURN_IF_ERROR(CheckPeer(peer));
    if (n == 0) return Status::OK();
    std::unique_lock<std::mutex> lock(hub_->mu);
    auto& box = hub_->mail[{peer, rank_}];
    const bool got =
        hub_->wake[rank_].wait_for(lock, hub_->timeout, [&] { return !box.empty() || hub_->ranks[peer].left; });
    const std::string what = "receive from rank " + std::to_string(peer) + " on rank " + std::to_string(rank_);
    if (box.empty()) {
      return got ? Status::Unavailable(what + ": rank " + std::to_string(peer) + " left the job")
                 : Status::DeadlineExceeded(what + ": nothing came within " +
                                            std::to_string(hub_->timeout.count()) + " ms");
    }
    std::string m = std::move(box.front());
    box.pop_front();
    if (m.size() != n) {
      return Status::Internal(what + ": " + std::to_string(m.size()) + " bytes came where " + std::to_string(n) +
                              " were expected");
    }
    std::memcpy(data, m.data(), n);
    hub_->Count(rank_, peer, 0, n);
    hub_->ranks[rank_].stats.messages_received++;
    return Status::OK();
  }

 private:
  Status CheckRoot(int root, const char* what) const {
    if (root < 0 || root >= hub_->world_size) return Status::InvalidArgument(std::string(what) + " root " + std::to_string(root));
    return Status::OK();
  }

  Status CheckPeer(int peer) const {
    if (peer < 0 || peer >= hub_->world_size || peer == rank_) {
      return Status::InvalidArgument("rank " + std::to_string(peer) + " is not a peer of rank " +
                                     std::to_string(rank_) + " (world size " + std::to_string(hub_->world_size) +
                                     ")");
    }
    return Status::OK();
  }

  Status Fail(Status st) {
    failed_ = st;
    return st;
  }

  // Broadcast and Scatter: the root posts parts[r] to each rank r it has not
  // lost; another rank waits (twice the timeout) for its part.
  Status RootToEach(Kind kind, int root, const std::vector<std::string>& parts, std::string* mine) {
    if (!failed_.ok()) return failed_.WithContext("the communicator failed earlier");
    std::unique_lock<std::mutex> lock(hub_->mu);
    hub_->ranks[rank_].stats.calls++;
    if (rank_ == root) {
      const std::set<int>& lost = hub_->ranks[rank_].lost;
      for (int p = 0; p < hub_->world_size; ++p) {
        if (p != rank_ && !lost.count(p)) hub_->Post(rank_, p, kind, root, parts[p]);
      }
      *mine = parts[rank_];
      return Status::OK();
    }
    Status st = hub_->Take(lock, root, rank_, kind, root, std::chrono::steady_clock::now() + 2 * hub_->timeout, mine);
    return st.ok() ? st : Fail(st);
  }

  // A communicator whose collective failed stays failed, as gloo's does.
  Status Run(Kind kind, int root, std::string mine, const std::function<void(const std::vector<std::string>&)>& take) {
    if (!failed_.ok()) return failed_.WithContext("the communicator failed earlier");
    Status st = hub_->Collective(rank_, kind, root, std::move(mine), take);
    if (!st.ok()) failed_ = st;
    return st;
  }

  std::shared_ptr<ThreadJob::Hub> hub_;
  const int rank_;
  Status failed_;
};

}  // namespace

ThreadJob::ThreadJob(int world_size, std::chrono::milliseconds timeout)
    : hub_(std::make_shared<Hub>(world_size, timeout)) {}

ThreadJob::~ThreadJob() = default;

int ThreadJob::world_size() const { return hub_->world_size; }

std::unique_ptr<Communicator> ThreadJob::Join(int rank) {
  return std::make_unique<ThreadCommunicator>(hub_, rank);
}

CollectiveStats ThreadJob::stats(int rank) const { return hub_->Stats(rank); }

void RunRanksAsThreads(ThreadJob& job, const std::function<void(int, Communicator&)>& fn) {
  std::vector<std::thread> threads;
  threads.reserve(job.world_size());
  for (int r = 0; r < job.world_size(); ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Communicator> comm = job.Join(r);
      try {
        fn(r, *comm);
      } catch (...) {
        // The rank leaves the job (its communicator goes): the others fail.
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace ckptdb
