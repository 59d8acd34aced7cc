// How the ranks of a job meet before they connect (ConnectGloo), every wait
// bounded by a deadline.
//
// Under the job's key prefix in the RendezvousStore each rank claims its
// rank id ("rank/R", holding its world size, pid and host), then waits until
// every rank of its world has claimed one, checking as claims appear:
//   - a rank id claimed twice: "two processes claim rank R of job ...";
//   - a claim whose world size differs, or a claim of rank W in a world of
//     W: "... rank A says world size X, rank B says Y".
// A rank that finds a problem also records it under "failed", and every
// rank still waiting in the rendezvous fails with it at once, instead of at
// the deadline. Ranks then exchange values (their TCP addresses) the same
// way.
#ifndef CKPTDB_SRC_RENDEZVOUS_H_
#define CKPTDB_SRC_RENDEZVOUS_H_

#include <chrono>
#include <string>
#include <vector>

#include "ckptdb/distributed.h"
#include "ckptdb/status.h"
#include "rendezvous_store.h"

namespace ckptdb {

class Rendezvous {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  // `prefix`: where this job's keys live in `store` (ends with '/');
  // `where`: the job and rendezvous, for messages. The store must outlive
  // this object.
  Rendezvous(RendezvousStore& store, const DistributedConfig& config, std::string prefix, std::string where);

  // Claims this rank and waits until every rank of the world has claimed
  // one and all agree (see above). DeadlineExceeded naming the ranks that
  // never arrived.
  Status Join(Deadline deadline);

  // Publishes `mine` under `name` and returns every rank's value, indexed
  // by rank, once all are there.
  StatusOr<std::vector<std::string>> AllGather(const std::string& name, const std::string& mine, Deadline deadline);

  // Records `st` as this job's failure (when none is recorded yet), so that
  // ranks waiting in the rendezvous fail with it. Returns `st`.
  Status Fail(const Status& st);

 private:
  // The recorded failure, if any (OK otherwise).
  Status RecordedFailure();

  RendezvousStore& store_;
  const DistributedConfig config_;
  const std::string prefix_;
  const std::string where_;
};

}  // namespace ckptdb

#endif  // CKPTDB_SRC_RENDEZVOUS_H_
