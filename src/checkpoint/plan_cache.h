// Plan caching across the saves of one job. Training saves the same state
// dict layout again and again (same entries, dtypes, shapes, shardings): a
// rank whose plan is unchanged since this job's previous successful save
// through the same communicator (and coordinator) sends a 16-byte
// fingerprint of it (XXH3-128) instead of the plan, and the coordinator,
// when every rank's plan is unchanged, reuses the metadata it merged then
// instead of merging again. A plan changed on any rank is sent whole, and
// then every plan is merged anew.
//
// Both sides remember only what a save that succeeded used: each rank the
// fingerprint of the plan it sent, the coordinator every rank's plan and the
// merged metadata, both taken up when the save's outcome is success (the
// coordinator decides it before any rank learns it). After a save that
// failed (on every rank alike) the ranks hold nothing, and the next save
// sends every plan whole; so a rank only ever refers to a plan the
// coordinator holds. Should one not be held all the same, the coordinator
// names that rank in the plans' verdict, as for a plan that did not come:
// every rank fails alike and nothing is written.
#ifndef CKPTDB_SRC_PLAN_CACHE_H_
#define CKPTDB_SRC_PLAN_CACHE_H_

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ckptdb/communicator.h"
#include "ckptdb/metadata.h"
#include "ckptdb/status.h"

namespace ckptdb {

class PlanCache : public Communicator::ProtocolState {
 public:
  // The cache of `comm`'s connection, made on first use.
  static PlanCache& Of(Communicator& comm);

  // Every rank: what to send the coordinator for this rank's `plan` (its
  // encoding): the plan, or a reference to the one it sent last time.
  std::string Outgoing(const std::string& plan, int coordinator);

  // The coordinator: turns every rank's part (as Outgoing made it; parts of
  // ranks in `missing` are skipped) into that rank's plan. A reference the
  // coordinator does not hold goes into *failures. Returns the metadata
  // merged from these same plans by the last successful save when every
  // part was a reference to it (nullopt otherwise: merge them).
  std::optional<StepMetadata> Resolve(std::vector<std::string>* parts, int coordinator,
                                      const std::map<int, Status>& missing, std::map<int, Status>* failures);

  // The save's outcome is success: what it used is remembered. The
  // coordinator hands over the metadata it committed: when it merged the
  // plans anew, the merged metadata it keeps is that metadata's planned part
  // (PlannedPart, planner.h), cut out of it now rather than copied when it
  // merged, so that it does not add to the save's peak memory (a
  // coordinator of thousands of ranks holds every piece of the step).
  void Succeeded(std::optional<StepMetadata> committed = std::nullopt);

  // What the last calls did, for tests and benchmarks: whether this rank
  // sent a reference; whether the coordinator reused its merged metadata.
  bool sent_reference() const;
  bool reused_merge() const;

 private:
  using Fingerprint = std::string;  // 16 bytes
  static Fingerprint Of(const std::string& plan);

  mutable std::mutex mu_;
  // This rank: the plan of the last successful save, and this save's.
  std::optional<std::pair<int, Fingerprint>> sent_, pending_sent_;
  bool sent_reference_ = false;
  // The coordinator: the plans and merged metadata of the last successful
  // save it coordinated, and this save's.
  struct Held {
    int coordinator = -1;
    std::vector<std::string> plans;
    std::vector<Fingerprint> fingerprints;
    std::shared_ptr<const StepMetadata> merged;
  };
  std::optional<Held> held_, pending_held_;
  bool reused_merge_ = false;
};

}  // namespace ckptdb

#endif  // CKPTDB_SRC_PLAN_CACHE_H_
