// Communicator: the few collectives the save and load protocols need.
//
// Only small control messages travel through it (statuses, plans, metadata),
// never tensor bytes. Every call is bounded by the implementation's timeout:
// a peer that dies or hangs becomes a DeadlineExceeded or Unavailable status,
// never a hang. All ranks must make the same sequence of calls.
//
// Thread safety: one collective at a time per Communicator.
#ifndef CKPTDB_COMMUNICATOR_H_
#define CKPTDB_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ckptdb/status.h"

namespace ckptdb {

// Time and traffic spent in collectives, for benchmarks.
struct CollectiveStats {
  uint64_t calls = 0;
  uint64_t bytes_sent = 0;  // payload this rank contributed
  double seconds = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // On return, every rank's *data equals the root's.
  virtual Status Broadcast(std::string* data, int root) = 0;
  // On the root, *out holds every rank's `mine`, indexed by rank; on other
  // ranks *out is left empty.
  virtual Status Gather(const std::string& mine, int root, std::vector<std::string>* out) = 0;
  // On every rank, *out holds every rank's `mine`, indexed by rank.
  virtual Status AllGather(const std::string& mine, std::vector<std::string>* out) = 0;
  virtual Status Barrier() = 0;

  // Accumulated since the communicator was made.
  virtual CollectiveStats stats() const { return {}; }
};

// A communicator of world size 1 (rank 0), used for `no_dist` runs.
std::unique_ptr<Communicator> NewLocalCommunicator();

}  // namespace ckptdb

#endif  // CKPTDB_COMMUNICATOR_H_
