// The ranks' meeting protocol (rendezvous.h): claims, checks, failures that
// every waiting rank sees, and bounded exchanges of values.
#include "comm/rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <climits>
#include <cstdio>
#include <random>
#include <thread>

#include "format/status_codec.h"
#include "util/status_macros.h"

namespace ckptdb {

namespace {

using Clock = std::chrono::steady_clock;

std::string HostName() {
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof host - 1) != 0) return "?";
  return host;
}

// What a rank's claim holds: its world size, pid and host.
std::string ClaimValue(int world_size) {
  return "world=" + std::to_string(world_size) + " pid=" + std::to_string(getpid()) + " host=" + HostName();
}

int ClaimWorld(const std::string& claim) {
  int world = -1;
  if (std::sscanf(claim.c_str(), "world=%d", &world) != 1) return -1;
  return world;
}

// "pid 123 on host h (world size 4)", from a claim.
std::string DescribeClaim(const std::string& claim) {
  int world = -1, pid = -1;
  char host[256] = {};
  if (std::sscanf(claim.c_str(), "world=%d pid=%d host=%255s", &world, &pid, host) != 3) return "'" + claim + "'";
  return "pid " + std::to_string(pid) + " on host " + host + " (world size " + std::to_string(world) + ")";
}

// A launch's nonce: 64 random bits, drawn for each launch (no generator
// shared between the threads of a process).
std::string NewNonce() {
  std::random_device rd;
  const uint64_t v = (uint64_t{rd()} << 32) | rd();
  char nonce[17];
  std::snprintf(nonce, sizeof nonce, "%016llx", static_cast<unsigned long long>(v));
  return nonce;
}

// Polls with a short, growing interval: the first checks are quick, and a
// long wait does not flood a shared file system.
class Poller {
 public:
  void Sleep() {
    std::this_thread::sleep_for(interval_);
    interval_ = std::min(interval_ * 2, std::chrono::milliseconds(50));
  }

 private:
  std::chrono::milliseconds interval_{2};
};

}  // namespace

StatusOr<std::string> LaunchPrefix(RendezvousStore& store, const DistributedConfig& config,
                                   std::chrono::steady_clock::time_point deadline, const std::string& where,
                                   const std::string& what_to_do) {
  const std::string base = config.job_id + "/" + (config.launch_id.empty() ? "-" : config.launch_id) + "/";
  if (config.rank == 0) {
    const std::string nonce = NewNonce();
    ASSIGN_OR_RETURN(bool created, store.CreateKey(base + "launch", nonce));
    if (created) return base + nonce + "/";
    // Rank 0 is claimed already: by another process given rank 0, by rank 0
    // of another launch with the same ids, or by one that finished or was
    // killed and left its keys. The three look alike from here; this is
    // rank 0 claimed twice, told and recorded as any rank's claim is (no
    // refusal of a "launch" is written into a live one's keys).
    ASSIGN_OR_RETURN(std::optional<std::string> old, store.Get(base + "launch"));
    if (!old) return Status::Internal("rendezvous: '" + base + "launch' exists and does not (" + where + ")");
    return Rendezvous(store, config, base + *old + "/", where, what_to_do).ClaimedTwice();
  }
  Poller poller;
  while (true) {
    ASSIGN_OR_RETURN(std::optional<std::string> nonce, store.Get(base + "launch"));
    if (nonce) return base + *nonce + "/";
    if (Clock::now() >= deadline) break;
    poller.Sleep();
  }
  return Status::DeadlineExceeded("rendezvous timed out after " + std::to_string(config.timeout.count()) +
                                  " ms: rank 0 never opened " + where);
}

Rendezvous::Rendezvous(RendezvousStore& store, const DistributedConfig& config, std::string prefix, std::string where,
                       std::string what_to_do)
    : store_(store), config_(config), prefix_(std::move(prefix)), where_(std::move(where)),
      what_to_do_(std::move(what_to_do)) {}

