// DistributedConfig: reading and checking how this rank joins its job.
#include <cerrno>
#include <cstdlib>

#include "ckptdb/distributed.h"
#include "comm/rendezvous.h"
#include "util/status_macros.h"

namespace ckptdb {

namespace {

// A week: longer waits are meant as "forever", and would overflow clocks.
constexpr long long kMaxTimeoutMs = 7LL * 24 * 3600 * 1000;

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

StatusOr<long long> ParseInt(const char* name, const char* text) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') {
    return Status::InvalidArgument(std::string(name) + "='" + text + "' is not an integer");
  }
  return v;
}

// Reads an integer from `primary` or `alias` (they must agree when both are
// set); `*found` says whether either was.
StatusOr<int> ReadInt(const char* primary, const char* alias, bool* found) {
  const char* a = Env(primary);
  const char* b = alias ? Env(alias) : nullptr;
  *found = a != nullptr || b != nullptr;
  if (!*found) return 0;
  long long va = 0, vb = 0;
  if (a) {
    ASSIGN_OR_RETURN(va, ParseInt(primary, a));
  }
  if (b) {
    ASSIGN_OR_RETURN(vb, ParseInt(alias, b));
  }
  if (a && b && va != vb) {
    return Status::InvalidArgument(std::string(primary) + "=" + a + " contradicts " + alias + "=" + b);
  }
  long long v = a ? va : vb;
  if (v < -1 || v > 1 << 20) return Status::InvalidArgument(std::string(a ? primary : alias) + " is out of range");
  return static_cast<int>(v);
}

}  // namespace

StatusOr<DistributedConfig> DistributedConfig::FromEnvironment() {
  DistributedConfig c;
  bool found = false;
  ASSIGN_OR_RETURN(c.rank, ReadInt("CKPTDB_RANK", "RANK", &found));
  if (!found) return Status::InvalidArgument("CKPTDB_RANK (or RANK) is not set: which rank is this process?");
  ASSIGN_OR_RETURN(c.world_size, ReadInt("CKPTDB_WORLD_SIZE", "WORLD_SIZE", &found));
  if (!found) return Status::InvalidArgument("CKPTDB_WORLD_SIZE (or WORLD_SIZE) is not set");
  ASSIGN_OR_RETURN(c.local_rank, ReadInt("CKPTDB_LOCAL_RANK", "LOCAL_RANK", &found));
  if (!found) c.local_rank = -1;
  const char* rdv = Env("CKPTDB_RENDEZVOUS");
  if (rdv == nullptr) {
    return Status::InvalidArgument("CKPTDB_RENDEZVOUS is not set (file:///shared/dir or redis://host:port)");
  }
  c.rendezvous = rdv;
  if (const char* j = Env("CKPTDB_JOB_ID")) c.job_id = j;
  if (const char* l = Env("CKPTDB_LAUNCH_ID")) {
    c.launch_id = l;
  } else if (const char* run = Env("TORCHELASTIC_RUN_ID"); run != nullptr && std::string(run) != "none") {
    // torchrun keeps its run id across restarts of the workers ("none"
    // without --rdzv-id: no identity at all). Its restart count is each
    // node's own: across nodes, set CKPTDB_LAUNCH_ID (distributed.h).
    c.launch_id = std::string("torchelastic-") + run;
    if (const char* n = Env("TORCHELASTIC_RESTART_COUNT")) c.launch_id += std::string("-restart-") + n;
  }
  if (const char* b = Env("CKPTDB_BIND_ADDRESS")) c.bind_address = b;
  if (const char* i = Env("CKPTDB_SOCKET_IFNAME")) c.socket_ifname = i;
  if (const char* m = Env("MASTER_ADDR")) c.route_host = m;
  if (const char* t = Env("CKPTDB_TIMEOUT_MS")) {
    ASSIGN_OR_RETURN(long long ms, ParseInt("CKPTDB_TIMEOUT_MS", t));
    if (ms <= 0) return Status::InvalidArgument("CKPTDB_TIMEOUT_MS must be positive");
    if (ms > kMaxTimeoutMs) {
      return Status::InvalidArgument("CKPTDB_TIMEOUT_MS " + std::to_string(ms) + " is more than a week (" +
                                     std::to_string(kMaxTimeoutMs) + " ms)");
    }
    c.timeout = std::chrono::milliseconds(ms);
  }
  RETURN_IF_ERROR(c.Validate());
  return c;
}

Status DistributedConfig::Validate() const {
  RETURN_IF_ERROR(ValidateConfigExceptRendezvous(*this));
  if (rendezvous.rfind("file://", 0) != 0 && rendezvous.rfind("redis://", 0) != 0) {
    return Status::InvalidArgument("rendezvous '" + rendezvous + "' must be file:///dir or redis://host:port");
  }
  if (rendezvous == "file://") return Status::InvalidArgument("rendezvous 'file://' names no directory");
  return Status::OK();
}

Status ValidateConfigExceptRendezvous(const DistributedConfig& c) {
  const int world_size = c.world_size, rank = c.rank;
  const std::string& job_id = c.job_id;
  const std::string& launch_id = c.launch_id;
  const auto timeout = c.timeout;
  if (world_size < 1) return Status::InvalidArgument("world size " + std::to_string(world_size) + " must be at least 1");
  if (rank < 0 || rank >= world_size) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " is not in [0, " + std::to_string(world_size) +
                                   ") (world size " + std::to_string(world_size) + ")");
  }
  if (job_id.empty()) return Status::InvalidArgument("empty job id");
  // Keys are job id / launch id / ...: a '/' inside either would let two
  // different pairs share keys.
  if (job_id.find('/') != std::string::npos) {
    return Status::InvalidArgument("job id '" + job_id + "' contains '/' (CKPTDB_JOB_ID)");
  }
  if (launch_id.find('/') != std::string::npos || launch_id == "-") {
    return Status::InvalidArgument("launch id '" + launch_id + "' contains '/' or is '-' (CKPTDB_LAUNCH_ID)");
  }
  if (timeout.count() <= 0 || timeout.count() > kMaxTimeoutMs) {
    return Status::InvalidArgument("timeout " + std::to_string(timeout.count()) + " ms is not in [1, " +
                                   std::to_string(kMaxTimeoutMs) + "]");
  }
  return Status::OK();
}

}  // namespace ckptdb
