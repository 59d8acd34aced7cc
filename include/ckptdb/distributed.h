// Joining the ranks of a job: configuration (from the environment or
// explicit) and the gloo-over-TCP communicator the protocols run on.
//
// Environment (what ckptdb-launch sets; torchrun-style names are accepted
// too, and must agree when both are set):
//   CKPTDB_RANK        or RANK         this process's rank, 0 <= rank < world
//   CKPTDB_WORLD_SIZE  or WORLD_SIZE   number of ranks
//   CKPTDB_LOCAL_RANK  or LOCAL_RANK   rank on this host (the CUDA device), default = rank
//   CKPTDB_RENDEZVOUS                  file:///shared/dir  or  redis://host:port
//   CKPTDB_JOB_ID                      prefix that keeps jobs sharing a rendezvous apart
//   CKPTDB_BIND_ADDRESS                address this rank listens on (default 127.0.0.1;
//                                      set it to a reachable address across hosts)
//   CKPTDB_TIMEOUT_MS                  bound on the rendezvous and every collective
//                                      (default 60000)
#ifndef CKPTDB_DISTRIBUTED_H_
#define CKPTDB_DISTRIBUTED_H_

#include <chrono>
#include <memory>
#include <string>

#include "ckptdb/communicator.h"
#include "ckptdb/status.h"

namespace ckptdb {

struct DistributedConfig {
  int rank = -1;
  int world_size = -1;
  int local_rank = -1;  // -1: same as rank
  // "file:///path/to/dir" (a directory every rank can reach; created when
  // missing) or "redis://host:port".
  std::string rendezvous;
  // Keys of this job in the rendezvous store live under this prefix; two jobs
  // sharing a store must use different ids.
  std::string job_id = "ckptdb";
  // The address this rank's TCP listener binds to and advertises: a host
  // name or a numeric address of one of this host's interfaces. Must not be
  // empty.
  std::string bind_address = "127.0.0.1";
  // Bounds the rendezvous (waiting for every rank to arrive) and every
  // collective: a dead or hung peer becomes an error, never a hang.
  std::chrono::milliseconds timeout{60000};

  // Reads the variables above. InvalidArgument naming the variable when one
  // is missing, malformed or contradicts another (CKPTDB_RANK=1 with RANK=2).
  static StatusOr<DistributedConfig> FromEnvironment();
  // Checks ranges, the rendezvous URI, and that job_id and bind_address are
  // not empty (it does not resolve bind_address: ConnectGloo does).
  Status Validate() const;
};

// Connects this rank to every other rank over TCP (gloo), after all ranks
// arrived at the rendezvous. DeadlineExceeded naming the missing ranks when
// some never arrive within config.timeout. Before the rendezvous,
// config.bind_address is resolved and bound once: InvalidArgument naming the
// address (and CKPTDB_BIND_ADDRESS) when it does not resolve or is not an
// address of this host (Unavailable when the resolver failed temporarily).
// SIGPIPE: where the process left it at its default action, the first call
// sets it to ignored, so that a peer that dies turns into an error on every
// survivor instead of killing them (a handler the process installed, or
// SIG_IGN, is left alone).
StatusOr<std::unique_ptr<Communicator>> ConnectGloo(const DistributedConfig& config);

}  // namespace ckptdb

#endif  // CKPTDB_DISTRIBUTED_H_
