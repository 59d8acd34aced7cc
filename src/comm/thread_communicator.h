// Ranks as threads: the W ranks of one job as threads of one process, each
// with its own Communicator over one in-memory hub, to run the real save and
// load protocols at world sizes this machine could not run as processes
// (thousands), and to count what each rank sends and receives.
//
// The contract is the gloo communicator's (include/ckptdb/communicator.h):
// every call is bounded by the timeout; a rank that left the job (its
// Communicator destroyed: its thread returned early or threw) is as a closed
// connection. Rooted calls are messages between the root and each rank:
// a Gather's root reports a rank that left (Unavailable) or sent nothing
// within the timeout (DeadlineExceeded) in `missing` and skips it from then
// on; a non-root rank waits up to twice the timeout for the root's
// Broadcast or Scatter. AllGather and Barrier are rounds of every rank: one
// that left fails the others at once (Unavailable naming it), one that never
// arrives fails them after the timeout (DeadlineExceeded naming it). Ranks
// that call different collectives (or roots) at the same point get Internal.
//
// Counters (CollectiveStats, per rank) count messages as they are moved:
// rooted calls and Send/Recv message by message; AllGather as each rank
// sending its part to each other rank; Barrier as a gather and a broadcast
// of nothing. `peers` is the number of distinct ranks a rank exchanged a
// message with.
//
// Thread safety: each rank's Communicator is used by its own thread (as
// Communicator requires); the job and its counters by any thread.
#ifndef CKPTDB_SRC_COMM_THREAD_COMMUNICATOR_H_
#define CKPTDB_SRC_COMM_THREAD_COMMUNICATOR_H_

#include <chrono>
#include <functional>
#include <memory>

#include "ckptdb/communicator.h"

namespace ckptdb {

class ThreadJob {
 public:
  ThreadJob(int world_size, std::chrono::milliseconds timeout);
  ~ThreadJob();
  ThreadJob(const ThreadJob&) = delete;
  ThreadJob& operator=(const ThreadJob&) = delete;

  int world_size() const;
  // Rank `rank`'s communicator (once per rank); it must not outlive the job.
  std::unique_ptr<Communicator> Join(int rank);
  // Rank `rank`'s counters so far.
  CollectiveStats stats(int rank) const;

  struct Hub;

 private:
  std::shared_ptr<Hub> hub_;
};

// Runs fn(rank, communicator) on `world_size` threads of one job and waits
// for all. A rank whose fn throws leaves the job (the others fail as above);
// the exception is not rethrown.
void RunRanksAsThreads(ThreadJob& job, const std::function<void(int, Communicator&)>& fn);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_COMM_THREAD_COMMUNICATOR_H_
