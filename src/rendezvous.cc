// The ranks' meeting protocol (rendezvous.h): claims, checks, failures that
// every waiting rank sees, and bounded exchanges of values.
#include "rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <thread>

#include "status_codec.h"
#include "status_macros.h"

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

Rendezvous::Rendezvous(RendezvousStore& store, const DistributedConfig& config, std::string prefix, std::string where)
    : store_(store), config_(config), prefix_(std::move(prefix)), where_(std::move(where)) {}

Status Rendezvous::RecordedFailure() {
  ASSIGN_OR_RETURN(std::optional<std::string> failed, store_.Get(prefix_ + "failed"));
  if (!failed) return Status::OK();
  Status st = DecodeStatus(*failed);
  if (st.ok()) return Status::Internal("rendezvous: an unreadable failure is recorded for " + where_);
  return st;
}

Status Rendezvous::Fail(const Status& st) {
  // Best effort: the caller fails with `st` either way.
  (void)store_.CreateKey(prefix_ + "failed", EncodeStatus(st));
  return st;
}

Status Rendezvous::Join(Deadline deadline) {
  const int me = config_.rank, world = config_.world_size;
  const std::string mine = ClaimValue(world);
  const std::string my_key = prefix_ + "rank/" + std::to_string(me);
  ASSIGN_OR_RETURN(bool created, store_.CreateKey(my_key, mine));
  if (!created) {
    StatusOr<std::optional<std::string>> other = store_.Get(my_key);
    const std::string first = other.ok() && other->has_value() ? DescribeClaim(**other) : "another process";
    return Fail(Status::AlreadyExists("two processes claim rank " + std::to_string(me) + " of " + where_ + ": " +
                                      first + " and " + DescribeClaim(mine) +
                                      "; give every process a rank of its own"));
  }
  auto disagree = [&](int a, int wa, int b, int wb) {
    return Fail(Status::InvalidArgument("the ranks of " + where_ + " disagree on the world size: rank " +
                                        std::to_string(a) + " says world size " + std::to_string(wa) + ", rank " +
                                        std::to_string(b) + " says world size " + std::to_string(wb) +
                                        "; start every rank with the same CKPTDB_WORLD_SIZE"));
  };
  std::vector<bool> seen(world, false);
  seen[me] = true;
  Poller poller;
  while (true) {
    RETURN_IF_ERROR(RecordedFailure());
    for (int r = 0; r < world; ++r) {
      if (seen[r]) continue;
      ASSIGN_OR_RETURN(std::optional<std::string> claim, store_.Get(prefix_ + "rank/" + std::to_string(r)));
      if (!claim) continue;
      const int w = ClaimWorld(*claim);
      if (w != world) return r < me ? disagree(r, w, me, world) : disagree(me, world, r, w);
      seen[r] = true;
    }
    // A rank that believes the world is larger than this one does.
    ASSIGN_OR_RETURN(std::optional<std::string> beyond, store_.Get(prefix_ + "rank/" + std::to_string(world)));
    if (beyond) return disagree(me, world, world, ClaimWorld(*beyond));
    if (std::all_of(seen.begin(), seen.end(), [](bool b) { return b; })) return Status::OK();
    if (Clock::now() >= deadline) break;
    poller.Sleep();
  }
  std::string list;
  for (int r = 0; r < world; ++r) {
    if (!seen[r]) list += (list.empty() ? "" : ", ") + std::to_string(r);
  }
  return Status::DeadlineExceeded("rendezvous timed out after " + std::to_string(config_.timeout.count()) +
                                  " ms: rank(s) " + list + " of " + std::to_string(world) + " never arrived (" +
                                  where_ + ")");
}

StatusOr<std::vector<std::string>> Rendezvous::AllGather(const std::string& name, const std::string& mine,
                                                         Deadline deadline) {
  const int world = config_.world_size;
  const std::string base = prefix_ + name + "/";
  ASSIGN_OR_RETURN(bool created, store_.CreateKey(base + std::to_string(config_.rank), mine));
  if (!created) {
    return Fail(Status::AlreadyExists("rendezvous: '" + base + std::to_string(config_.rank) + "' exists already in " +
                                      where_));
  }
  std::vector<std::string> out(world);
  std::vector<bool> seen(world, false);
  out[config_.rank] = mine;
  seen[config_.rank] = true;
  Poller poller;
  while (true) {
    RETURN_IF_ERROR(RecordedFailure());
    for (int r = 0; r < world; ++r) {
      if (seen[r]) continue;
      ASSIGN_OR_RETURN(std::optional<std::string> v, store_.Get(base + std::to_string(r)));
      if (!v) continue;
      out[r] = std::move(*v);
      seen[r] = true;
    }
    if (std::all_of(seen.begin(), seen.end(), [](bool b) { return b; })) return out;
    if (Clock::now() >= deadline) break;
    poller.Sleep();
  }
  std::string list;
  for (int r = 0; r < world; ++r) {
    if (!seen[r]) list += (list.empty() ? "" : ", ") + std::to_string(r);
  }
  return Status::DeadlineExceeded("rendezvous timed out after " + std::to_string(config_.timeout.count()) +
                                  " ms: rank(s) " + list + " of " + std::to_string(world) +
                                  " arrived but never published their " + name + " (died?) (" + where_ + ")");
}

}  // namespace ckptdb