Status Rendezvous::RecordedFailure() {
  ASSIGN_OR_RETURN(std::optional<std::string> failed, store_.Get(prefix_ + "failed"));
  if (!failed) return Status::OK();
  Status st = DecodeStatus(*failed);
  if (st.ok()) return Status::Internal("rendezvous: an unreadable failure is recorded for " + where_);
  return st;
}

Status Rendezvous::CheckNoFailure() { return RecordedFailure(); }

Status Rendezvous::Fail(const Status& st) {
  // Best effort: the caller fails with `st` either way.
  (void)store_.CreateKey(prefix_ + "failed", EncodeStatus(st));
  return st;
}

Status Rendezvous::ClaimedTwice() {
  const int me = config_.rank;
  StatusOr<std::optional<std::string>> first = store_.Get(prefix_ + "rank/" + std::to_string(me));
  const std::string who = first.ok() && first->has_value() ? DescribeClaim(**first) : "another process";
  // Recorded at once, so that the ranks whose claims won fail too instead
  // of forming a job with a process of another launch.
  return Fail(Status::AlreadyExists(
      "two processes claim rank " + std::to_string(me) + " of " + where_ + ": " + who + " and " +
      DescribeClaim(ClaimValue(config_.world_size)) +
      "; give every process a rank of its own (if the first belongs to another launch with the same job id, or is "
      "not running and its launch left its keys behind: " +
      what_to_do_ + ")"));
}

Status Rendezvous::Join(Deadline deadline) {
  const int me = config_.rank, world = config_.world_size;
  const std::string my_key = prefix_ + "rank/" + std::to_string(me);
  ASSIGN_OR_RETURN(bool created, store_.CreateKey(my_key, ClaimValue(world)));
  if (!created) return ClaimedTwice();
  auto disagree = [&](int a, int wa, int b, int wb) {
    return Fail(Status::InvalidArgument("the ranks of " + where_ + " disagree on the world size: rank " +
                                        std::to_string(a) + " says world size " + std::to_string(wa) + ", rank " +
                                        std::to_string(b) + " says world size " + std::to_string(wb) +
                                        "; start every rank with the same CKPTDB_WORLD_SIZE"));
  };
  if (me != 0) {
    // Rank 0's claim is there (it opened the launch before this rank got
    // its prefix): a world size that differs from it fails at once.
    ASSIGN_OR_RETURN(std::optional<std::string> zero, store_.Get(prefix_ + "rank/0"));
    if (zero) {
      const int w0 = ClaimWorld(*zero);
      if (w0 != world) return disagree(0, w0, me, world);
    }
    StatusOr<std::string> joined = WaitForKeyFromRoot(prefix_ + "joined", deadline, "every rank to arrive");
    return joined.status();
  }
  std::vector<bool> seen;
  StatusOr<bool> all = WaitForEveryRank(
      prefix_ + "rank/", deadline,
      [&](int r, std::string claim) -> Status {
        const int w = ClaimWorld(claim);
        if (w != world) return r < me ? disagree(r, w, me, world) : disagree(me, world, r, w);
        return Status::OK();
      },
      [&]() -> Status {
        // A rank that believes the world is larger than this one does.
        ASSIGN_OR_RETURN(std::optional<std::string> beyond, store_.Get(prefix_ + "rank/" + std::to_string(world)));
        if (beyond) return disagree(me, world, world, ClaimWorld(*beyond));
        return Status::OK();
      },
      &seen);
  if (!all.ok()) return all.status();
  if (*all) {
    (void)store_.CreateKey(prefix_ + "joined", "");
    return Status::OK();
  }
  return Fail(Status::DeadlineExceeded("rendezvous timed out after " + std::to_string(config_.timeout.count()) +
                                       " ms: rank(s) " + Missing(seen) + " of " + std::to_string(world) +
                                       " never arrived (" + where_ + ")"));
}

