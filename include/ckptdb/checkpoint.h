// Save and Load: the checkpoint protocol (SPMD: every rank calls them).
//
// Save (see src/README.md, "How it works", and proto/FORMAT.md):
//   1. Every rank plans its local entries (a CUDA device this process cannot
//      use is its planning error); the plans are gathered to the
//      coordinator, which merges them into the step's metadata. An invalid
//      state dict, or a rank whose plan did not come ("Failed to exchange
//      plans"), fails every rank alike ("failed to plan the save", or
//      "invalid state dict" when the ranks' plans disagree: the coordinator's
//      verdict travels with the prepare report) before storage is touched.
//      Plan caching: a rank whose plan is unchanged since the previous
//      successful save through the same communicator sends a 16-byte
//      fingerprint instead, and when every plan is unchanged the coordinator
//      reuses its merged metadata (src/checkpoint/plan_cache.h); after a
//      failed save every plan is sent whole again.
//   2. The coordinator calls writer.Prepare and writer.FindReusable and
//      sends each rank the outcome with the stored pieces its own new pieces
//      may share chunks with (deduplication); on failure every rank returns
//      "failed to prepare storage".
//   3. Every rank writes the pieces it owns (replicated tensors and bytes:
//      the coordinator; shards: the rank that holds them), except chunks
//      equal to their candidate's, which it refers to. CUDA tensors are
//      copied off the device chunk by chunk, into pinned buffers (staging.h),
//      by the workers that checksum and compress them, while earlier chunks
//      are appended to the SST file. Statuses are gathered to the
//      coordinator; a rank whose status does not come within the timeout
//      (it died or hangs) counts as failed.
//   4. The coordinator fails the save ("Failed to write data") when any rank
//      failed, else calls writer.Finish ("Failed to finish checkpoint" on
//      error). On any failure it calls writer.Abort.
//   5. The outcome is broadcast: every rank returns an equal Status, a
//      checkpoint error naming each failed rank with its own status.
// A rank other than the coordinator exchanges messages with the coordinator
// only, and their size does not grow with the world size (communicator.h,
// rooted calls); it waits for the coordinator's answers up to twice the
// communicator's timeout.
// Atomicity: a step is visible when, and only when, Finish committed its
// metadata. A crash at any point leaves every earlier step intact and no
// half step visible.
//
// Load:
//   1. Every rank reads the step's metadata (StorageReader::ReadMetadataOf
//      with the FQNs it loads: every entry's name, kind, dtype and shape,
//      and the pieces of those entries only; a directory store of format 6
//      reads no other entry's pieces record) and checks (plans) its whole
//      target state dict against it, changing nothing. A step's metadata
//      that cannot be read (DataLoss naming the entry whose pieces are
//      damaged, when one of the loaded entries' is) fails like a check. The verdicts meet at
//      the coordinator, which tells every rank, before any rank reads: when any rank's check failed,
//      every rank returns the same checkpoint error ("Failed to load
//      checkpoint (nothing was read: ...)") naming each failed rank with its
//      own error, and no rank's target has changed.
//   2. Every rank reads only the chunks that cover its target regions (in
//      any sharding: the saved and target layouts need not match), and
//      copies them into the target memory (CUDA targets: each verified chunk
//      through a pinned buffer onto the device as it is read; a strided or
//      converted CUDA target is filled in host memory first, then copied
//      over). Statuses meet at the coordinator; every rank fails alike.
#ifndef CKPTDB_CHECKPOINT_H_
#define CKPTDB_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ckptdb/communicator.h"
#include "ckptdb/state_dict.h"
#include "ckptdb/status.h"
#include "ckptdb/storage.h"

