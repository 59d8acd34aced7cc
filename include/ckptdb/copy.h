// Copying committed steps from one store to another: a directory to a
// bucket (a backup, or a move to another cluster), a bucket to a directory,
// or any other pair (`ckptdb cp`, ckptdb.copy in Python).
#ifndef CKPTDB_COPY_H_
#define CKPTDB_COPY_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ckptdb/rocksdb_store.h"
#include "ckptdb/status.h"

namespace ckptdb {

struct CopyOptions {
  // The steps to copy, each committed in the source; empty: every step.
  // Copied oldest first whatever the order given, so that the destination's
  // deduplication (against its latest step) stores unchanged chunks once.
  std::vector<int64_t> steps;
  // Also point each tag of the source that names a copied step at the same
  // step at the destination (moving a tag of that name there).
  bool tags = false;
  // Say what would be copied; write nothing.
  bool dry_run = false;
  // How the destination stores the steps (chunk size, compression,
  // deduplication...). Its retention is applied by every commit, as in a save.
  StoreOptions destination;
  // Called after each step with what happened to it.
  std::function<void(const struct CopiedStep& step, size_t index, size_t count)> progress;
};

struct CopiedStep {
  int64_t step = 0;
  enum class Outcome {
    kCopied,   // committed at the destination
    kPresent,  // already there with the same entries, byte for byte: left as it was
    kWouldCopy,  // dry_run
  } outcome = Outcome::kCopied;
  uint64_t logical_bytes = 0;  // the step's tensor and bytes entries
  uint64_t stored_bytes = 0;   // what it added at the destination (StepInfo.stored_bytes)
  std::vector<std::string> tags;  // tags pointed at it at the destination
};

// Copies `options.steps` (or all) of the store at `from` into the store at
// `to` (each a directory or s3://BUCKET/PREFIX; the destination is made when
// missing). Each step is read with every chunk's checksum verified and
// committed at the destination atomically under the same number, with its
// entries (kinds, dtypes, shapes, bytes entries with their encodings), its
// metrics, note and annotations; a sharded entry is stored as one shard
// covering the whole tensor (loads reshard as usual); the step's creation
// time is the copy's. A step holds its whole state in memory while it is
// copied. Errors, naming the step: NotFound (not in the source),
// AlreadyExists (the destination has that step with other content; the
// steps before it are copied, each whole, and nothing of it is written),
// and the stores' own.
StatusOr<std::vector<CopiedStep>> CopySteps(const std::string& from, const std::string& to,
                                            const CopyOptions& options = {});

}  // namespace ckptdb

#endif  // CKPTDB_COPY_H_
