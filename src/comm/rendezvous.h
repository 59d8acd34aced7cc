// How the ranks of a job meet before they connect (ConnectGloo), every wait
// bounded by a deadline.
//
// First the launch (LaunchPrefix): the keys of a job live under
// "<job id>/<launch id>/" ("-" without a launch id). Rank 0 draws a random
// nonce and creates "launch" there, holding it; the other ranks read it. All
// further keys live under "<job id>/<launch id>/<nonce>/", so ranks only
// ever meet ranks that read the same nonce. Creating "launch" is rank 0's
// claim: when it exists already (another process given rank 0, rank 0 of
// another launch with the same job id and launch id, or of a finished or
// killed one that left its keys: they look alike), rank 0 is claimed twice,
// and fails as any rank does whose claim is taken (below), under the nonce
// it found.
//
// Under that prefix each rank claims its
// rank id ("rank/R", holding its world size, pid and host), then waits until
// every rank of its world has claimed one, checking as claims appear:
//   - a rank id claimed twice: "two processes claim rank R of job ...",
//     naming both processes, with what to do about keys left behind;
//   - a claim whose world size differs, or a claim of rank W in a world of
//     W: "... rank A says world size X, rank B says Y".
// A rank that finds a problem also records it under "failed", and every
// rank still waiting in the rendezvous fails with it at once, instead of at
// the deadline.
//
// What a rank reads does not grow with the world size, except on rank 0:
// rank 0 waits for every claim (checking each as it appears) and then
// records "joined"; another rank waits only for that (or a failure), and
// checks rank 0's claim against its own. Values (the TCP addresses) go the
// same way: every rank sends its own to rank 0 (GatherToRoot), rank 0
// answers each rank under a key of its own (ScatterFromRoot,
// ReceiveFromRoot). A rank other than 0 that reaches its deadline first
// waits a little longer (kFailureGrace) for rank 0's record of what went
// wrong, so that every rank names the same missing ranks.
#ifndef CKPTDB_SRC_RENDEZVOUS_H_
#define CKPTDB_SRC_RENDEZVOUS_H_

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "ckptdb/distributed.h"
#include "ckptdb/status.h"
#include "comm/rendezvous_store.h"

namespace ckptdb {

// DistributedConfig::Validate without the rendezvous URI check (for a
// store the application brings).
Status ValidateConfigExceptRendezvous(const DistributedConfig& config);

// The key prefix of this launch of the job (see above). `what_to_do`
// completes the refusal's message.
StatusOr<std::string> LaunchPrefix(RendezvousStore& store, const DistributedConfig& config,
                                   std::chrono::steady_clock::time_point deadline, const std::string& where,
                                   const std::string& what_to_do);

class Rendezvous {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  // `prefix`: where this launch's keys live in `store` (LaunchPrefix);
  // `where`: the job and rendezvous, and `what_to_do` about keys left
  // behind, for messages. The store must outlive this object.
  Rendezvous(RendezvousStore& store, const DistributedConfig& config, std::string prefix, std::string where,
             std::string what_to_do);

  // Claims this rank and waits until every rank of the world has claimed
  // one and all agree (see above). DeadlineExceeded naming the ranks that
  // never arrived.
  Status Join(Deadline deadline);

  // Every rank publishes `mine` under `name`; rank 0 returns every rank's
  // value, indexed by rank, once all are there (DeadlineExceeded naming the
  // ranks whose value never came, recorded as the job's failure); the
  // others return an empty vector at once.
  StatusOr<std::vector<std::string>> GatherToRoot(const std::string& name, const std::string& mine,
                                                  Deadline deadline);
  // Rank 0: publishes parts[r] for each rank r > 0 under `name`.
  Status ScatterFromRoot(const std::string& name, const std::vector<std::string>& parts);
  // A rank other than 0: waits for its part of `name` from rank 0, or the
  // job's recorded failure.
  StatusOr<std::string> ReceiveFromRoot(const std::string& name, Deadline deadline);

  // Records `st` as this job's failure (when none is recorded yet), so that
  // ranks waiting in the rendezvous fail with it. Returns `st`.
  Status Fail(const Status& st);

  // The failure recorded for this launch, OK when none.
  Status CheckNoFailure();

  // This rank's claim was taken: records and returns AlreadyExists naming
  // the rank and both processes.
  Status ClaimedTwice();

 private:
  // The recorded failure, if any (OK otherwise).
  Status RecordedFailure();

  // Polls base + "R" for every other rank R until all are there (true),
  // handing each value to `take` once and calling `check` after each round;
  // stops at the first error of either or of the store, at a recorded
  // failure, or at the deadline (false). `seen` says which ranks arrived.
  StatusOr<bool> WaitForEveryRank(const std::string& base, Deadline deadline,
                                  const std::function<Status(int rank, std::string value)>& take,
                                  const std::function<Status()>& check, std::vector<bool>* seen);
  // "1, 3": the ranks not seen.
  static std::string Missing(const std::vector<bool>& seen);
  // A rank other than 0: polls `key` until it exists (its value), a failure
  // is recorded (that failure), or the deadline plus kFailureGrace passes
  // (DeadlineExceeded saying `waiting_for`).
  StatusOr<std::string> WaitForKeyFromRoot(const std::string& key, Deadline deadline, const std::string& waiting_for);

  RendezvousStore& store_;
  const DistributedConfig config_;
  const std::string prefix_;
  const std::string where_;
  const std::string what_to_do_;
};

}  // namespace ckptdb

#endif  // CKPTDB_SRC_RENDEZVOUS_H_
