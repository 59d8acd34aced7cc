// Save planning: what this rank contributes to a step's metadata and which
// pieces it writes, and how the coordinator-independent merge of every
// rank's plan yields the same StepMetadata on every rank.
#ifndef CKPTDB_SRC_PLANNER_H_
#define CKPTDB_SRC_PLANNER_H_

#include <string>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/state_dict.h"
#include "ckptdb/storage.h"

namespace ckptdb {

struct LocalPlan {
  // Every entry of the state dict, in order, with only the pieces this rank
  // writes: tensors and bytes on the coordinator, local shards on every rank.
  std::vector<EntryMetadata> entries;
  // The pieces this rank writes, with their bytes; keys {rank, 0..n-1}.
  std::vector<WriteItem> items;
};

// InvalidArgument naming the FQN for an entry that cannot be saved (a shard
// outside its global shape, ...). CUDA tensors get a WriteItem::source;
// their devices were checked by the caller (Save) before planning.
StatusOr<LocalPlan> PlanLocal(const StateDict& state_dict, int rank, int coordinator_rank);

// The serialized plan (or planning error) that ranks all-gather.
std::string EncodeLocalPlan(const StatusOr<LocalPlan>& plan);

// Merges every rank's encoded plan (indexed by rank) into the step's
// metadata, without storage fields (chunking, stored sizes) yet. Every rank
// gets the same result: a checkpoint error "failed to plan the save" naming
// the ranks whose planning failed, or InvalidArgument for plans that disagree
// (different FQNs, kinds, dtypes or shapes; shards that overlap or leave
// holes).
StatusOr<StepMetadata> MergePlans(const std::vector<std::string>& encoded_plans, int coordinator_rank);

// What MergePlans made, out of the metadata a save completed from it: the
// same step fields MergePlans sets, entries and pieces in the same order,
// each piece with only its planned fields (region, key, logical bytes), none
// of what the save added (storage fields, step, save id, metrics...).
// Taken by value: a caller done with `saved` moves it in, and each piece is
// cut down where it lies (a coordinator of thousands of ranks holds every
// piece of the step once, not twice).
StepMetadata PlannedPart(StepMetadata saved);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_PLANNER_H_