namespace ckptdb {

// Steps are numbered 0 .. kMaxStep.
inline constexpr int64_t kMaxStep = INT64_MAX - 1;

struct SaveOptions {
  // The step number to commit; required, in [0, kMaxStep].
  int64_t step = -1;
  // The rank that prepares, finishes and commits. Must be a valid rank.
  int coordinator_rank = 0;
  // Run in this process alone (world size 1) without collectives.
  bool no_dist = false;
  // The ranks' collectives; required unless no_dist. Not owned.
  Communicator* communicator = nullptr;
  // What the step records about itself, committed in the same batch as the
  // step: metrics (name -> value, e.g. {"val_loss", 2.31}), which retention
  // can keep the best steps by (RetentionPolicy::keep_best) and StepInfo,
  // `ckptdb ls --sort` and StoreReader::BestStep read; and a free-form note
  // (the run's config as JSON, a commit id). Only the coordinator's are
  // stored. Metric names: ValidateMetricName; values finite; the note at
  // most kMaxNoteBytes (InvalidArgument on every rank otherwise, before
  // anything is written).
  std::map<std::string, double> metrics;
  std::string note;
  // Records to store with the step, by name (StepMetadata::annotations):
  // what an application needs to give back besides the entries, e.g. the DCP
  // adaptor's copy of DCP's own metadata. Stored as they are, never
  // interpreted; only the coordinator's are stored. Names must not be empty
  // (InvalidArgument). They add to the step's metadata record, which every
  // load reads whole: keep them small (kilobytes, not megabytes).
  std::map<std::string, std::string> annotations;
};

// REQUIRES: every rank of the communicator calls Save with the same options
// (step, coordinator) and state dicts with the same FQNs, kinds and global
// shapes; no tensor of the state dict changes until Save returns (a
// bucket's upload sends host tensors' bytes from where they lie: a change
// fails the save, or, where the server checks no part checksum, commits a
// chunk that loads refuse as DataLoss; AsyncSaver copies them first).
// Returns OK on every rank, or an equal error on every rank.
Status Save(const StateDict& state_dict, StorageWriter& writer, const SaveOptions& options);

struct LoadOptions {
  // The step to load; required, in [0, kMaxStep].
  int64_t step = -1;
  int coordinator_rank = 0;
  bool no_dist = false;
  Communicator* communicator = nullptr;
  // Load only these FQNs of the target; empty: every entry of the target.
  // Each must name an entry of the target, once (InvalidArgument otherwise);
  // the target's other entries are left untouched and nothing of them is read.
  std::vector<std::string> keys;
  // false (default): every target entry must be in the step (NotFound).
  // true: target entries the step lacks are left untouched and listed in
  // LoadStats::missing.
  bool allow_missing = false;
  // false (default): a target whose dtype differs from the saved one is an
  // error. true: values are converted to the target's dtype on the way in
  // (ConvertElements: round to nearest even, saturating integers).
  bool convert_dtype = false;
};

// What a load read, on this rank.
struct LoadStats {
  uint64_t chunks_read = 0;
  uint64_t chunks_landed = 0;  // of chunks_read: ReadStats::chunks_landed
  uint64_t stored_bytes_read = 0;
  // The raw (decoded) bytes of the chunks read, whole: raw_bytes_read /
  // bytes_copied is the load's read amplification (1 when every chunk read
  // lies wholly in the target).
  uint64_t raw_bytes_read = 0;
  uint64_t bytes_copied = 0;  // bytes written into the target tensors and bytes entries
  std::vector<std::string> missing;  // target FQNs not in the step (allow_missing)
};

// Fills `target` in place. Every FQN of `target` (or of options.keys) must be
// in the step, with the same kind (a tensor and a sharded tensor are
// interchangeable), dtype and global shape; each target tensor or shard is
// filled from whichever saved pieces overlap it, reading only the chunks that
// hold the overlap. Bytes entries are replaced. Entries of the step that the
// target does not name (or that options.keys leaves out) are not read, their
// metadata's pieces included (StorageReader::ReadMetadataOf), so the damage
// of another entry's records does not fail this load. The whole target is checked against the
// step before anything is read, on every rank of the job: a mismatch on any
// rank leaves every rank's target untouched (and fails every rank alike); a
// failure while reading (I/O, corruption) may leave targets partly filled.
Status Load(StateDict& target, StorageReader& reader, const LoadOptions& options, LoadStats* stats = nullptr);

// Reads every entry of a step (or only `fqns`, when not empty; each named
// once, InvalidArgument otherwise) into new CPU tensors, sharded tensors
// assembled whole. Local: no collectives. With `fqns`, only their metadata's
// pieces are read (ReadMetadataOf).
StatusOr<StateDict> LoadWhole(StorageReader& reader, int64_t step, const std::vector<std::string>& fqns = {});

// Validates a step number ("step -3 is out of range [0, 9223372036854775806]").
Status ValidateStep(int64_t step);

}  // namespace ckptdb

#endif  // CKPTDB_CHECKPOINT_H_