StatusOr<std::string> Rendezvous::WaitForKeyFromRoot(const std::string& key, Deadline deadline,
                                                     const std::string& waiting_for) {
  // Rank 0 may have started later than this rank: its record of what went
  // wrong (naming the ranks) can come a little after this rank's deadline.
  const auto grace = std::min<Clock::duration>(std::chrono::seconds(2), config_.timeout / 4);
  Poller poller;
  while (true) {
    RETURN_IF_ERROR(RecordedFailure());
    ASSIGN_OR_RETURN(std::optional<std::string> v, store_.Get(key));
    if (v) return std::move(*v);
    if (Clock::now() >= deadline + grace) break;
    poller.Sleep();
  }
  return Status::DeadlineExceeded("rendezvous timed out after " + std::to_string(config_.timeout.count()) +
                                  " ms waiting for rank 0 to report " + waiting_for + " (" + where_ +
                                  "): did rank 0 die, or is it late?");
}

StatusOr<bool> Rendezvous::WaitForEveryRank(const std::string& base, Deadline deadline,
                                            const std::function<Status(int rank, std::string value)>& take,
                                            const std::function<Status()>& check, std::vector<bool>* seen) {
  const int world = config_.world_size;
  seen->assign(world, false);
  (*seen)[config_.rank] = true;
  Poller poller;
  while (true) {
    RETURN_IF_ERROR(RecordedFailure());
    for (int r = 0; r < world; ++r) {
      if ((*seen)[r]) continue;
      ASSIGN_OR_RETURN(std::optional<std::string> v, store_.Get(base + std::to_string(r)));
      if (!v) continue;
      RETURN_IF_ERROR(take(r, std::move(*v)));
      (*seen)[r] = true;
    }
    RETURN_IF_ERROR(check());
    if (std::all_of(seen->begin(), seen->end(), [](bool b) { return b; })) return true;
    if (Clock::now() >= deadline) return false;
    poller.Sleep();
  }
}

std::string Rendezvous::Missing(const std::vector<bool>& seen) {
  std::string list;
  for (size_t r = 0; r < seen.size(); ++r) {
    if (!seen[r]) list += (list.empty() ? "" : ", ") + std::to_string(r);
  }
  return list;
}

StatusOr<std::vector<std::string>> Rendezvous::GatherToRoot(const std::string& name, const std::string& mine,
                                                             Deadline deadline) {
  const int world = config_.world_size;
  const std::string base = prefix_ + name + "/";
  if (config_.rank != 0) {
    ASSIGN_OR_RETURN(bool created, store_.CreateKey(base + std::to_string(config_.rank), mine));
    if (!created) {
      return Fail(Status::AlreadyExists("rendezvous: '" + base + std::to_string(config_.rank) +
                                        "' exists already in " + where_));
    }
    return std::vector<std::string>();
  }
  std::vector<std::string> out(world);
  out[0] = mine;
  std::vector<bool> seen;
  StatusOr<bool> all = WaitForEveryRank(
      base, deadline,
      [&](int r, std::string value) {
        out[r] = std::move(value);
        return Status::OK();
      },
      [] { return Status::OK(); }, &seen);
  if (!all.ok()) return all.status();
  if (*all) return out;
  return Fail(Status::DeadlineExceeded("rendezvous timed out after " + std::to_string(config_.timeout.count()) +
                                       " ms: rank(s) " + Missing(seen) + " of " + std::to_string(world) +
                                       " arrived but never published their " + name + " (died?) (" + where_ + ")"));
}

Status Rendezvous::ScatterFromRoot(const std::string& name, const std::vector<std::string>& parts) {
  const std::string base = prefix_ + name + "/";
  for (int r = 1; r < config_.world_size; ++r) {
    ASSIGN_OR_RETURN(bool created, store_.CreateKey(base + "from0/" + std::to_string(r), parts[r]));
    if (!created) return Fail(Status::AlreadyExists("rendezvous: '" + base + "from0/" + std::to_string(r) +
                                                    "' exists already in " + where_));
  }
  return Status::OK();
}

StatusOr<std::string> Rendezvous::ReceiveFromRoot(const std::string& name, Deadline deadline) {
  return WaitForKeyFromRoot(prefix_ + name + "/from0/" + std::to_string(config_.rank), deadline,
                            "its " + name + " for this rank");
}

}  // namespace ckptdb
