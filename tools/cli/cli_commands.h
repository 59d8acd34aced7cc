// The `ckptdb` subcommands as functions: each does its work and writes to
// `out`, returning a Status; main (ckptdb_main.cc) only parses arguments and
// maps the Status to an exit code.
//
// Read commands take a StoreReader (a read-only view that never blocks a
// writer). Write commands (rm, gc, tag) take the store's path: they open it
// for writing, which fails with Unavailable while another process (a
// training job) holds the store, and change nothing then.
#ifndef CKPTDB_TOOLS_CLI_COMMANDS_H_
#define CKPTDB_TOOLS_CLI_COMMANDS_H_

#include <ostream>
#include <string>
#include <vector>

#include "ckptdb/rocksdb_store.h"
#include "ckptdb/status.h"
#include "cli_slice.h"

namespace ckptdb::cli {

// A step argument: a number, "latest", the name of a tag, or
// "best:METRIC[:min|max]" (the step with the smallest, or with :max the
// largest, value of METRIC: StoreReader::BestStep). A number need not be
// committed (the command that uses it says so); the others resolve to
// committed steps or NotFound.
StatusOr<int64_t> ResolveStep(StoreReader& reader, const std::string& arg);

struct LsOptions {
  bool json = false;
  // Rows sorted by this metric, smallest first (steps without it last);
  // empty: by step.
  std::string sort;
  bool reverse = false;  // largest first (by step: newest first)
};
// ls: one row per committed step, with a column per metric when the steps
// have at most kMaxMetricColumns metric names between them.
inline constexpr size_t kMaxMetricColumns = 4;
Status ListSteps(StoreReader& reader, const LsOptions& options, std::ostream& out);
// info STEP: everything the step records about itself: its summary, tags,
// every metric and the note.
Status InfoStep(StoreReader& reader, int64_t step, bool json, std::ostream& out);
// ls STEP: one row per entry of a step; with `shards`, one row per stored
// piece (shard) of each entry. Reads the step's summary, and without
// `shards` no entry's pieces when the step records each entry's piece count
// and stored bytes (EntryMetadata::recorded_totals); else one entry's pieces
// at a time.
Status ListEntries(StoreReader& reader, int64_t step, bool shards, bool json, std::ostream& out);
// info STEP FQN: one entry of a step: its kind, dtype, shape, shards, the
// ranks that wrote them, chunks (and how many are shared with earlier
// steps), bytes and bytes added. Reads only that entry's pieces.
Status InfoEntry(StoreReader& reader, int64_t step, const std::string& fqn, bool json, std::ostream& out);

struct CatOptions {
  const Slice* slice = nullptr;  // the whole entry when null
  bool raw = false;              // the bytes, row-major, instead of text
  bool json = false;
};
// cat: the values of one entry (or of a slice of it).
Status CatEntry(StoreReader& reader, int64_t step, const std::string& fqn, const CatOptions& options,
                std::ostream& out);

// info: steps, sizes, compression and RocksDB's figures.
Status Info(StoreReader& reader, bool json, std::ostream& out);

struct VerifyOptions {
  std::vector<int64_t> steps;  // empty: every committed step
  bool json = false;
  bool progress = false;  // draw a progress bar on `progress_out`
};
// verify: reads every chunk of the steps and checks it; when every step is
// verified, also every metadata, summary and tag record. Prints a report of
// every damaged entry and record; returns OK only when everything is intact,
// DataLoss otherwise.
Status Verify(StoreReader& reader, const VerifyOptions& options, std::ostream& out, std::ostream& progress_out);

// diff: entries added, removed and changed from step `a` to step `b`.
Status Diff(StoreReader& reader, int64_t a, int64_t b, bool json, std::ostream& out);

// export --format safetensors: one file holding every tensor whole, bytes
// entries in its __metadata__. Written to a temporary file and renamed, so
// `out_path` is either complete or untouched.
Status ExportSafetensors(StoreReader& reader, int64_t step, const std::string& out_path, bool json,
                         std::ostream& out);

// rm: deletes steps, all or none.
Status RemoveSteps(const std::string& store, const std::vector<std::string>& step_args, std::ostream& out);

struct GcOptions {
  RetentionPolicy policy;  // keep_tagged is always true from the command line
  bool dry_run = false;
  bool json = false;
  ReclaimOptions reclaim;  // (dry_run is taken from above)
  // Buckets: StoreOptions::abandoned_save_seconds.
  int64_t abandoned_save_seconds = 3600;
};
// gc: sweeps leftovers of failed saves, prunes by `policy`, then rewrites
// files whose unused chunks reach reclaim.min_unused_fraction.
Status CollectGarbage(const std::string& store, const GcOptions& options, std::ostream& out);

// tag STEP NAME / tag --delete NAME.
Status TagStep(const std::string& store, const std::string& step_arg, const std::string& name, std::ostream& out);
Status Untag(const std::string& store, const std::string& name, std::ostream& out);

}  // namespace ckptdb::cli

#endif  // CKPTDB_TOOLS_CLI_COMMANDS_H_
