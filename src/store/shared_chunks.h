// Deleting steps whose chunks other steps share (deduplication, store
// format 3): which data key ranges a delete may drop. A pure function of
// what the store records, so that it is tested apart from RocksDB.
//
// The rule (proto/FORMAT.md, "Deleting shared chunks"): a delete drops every
// data key of the deleted steps (all their save attempts), and of the save
// attempts they referred to that no committed step owns any more, except the
// chunks that a step which stays refers to. Nothing else is ever dropped, so
// every step that stays keeps every chunk it refers to.
#ifndef CKPTDB_SRC_SHARED_CHUNKS_H_
#define CKPTDB_SRC_SHARED_CHUNKS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/status.h"
#include "ckptdb/storage.h"
#include "format/step_records.h"

namespace ckptdb {

// Deduplication's offer (StorageWriter::FindReusable): for each piece of
// `planned` whose entry has the same kind, dtype and shape in `base` (the
// store's latest committed step) and whose region `base` stored with chunk
// hashes, that stored piece. Every store offers exactly these. The
// candidates' pieces are moved out of `base` (a step of thousands of ranks
// holds a piece per rank and entry: copying them doubled the memory).
std::vector<ReuseCandidate> ReuseCandidatesFrom(StepMetadata base, const StepMetadata& planned);

// [begin, end) of data keys.
using KeyRange = std::pair<std::string, std::string>;

struct SharedChunkView {
  // Every committed step that stays after the delete (the step being
  // committed included) -> the saves it refers to (its R record); nullopt
  // when that record and the step's metadata are both unreadable.
  std::map<int64_t, std::optional<std::vector<SaveRef>>> kept_refs;
  // The saves each deleted step refers to (nullopt: unknown).
  std::map<int64_t, std::optional<std::vector<SaveRef>>> deleted_refs;
  // Whether a step that stays committed owns save `save_id` of step `step`
  // (it is that step's save; a step whose save id cannot be read owns every
  // save of its number).
  std::function<bool(const SaveRef& save)> kept_owns;
  // The metadata of a step that stays (to find its exact chunk references).
  std::function<StatusOr<StepMetadata>(int64_t step)> metadata_of;
};

// The key ranges that deleting `deleted` drops, sorted and disjoint, with
// the chunks that kept steps refer to cut out. When a kept step's metadata is
// unreadable, the whole saves its references record names are kept. DataLoss
// naming the step when a kept step's references cannot be known at all (its
// references record and its metadata both damaged): deleting anything then
// could drop what it uses, and keeping the data would leak it.
StatusOr<std::vector<KeyRange>> DataRangesToDrop(const std::set<int64_t>& deleted, const SharedChunkView& view);

// The saves that committed steps refer to and that no committed step owns
// (chunks deleted steps left for the steps that share them), each with the
// data key ranges of the chunks the committed steps use in it, sorted and
// merged. Every other key of such a save was range-deleted by the delete
// that dropped its owner (DataRangesToDrop), so it is unused: what
// StoreWriter::ReclaimSpace may rewrite away. `view.kept_refs` holds every
// committed step (deleted_refs is not used). A save that a step whose
// metadata is unreadable refers to is left out (which of its chunks that
// step uses is unknown). DataLoss naming the step, as DataRangesToDrop,
// when a committed step's references cannot be known at all.
StatusOr<std::map<SaveRef, std::vector<KeyRange>>> UsedRangesOfSharedSaves(const SharedChunkView& view);

// The data keys of the chunks `m`'s references point to, within the saves
// of `steps`, as ranges (unsorted).
void AddReferencedRanges(const StepMetadata& m, const std::set<int64_t>& steps, std::vector<KeyRange>* out);

// `ranges` sorted and merged where they touch or overlap.
std::vector<KeyRange> MergeRanges(std::vector<KeyRange> ranges);
// What of `from` (merged) lies outside `cut` (merged).
std::vector<KeyRange> SubtractRanges(const std::vector<KeyRange>& from, const std::vector<KeyRange>& cut);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_SHARED_CHUNKS_H_
