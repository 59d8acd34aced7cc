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
//   CKPTDB_LAUNCH_ID                   this launch of the job (ckptdb-launch sets a fresh
//     or TORCHELASTIC_RUN_ID           one per launch; torchrun's run id is used, with
//        [+ TORCHELASTIC_RESTART_COUNT] its restart count, when CKPTDB_LAUNCH_ID is unset)
//   CKPTDB_BIND_ADDRESS                address this rank listens on and advertises; default:
//                                      the address peers on other hosts are most likely to
//                                      reach (below)
//   CKPTDB_SOCKET_IFNAME               network interface whose address to listen on (as
//                                      GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME)
//   MASTER_ADDR                        without a redis:// rendezvous: the host whose route
//                                      picks the default address (torchrun sets it)
//   CKPTDB_TIMEOUT_MS                  bound on the rendezvous and every collective
//                                      (default 60000)
#ifndef CKPTDB_DISTRIBUTED_H_
#define CKPTDB_DISTRIBUTED_H_

#include <chrono>
#include <memory>
#include <string>

#include "ckptdb/communicator.h"
#include "ckptdb/rendezvous_store.h"
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
  // Tells launches of one job apart: the ranks of a launch only ever meet
  // ranks with the same launch id, and keys of other launches in the
  // rendezvous are never read. Empty: rank 0 stands for the launch (see
  // ConnectGloo).
  std::string launch_id;
  // The address this rank's TCP listener binds to and advertises: a host
  // name or a numeric address of one of this host's interfaces. Empty (the
  // default): an address of `socket_ifname` when set; else the address this
  // host uses to reach the rendezvous host (the redis:// server, else
  // `route_host`), as the kernel routes to it; else the first address this
  // host's name resolves to that is not loopback; else the default route's
  // source address; else this host's only non-loopback address; else
  // 127.0.0.1. Host names that resolve to loopback (127.0.1.1 in Debian's
  // /etc/hosts, 127.0.0.1 in many images) or not at all need no setting.
  // A job whose ranks span hosts (networks) while some rank listens on
  // loopback fails on every rank, naming those ranks, their hosts and the
  // settings that fix it.
  std::string bind_address;
  // A network interface (eth0, ib0): its address is the default listen
  // address (IPv4 first). CKPTDB_SOCKET_IFNAME.
  std::string socket_ifname;
  // Without a redis:// rendezvous: a host every rank reaches, whose route
  // picks the default listen address (MASTER_ADDR; the Python package
  // passes torchrun's store host).
  std::string route_host;
  // Bounds the rendezvous (waiting for every rank to arrive) and every
  // collective: a dead or hung peer becomes an error, never a hang.
  std::chrono::milliseconds timeout{60000};

  // Reads the variables above. InvalidArgument naming the variable when one
  // is missing, malformed or contradicts another (CKPTDB_RANK=1 with RANK=2).
  static StatusOr<DistributedConfig> FromEnvironment();
  // Checks ranges, the rendezvous URI, and that job_id is not empty (it
  // does not resolve bind_address: ConnectGloo does).
  Status Validate() const;
};

// Joins this rank to its job over TCP (gloo), after all ranks arrived at
// the rendezvous. Two phases, each bounded by config.timeout
// (plus a small constant), so a call returns within about twice it:
//   1. The rendezvous: every rank claims its rank id under the job's keys
//      and waits for every rank of its world; the ranks exchange addresses.
//      DeadlineExceeded naming the missing ranks when some never arrive.
//      Every call to the rendezvous store waits only for what is left of
//      the phase (a redis:// server that stops answering fails the call at
//      the deadline). Ranks that disagree on the world size fail at once, on
//      every rank that sees it, naming it ("rank 0 says world size 5, rank 2
//      says world size 4"); so do two processes given one rank id ("two
//      processes claim rank 2 ...", rank 0 included). A rank that finds such
//      a problem records it in the rendezvous, and every rank still waiting
//      there fails with it.
//   2. Connecting, all at once: rank 0 to every rank and every rank to rank
//      0 (a star: rank 0 is the protocols' default coordinator).
//      DeadlineExceeded (or Unavailable) naming the peers that did not
//      connect (a rank that died after the rendezvous).
// Connections on demand: no other connection is made until the first
// rooted call (Broadcast, Gather, Scatter) whose root is another rank R;
// then R connects to every rank, each rank's address relayed by rank 0
// within that call (a rank R cannot reach is lost to it, as a rank that
// died). Point-to-point messages go over these connections only (between a
// rank and rank 0, or the root of an earlier rooted call:
// FailedPrecondition otherwise); AllGather and Barrier go through rank 0. So
// a rank other than rank 0 holds one connection per coordinator it used
// (stats().peers), not W-1.
// The rendezvous goes through rank 0 too: it alone reads every rank's
// claim, card and address and answers each rank under a key of its own, so
// what a rank other than 0 reads from the rendezvous store does not grow
// with the world size (rank 0's: linear in it).
// A rank that joins after the others formed their job is not seen by them.
//
// Launches. With a launch id, the ranks of one launch only ever form a job
// together: every key lives under the job id, the launch id, and a random
// nonce that rank 0 draws and the others read. Keys that a finished or
// killed launch left in the rendezvous are never reused: a launch with a new
// launch id (ckptdb-launch, torchrun) does not see them; a launch with the
// same job id and launch id (or none) finds every rank id claimed, and each
// of its ranks fails with AlreadyExists, "two processes claim rank R of job
// ... on rendezvous ...", naming the process that claimed it first and
// saying what to do (remove the directory, or the Redis keys, or use a new
// CKPTDB_JOB_ID).
// Two launches with one job id and no launch id on one rendezvous at the
// same time cannot be told apart (a process of one is indistinguishable
// from the same rank of the other). A collision is caught where it is seen
// (a rank that finds its rank id claimed, rank 0 included, records it, and
// every rank still in ConnectGloo fails with that), but processes
// that start late can find a job of mixed launches already formed: in a
// test of two 4-rank launches started at once on 2 cores, about 2 trials
// in 100 (measured before a losing claim was recorded at once; not
// measured since). Give every launch a launch id (or a job id of its own).
// torchrun's TORCHELASTIC_RUN_ID is used unless it is "none"; its restart
// count is each node's own, so across nodes set CKPTDB_LAUNCH_ID to a value
// every node shares for the launch.
//
// Before the rendezvous, the listen address is chosen (see
// DistributedConfig::bind_address): a bind_address that does not resolve or
// is not an address of this host, or a socket_ifname that names no
// interface with an address here, is InvalidArgument naming it (Unavailable
// when the resolver failed temporarily). The ranks publish their addresses
// with their networks at the rendezvous; when the job spans hosts and a rank
// listens on loopback, every rank fails alike with InvalidArgument naming
// that rank, its host, its address and CKPTDB_SOCKET_IFNAME and
// CKPTDB_BIND_ADDRESS (never a bare "connection refused").
// Open files: rank 0 holds a connection (a descriptor) to every other rank,
// and so does any rank from its first rooted call as root. After the
// rendezvous every rank raises its process's soft limit of open files
// (RLIMIT_NOFILE) to W - 1 + 256 where it is lower, up to the hard limit
// (nodes often start processes at 1,024 under a far higher hard limit);
// when rank 0's hard limit leaves fewer than 64 beside its connections,
// every rank fails alike with FailedPrecondition naming rank 0's limit and
// how to raise it, before any rank connects. Connections are made on at
// most 64 threads at once, and on fewer where no more tasks may be started
// (a container's or a cgroup's limit): connecting takes about one timeout,
// not one per peer.
// SIGPIPE: where the process left it at its default action, the first call
// sets it to ignored, so that a peer that dies turns into an error on every
// survivor instead of killing them (a handler the process installed, or
// SIG_IGN, is left alone).
StatusOr<std::unique_ptr<Communicator>> ConnectGloo(const DistributedConfig& config);

// The same through a rendezvous store the application brings (for example
// PyTorch's c10d store, adapted by the Python package): `store` takes the
// place of config.rendezvous, which then only names the store in messages
// (any non-empty text, e.g. "torch.distributed store"). Every rank of the
// job must use the same store; the store is not owned and only used during
// the call.
StatusOr<std::unique_ptr<Communicator>> ConnectGloo(const DistributedConfig& config, RendezvousStore& store);

}  // namespace ckptdb

#endif  // CKPTDB_DISTRIBUTED_H_
