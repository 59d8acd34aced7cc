// `ckptdb`: list, inspect, verify, prune and export the steps of a store.
// Parses arguments, calls the command functions (cli_commands.h) and maps
// their Status to the exit code: 0 success, 1 failure, 2 usage. Output that
// cannot be written is a failure (cli_stdout.h; a reader that leaves a pipe
// early ends the command by SIGPIPE, unless SIGPIPE is ignored).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "ckptdb/copy.h"
#include "ckptdb/rocksdb_store.h"
#include "cli_args.h"
#include "cli_commands.h"
#include "cli_stdout.h"
#include "value_format.h"

namespace {

using ckptdb::cli::Args;
using ckptdb::cli::ArgSpec;

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

#define EXIT_CODES \
  "\nexit codes: 0 success, 1 failure (no such store, step, tag or entry,\n" \
  "corrupt data, a store held by a writer, output that cannot be written,\n" \
  "...), 2 usage error. A reader that closes the pipe early ends the command\n" \
  "by SIGPIPE, as it does cat (where SIGPIPE is ignored: failure, 1).\n"

#define STEP_TEXT \
  "STEP is a step number, 'latest' (the highest committed step), the name\n" \
  "of a tag (see 'ckptdb tag'), or best:METRIC (the step with the smallest\n" \
  "value of the metric its save recorded; best:METRIC:max the largest; of\n" \
  "equal values the newest step).\n"

const char kMainHelp[] =
    "usage: ckptdb COMMAND [ARGS...] [--help]\n"
    "\n"
    "Lists, inspects, verifies, prunes and exports the checkpoint steps in a\n"
    "ckptdb store.\n"
    "\n"
    "read commands (open the store read-only; never block a job saving to it,\n"
    "and see only whole committed steps):\n"
    "  ls STORE [--sort METRIC]     one row per committed step, with its metrics\n"
    "  ls STORE STEP [--shards]     one row per entry (or stored shard) of a step\n"
    "  cat STORE STEP FQN           the values of one entry (--slice, --raw)\n"
    "  info STORE                   steps, sizes, compression, RocksDB figures\n"
    "  info STORE STEP              one step: its metrics, note, tags, sizes\n"
    "  info STORE STEP FQN          one entry: its shards, chunks and sizes\n"
    "  verify STORE [STEP...|--all] read and check every chunk\n"
    "  diff STORE A B               entries added, removed, changed from A to B\n"
    "  export STORE STEP --format safetensors OUT\n"
    "                               the step as one safetensors file\n"
    "write commands (open the store for writing: they fail, changing nothing,\n"
    "while a training job has the store open):\n"
    "  rm STORE STEP...             delete steps\n"
    "  gc STORE [--keep-last K] [--keep-every M] [--min-unused F]\n"
    "           [--keep-best K --metric NAME [--mode min|max]] [--dry-run]\n"
    "                               sweep failed saves, prune old steps\n"
    "  tag STORE STEP NAME          name a step; tag STORE --delete NAME\n"
    "  cp SRC DST [--steps LIST]    copy steps to another store (a backup, a bucket)\n"
    "\n" STEP_TEXT
    "STORE is a directory or s3://BUCKET/PREFIX, a store in an S3 bucket (its\n"
    "endpoint and credentials from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,\n"
    "AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_PROFILE and ~/.aws/ as AWS's own\n"
    "tools read them; a request that moves no byte for CKPTDB_S3_STALL_TIMEOUT\n"
    "seconds, default 10, is retried once, then the command fails naming the\n"
    "server; AWS_MAX_ATTEMPTS caps the tries).\n"
    "Read commands take --json for machine-readable output. 'ckptdb COMMAND\n"
    "--help' says more.\n" EXIT_CODES;

const char kLsHelp[] =
    "usage: ckptdb ls STORE [--sort METRIC] [--reverse] [--json]\n"
    "       ckptdb ls STORE STEP [--shards] [--json]\n"
    "\n"
    "Without STEP: one row per committed step, oldest first:\n"
    "  STEP  CREATED (UTC)  WORLD (ranks that saved it)  ENTRIES  BYTES  ADDED\n"
    "  [METRIC...]  TAGS\n"
    "with a column per metric the saves recorded (SaveOptions::metrics,\n"
    "ckptdb.save(..., metrics=...)) when there are at most 4 of them ('-':\n"
    "the step has no such metric); 'ckptdb info STORE STEP' shows all of a\n"
    "step's metrics and its note.\n"
    "With STEP: one row per entry of that step:\n"
    "  FQN  KIND (tensor, sharded_tensor, bytes)  DTYPE  SHAPE  SHARDS  BYTES\n"
    "With STEP --shards: one row per stored piece (shard) of each entry:\n"
    "  FQN  SHARD  OFFSETS  SIZES  RANK (that wrote it)  ITEM  CHUNKS  SHARED  BYTES\n"
    "  ADDED\n"
    "\n"
    "BYTES are the logical bytes of the tensors; ADDED what the step added to\n"
    "the store, after ckptdb's compression (chunk headers included): chunks it\n"
    "shares with an earlier step (unchanged since, see StoreOptions.deduplicate)\n"
    "are stored once and not counted again. SHARED counts those chunks.\n"
    "\n"
    "What is read: the steps' summary records; with STEP, the step's record\n"
    "of its entries, which holds each entry's shard count and ADDED bytes\n"
    "(steps saved before it did: each entry's pieces record is read too, one\n"
    "at a time); with --shards, every entry's pieces record, one at a time.\n"
    "\n" STEP_TEXT
    "\n"
    "options:\n"
    "  --sort METRIC  steps ordered by METRIC, smallest first (steps without\n"
    "            it last); with more than 4 metrics only its column is shown\n"
    "  --reverse  largest first (without --sort: newest step first)\n"
    "  --shards  with STEP: list the stored pieces of every entry\n"
    "  --json    print a JSON array with one object per row instead; step rows\n"
    "            have \"step\", \"created\", \"created_unix_ms\", \"world_size\",\n"
    "            \"entries\", \"bytes\", \"stored_bytes\", \"tags\", \"metrics\"\n"
    "            ({name: value}) and \"note\"; entry rows\n"
    "            have \"fqn\", \"kind\", \"dtype\", \"shape\", \"shards\", \"bytes\",\n"
    "            \"stored_bytes\", and with --shards \"pieces\" (\"offsets\",\n"
    "            \"sizes\", \"rank\", \"item\", \"chunks\", \"chunk_bytes\", \"chunk_shape\",\n"
    "            \"bytes\", \"stored_bytes\", \"shared_chunks\"); \"stored_bytes\" is ADDED;\n"
    "            \"chunk_shape\" is [] for chunks cut as runs of bytes, else the\n"
    "            extents of the n-d boxes the shard is cut into.\n"
    "  --help    this text\n" EXIT_CODES;

const char kCatHelp[] =
    "usage: ckptdb cat STORE STEP FQN [--slice SLICE] [--raw | --json]\n"
    "\n"
    "Prints the values of one entry of a step. Tensors print like numpy\n"
    "arrays, summarised with '...' beyond 1000 elements; sharded tensors are\n"
    "assembled whole; bytes entries print as text, other bytes escaped as\n"
    "\\xNN. Every chunk read is verified against its checksum: corrupt data\n"
    "is an error, never printed.\n"
    "\n" STEP_TEXT
    "\n"
    "options:\n"
    "  --slice SLICE  only part of a tensor, numpy-style, one part per\n"
    "                 dimension separated by commas: an index ('3', '-1',\n"
    "                 which drops the dimension) or start:stop[:step] with\n"
    "                 each part optional ('0:4,:', '::2', '-3:'). Missing\n"
    "                 trailing dimensions are ':'. Only the chunks the slice\n"
    "                 touches are read. A malformed SLICE is a usage error\n"
    "                 (2); one that does not fit the entry a failure (1).\n"
    "  --raw          write the bytes (a tensor's elements row-major, as\n"
    "                 stored: little-endian) to stdout instead of text\n"
    "  --json         {\"fqn\", \"kind\", \"dtype\", \"shape\", \"values\"} with\n"
    "                 every value (nested arrays; NaN, Infinity as Python's\n"
    "                 json writes them); a bytes entry gives \"length\" and\n"
    "                 \"text\" (valid UTF-8) or \"base64\"\n"
    "  --help         this text\n" EXIT_CODES;

const char kInfoHelp[] =
    "usage: ckptdb info STORE [--json]\n"
    "       ckptdb info STORE STEP [--json]\n"
    "       ckptdb info STORE STEP FQN [--json]\n"
    "\n"
    "Summarises a store: the steps and tags, the logical bytes of all steps,\n"
    "the raw bytes of the distinct chunks they use (a chunk that several steps\n"
    "share counts once) and the ratio of the two (the deduplication), the\n"
    "bytes the steps added as stored and the compression, the size of files on\n"
    "disk, and RocksDB's figures: live SST files and their size per level,\n"
    "its estimates of live data and of the number of keys, the write-ahead\n"
    "log, and staging directories of saves in flight or left by failed ones.\n"
    "With STEP: what that step records about itself: when it was saved, by\n"
    "how many ranks, its entries and sizes, its tags, every metric (all\n"
    "digits) and its note (from the step's summary record alone).\n"
    "With STEP FQN: one entry of that step: its kind, dtype and shape (a\n"
    "bytes entry: its encoding), its shards and how many ranks wrote them,\n"
    "its chunks and how many of them it shares with earlier steps, its bytes\n"
    "and the bytes it added to the store (as 'ls STORE STEP' counts them).\n"
    "Only that entry's records are read.\n"
    "\n"
    "options:\n"
    "  --json   one JSON object: \"store\", \"steps\", \"first_step\",\n"
    "           \"latest_step\", \"tags\", \"bytes\", \"distinct_bytes\",\n"
    "           \"dedup_ratio\", \"stored_bytes\",\n"
    "           \"compression_ratio\", \"disk_bytes\", \"sst_files\",\n"
    "           \"sst_bytes\", \"sst_files_per_level\", \"live_data_bytes\",\n"
    "           \"estimated_keys\", \"wal_files\", \"wal_bytes\", \"staging_dirs\";\n"
    "           with STEP: \"step\", \"created\", \"created_unix_ms\",\n"
    "           \"world_size\", \"entries\", \"bytes\", \"stored_bytes\", \"tags\",\n"
    "           \"metrics\", \"note\"; with STEP FQN: \"step\", \"fqn\", \"kind\",\n"
    "           \"dtype\", \"shape\", (bytes entries) \"bytes_encoding\",\n"
    "           \"shards\", \"ranks\", \"chunks\", \"shared_chunks\", \"bytes\",\n"
    "           \"stored_bytes\"\n"
    "  --help   this text\n" EXIT_CODES;

const char kVerifyHelp[] =
    "usage: ckptdb verify STORE [STEP... | --all] [--json]\n"
    "\n"
    "Reads every chunk of the given steps (all steps when none is given, or\n"
    "with --all), checks its header, length and XXH3-64 checksum (and the\n"
    "checksums of the RocksDB blocks holding it), and reports each damaged\n"
    "entry, naming the damaged file where RocksDB does. With every step, it\n"
    "also decodes every metadata, summary and tag record and names the\n"
    "damaged ones. A chunk that several steps share is read once and its\n"
    "verdict reported for every step using it. A progress bar is drawn on\n"
    "stderr when it is a terminal.\n"
    "\n"
    "A damaged step can be dropped with 'ckptdb rm STORE STEP', a damaged tag\n"
    "with 'ckptdb tag STORE --delete NAME'; the other steps are not touched.\n"
    "\n" STEP_TEXT
    "\n"
    "options:\n"
    "  --all    every committed step (the default)\n"
    "  --json   {\"ok\", \"steps\": [{\"step\", \"ok\", \"entries\", \"chunks\",\n"
    "           \"bytes\", \"stored_bytes\", \"shared_chunks\", \"errors\"}], and\n"
    "           when records are\n"
    "           damaged \"damaged_records\": [{\"record\", \"error\"}]}\n"
    "  --help   this text\n"
    "\nexit codes: 0 every chunk is intact, 1 damage found (or another\n"
    "failure, output that cannot be written included), 2 usage error.\n";

const char kDiffHelp[] =
    "usage: ckptdb diff STORE A B [--json]\n"
    "\n"
    "Compares step A with step B, entry by entry:\n"
    "  + FQN  entry only in B (added)\n"
    "  - FQN  entry only in A (removed)\n"
    "  ~ FQN  changed: its kind, dtype or shape, or its values (how many\n"
    "         elements differ and the largest absolute difference; bytes\n"
    "         entries: how many bytes differ)\n"
    "Entries equal bit for bit are counted as unchanged. A and B are STEPs.\n"
    "An entry stored in the same chunks in both steps whose chunks' content\n"
    "hashes are all equal is unchanged without being read; other entries are\n"
    "compared value by value, in bounded blocks read from both steps.\n"
    "Differences are not an error: the exit code is 0.\n"
    "\n" STEP_TEXT
    "\n"
    "options:\n"
    "  --json   {\"a\", \"b\", \"added\", \"removed\", \"changed\": [{\"fqn\",\n"
    "           \"what\", \"a\", \"b\", \"differing\", \"total\", \"max_abs_diff\"}],\n"
    "           \"unchanged\", \"unchanged_by_hash\": how many of them were found\n"
    "           equal by their chunks' hashes, without reading}\n"
    "  --help   this text\n" EXIT_CODES;

const char kExportHelp[] =
    "usage: ckptdb export STORE STEP --format safetensors OUT [--json]\n"
    "\n"
    "Writes the step as one safetensors file OUT: every tensor whole (sharded\n"
    "tensors assembled), in the step's order, with dtype names F64 F32 F16\n"
    "BF16 F8_E4M3 F8_E5M2 I64 I32 I16 I8 U8 BOOL. Bytes entries go into the\n"
    "header's __metadata__ (string -> string) under their FQN: the text when\n"
    "it is valid UTF-8, otherwise base64, and then the FQN is listed in\n"
    "__metadata__[\"ckptdb.base64\"] (a JSON array). __metadata__[\"ckptdb.step\"]\n"
    "holds the step. OUT is written as a file with no name yet and then put in\n"
    "place (renamed over a file that is there): it is complete or untouched,\n"
    "and no temporary is left behind. OUT must be absent or a regular file: a\n"
    "symbolic link (neither followed nor replaced), a directory, a device or a\n"
    "FIFO is refused. Memory: two blocks of rows of up to 64 MiB (one is\n"
    "read while the other is written).\n"
    "\n" STEP_TEXT
    "\n"
    "options:\n"
    "  --format F  the file format; 'safetensors' is the one there is\n"
    "  --json      {\"step\", \"path\", \"tensors\", \"bytes_entries\", \"file_bytes\"}\n"
    "  --help      this text\n" EXIT_CODES;

#define WRITE_TEXT \
  "This command opens the store for writing. Only one process may do that\n" \
  "at a time (RocksDB's lock): while a training job is saving to the store,\n" \
  "it fails with a message saying so, and changes nothing.\n"

const char kRmHelp[] =
    "usage: ckptdb rm STORE STEP...\n"
    "\n"
    "Deletes the given steps, and the tags on them, in one atomic commit:\n"
    "all of them go, or (when any STEP is unknown) none. Their space is given\n"
    "back at once where whole files fall out of use (they are dropped, no data\n"
    "is rewritten); 'ckptdb gc' also rewrites files that later steps still\n"
    "partly share.\n"
    "\n" STEP_TEXT "\n" WRITE_TEXT
    "\n"
    "options:\n"
    "  --help   this text\n" EXIT_CODES;

const char kGcHelp[] =
    "usage: ckptdb gc STORE [--keep-last K] [--keep-every M] [--min-unused F]\n"
    "                 [--keep-best K --metric NAME [--mode min|max]]\n"
    "                 [--abandoned-after SECONDS] [--dry-run] [--json]\n"
    "\n"
    "Removes what failed or interrupted saves left behind (data of saves that\n"
    "are recorded as pending and never committed, staging directories), then\n"
    "prunes history. Data with neither a commit nor a pending record is kept\n"
    "and counted (it may be a commit whose log was lost). A step is\n"
    "kept when it is one of the newest K (--keep-last), when its number is a\n"
    "multiple of M (--keep-every), when it is one of the K with the best\n"
    "value of metric NAME (--keep-best; smallest with --mode min, the default,\n"
    "largest with max; steps without the metric are not among them; of equal\n"
    "values the newer ranks first), or when it has a tag; the newest step is\n"
    "always kept. Without a --keep-... rule no step is removed.\n"
    "\n"
    "Chunks that a kept step shares with a removed one (unchanged since) stay;\n"
    "the rest of the removed steps' data goes: a file none of whose chunks is\n"
    "used is dropped whole, and a file whose unused chunks make up at least\n"
    "--min-unused of it (default 0.05) is rewritten with only its used chunks\n"
    "(this reads and writes its used bytes once). The bytes printed for\n"
    "removed steps are what they added to the store when they were saved.\n"
    "\n"
    "In a bucket (s3://BUCKET/PREFIX), objects no kept step reads are\n"
    "deleted, and so are those of failed saves. A save counts as still\n"
    "running (its objects are kept) while its pending marker, which a running\n"
    "save writes again every quarter of its own threshold, is younger than\n"
    "--abandoned-after SECONDS (default 3600) by the server's clock: a save may\n"
    "run for any length of time and hosts' clocks may differ. Any value of at\n"
    "least half the savers' StoreOptions.abandoned_save_seconds is safe.\n"
    "An object that kept steps read only in part (a removed step's object\n"
    "holding chunks later steps share) is rewritten by the --min-unused rule\n"
    "into a new object, which the store's index then names; the object it\n"
    "replaces stays --abandoned-after SECONDS more (a reader may still hold\n"
    "it) and a later gc deletes it. Nothing is rewritten while a save is\n"
    "running (run gc between saves); a save that began before a rewrite\n"
    "and shares its chunks is refused at its commit (Aborted, nothing\n"
    "committed).\n"
    "\n" WRITE_TEXT
    "\n"
    "options:\n"
    "  --keep-last K   keep the newest K steps (K >= 1)\n"
    "  --keep-every M  keep steps whose number is a multiple of M (M >= 1)\n"
    "  --keep-best K   keep the K steps with the best value of --metric (K >= 1)\n"
    "  --metric NAME   the metric --keep-best ranks steps by\n"
    "  --mode min|max  whether smaller (min, the default) or larger is better\n"
    "  --min-unused F  rewrite a file when this fraction of it is unused\n"
    "                  chunks (0 to 1; default 0.05)\n"
    "  --abandoned-after SECONDS\n"
    "                  (buckets) take a save whose marker is this much older\n"
    "                  than the server's clock, never committed, as dead, and\n"
    "                  delete its objects; and delete the objects a rewrite\n"
    "                  replaced this long ago (default 3600)\n"
    "  --dry-run       say what would be removed; change nothing\n"
    "  --json          {\"dry_run\", \"failed_saves\", \"staging_dirs\",\n"
    "                  \"unaccounted_saves\", \"deleted_saves_reclaimed\",\n"
    "                  \"replaced_objects\", \"removed_steps\",\n"
    "                  \"removed_stored_bytes\", \"kept_steps\",\n"
    "                  \"rewritten_files\", \"rewritten_bytes_before\",\n"
    "                  \"rewritten_bytes_after\", \"files_left\",\n"
    "                  \"unused_bytes_left\", \"saves_running\"}\n"
    "  --help          this text\n" EXIT_CODES;

const char kTagHelp[] =
    "usage: ckptdb tag STORE STEP NAME\n"
    "       ckptdb tag STORE --delete NAME\n"
    "\n"
    "Names a step: NAME can then be given wherever a STEP is expected. A tag\n"
    "that already exists is moved to STEP. Tags are kept in the store; 'gc'\n"
    "never prunes a tagged step; 'rm' of a step removes its tags. NAME is 1\n"
    "to 128 characters of letters, digits, '.', '_' and '-', starting with a\n"
    "letter; 'latest' is reserved.\n"
    "\n" STEP_TEXT "\n" WRITE_TEXT
    "\n"
    "options:\n"
    "  --delete NAME  remove the tag NAME (the step stays)\n"
    "  --help         this text\n" EXIT_CODES;

int Usage(const std::string& message, const char* help) {
  std::cerr << "ckptdb: " << message << "\n\n" << help;
  return kExitUsage;
}

int Finish(const ckptdb::Status& st) {
  if (st.ok()) return kExitOk;
  std::cerr << "ckptdb: " << st.ToString() << "\n";
  return kExitFailure;
}

// Opens the store read-only and resolves STEP arguments.
struct ReadContext {
  std::unique_ptr<ckptdb::StoreReader> reader;
  ckptdb::Status status;
};

// Readers open SST files on first use, a bounded number at a time
// (ReaderOptions): fast with a long history, within any descriptor limit,
// and a damaged file touches only the steps it holds. A step that a writer
// deletes while verify, diff or export reads it fails as such. Chunks are
// read with pread, not through mmap: cat, export, verify and diff stream
// whole entries and steps, and every mapped page they touch would count in
// the command's resident memory (cat --raw of a 1 GiB tensor peaked at
// 1.1 GiB of RSS through mmap, 0.1 GiB with pread, in about the same time).
ReadContext OpenRead(const std::string& store) {
  ReadContext c;
  ckptdb::ReaderOptions ro;
  ro.mmap_reads = false;
  auto r = ckptdb::OpenStoreReader(store, ro);
  if (!r.ok()) {
    c.status = r.status();
  } else {
    c.reader = std::move(r).value();
  }
  return c;
}

int RunLs(int argc, char** argv) {
  Args a = ckptdb::cli::ParseArgs(argc, argv, 2, ArgSpec{{"--json", "--shards", "--reverse"}, {"--sort"}});
  if (a.help) return std::cout << kLsHelp, kExitOk;
  if (!a.error.empty()) return Usage("ls: " + a.error, kLsHelp);
  if (a.positional.empty() || a.positional.size() > 2) return Usage("ls: expected STORE [STEP]", kLsHelp);
  if (a.Has("--shards") && a.positional.size() == 1) return Usage("ls: --shards needs a STEP", kLsHelp);
  if ((a.Value("--sort") != nullptr || a.Has("--reverse")) && a.positional.size() == 2) {
    return Usage("ls: --sort and --reverse order the steps; they take no STEP", kLsHelp);
  }
  ckptdb::cli::LsOptions lo;
  lo.json = a.Has("--json");
  lo.reverse = a.Has("--reverse");
  if (const std::string* m = a.Value("--sort")) {
    if (!ckptdb::ValidateMetricName(*m).ok()) return Usage("ls: --sort needs a metric name, not '" + *m + "'", kLsHelp);
    lo.sort = *m;
  }
  ReadContext c = OpenRead(a.positional[0]);
  if (!c.status.ok()) return Finish(c.status);
  if (a.positional.size() == 1) return Finish(ckptdb::cli::ListSteps(*c.reader, lo, std::cout));
  auto step = ckptdb::cli::ResolveStep(*c.reader, a.positional[1]);
  if (!step.ok()) return Finish(step.status());
  return Finish(ckptdb::cli::ListEntries(*c.reader, *step, a.Has("--shards"), a.Has("--json"), std::cout));
}

// Passes bytes on to another stream buffer, counting them.
class CountingBuf : public std::streambuf {
 public:
  explicit CountingBuf(std::streambuf* to) : to_(to) {}
  uint64_t written() const { return written_; }

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    if (to_->sputc(static_cast<char>(c)) == traits_type::eof()) return traits_type::eof();
    ++written_;
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    const std::streamsize put = to_->sputn(s, n);
    written_ += static_cast<uint64_t>(std::max<std::streamsize>(put, 0));
    return put;
  }
  int sync() override { return to_->pubsync(); }

 private:
  std::streambuf* to_;
  uint64_t written_ = 0;
};

int RunCat(int argc, char** argv) {
  Args a = ckptdb::cli::ParseArgs(argc, argv, 2, ArgSpec{{"--json", "--raw"}, {"--slice"}});
  if (a.help) return std::cout << kCatHelp, kExitOk;
  if (!a.error.empty()) return Usage("cat: " + a.error, kCatHelp);
  if (a.positional.size() != 3) return Usage("cat: expected STORE STEP FQN", kCatHelp);
  if (a.Has("--raw") && a.Has("--json")) return Usage("cat: --raw and --json exclude each other", kCatHelp);
  std::optional<ckptdb::cli::Slice> slice;
  if (const std::string* text = a.Value("--slice")) {
    auto parsed = ckptdb::cli::ParseSlice(*text);
    if (!parsed.ok()) return Usage("cat: " + parsed.status().message(), kCatHelp);
    slice = std::move(parsed).value();
  }
  ReadContext c = OpenRead(a.positional[0]);
  if (!c.status.ok()) return Finish(c.status);
  ckptdb::cli::CatOptions o;
  o.slice = slice ? &*slice : nullptr;
  o.raw = a.Has("--raw");
  o.json = a.Has("--json");
  // The reader opens files lazily: a writer pruning meanwhile may delete the
  // step's files before they are read (seen as a vanished file, or as its
  // chunks missing). Then look again in a fresh view, where STEP may be gone
  // or ('latest', a tag) be another step; genuine damage is reported as it
  // persists. Formatted output is written once all is read; --raw streams
  // (memory stays bounded whatever the tensor), so it looks again only while
  // nothing has been written.
  for (int attempt = 0;; ++attempt) {
    auto step = ckptdb::cli::ResolveStep(*c.reader, a.positional[1]);
    if (!step.ok()) return Finish(step.status());
    std::ostringstream buffered;
    CountingBuf counted(std::cout.rdbuf());
    std::ostream streamed(&counted);
    ckptdb::Status st = ckptdb::cli::CatEntry(*c.reader, *step, a.positional[2], o, o.raw ? streamed : buffered);
    const std::string text = st.ToString();
    const bool vanished =
        (st.code() == ckptdb::StatusCode::kIOError && text.find("No such file") != std::string::npos) ||
        (st.code() == ckptdb::StatusCode::kDataLoss && text.find("is missing from the store") != std::string::npos);
    if (vanished && counted.written() == 0 && attempt < 3 && c.reader->Refresh().ok()) continue;
    if (st.ok() && !o.raw) std::cout << buffered.str();
    return Finish(st);
  }
}

int RunInfo(int argc, char** argv) {
  Args a = ckptdb::cli::ParseArgs(argc, argv, 2, ArgSpec{{"--json"}, {}});
  if (a.help) return std::cout << kInfoHelp, kExitOk;
  if (!a.error.empty()) return Usage("info: " + a.error, kInfoHelp);
  if (a.positional.empty() || a.positional.size() > 3) return Usage("info: expected STORE [STEP [FQN]]", kInfoHelp);
  ReadContext c = OpenRead(a.positional[0]);
  if (!c.status.ok()) return Finish(c.status);
  if (a.positional.size() >= 2) {
    auto step = ckptdb::cli::ResolveStep(*c.reader, a.positional[1]);
    if (!step.ok()) return Finish(step.status());
    if (a.positional.size() == 3) {
      return Finish(ckptdb::cli::InfoEntry(*c.reader, *step, a.positional[2], a.Has("--json"), std::cout));
    }
    return Finish(ckptdb::cli::InfoStep(*c.reader, *step, a.Has("--json"), std::cout));
  }
  return Finish(ckptdb::cli::Info(*c.reader, a.Has("--json"), std::cout));
}

int RunVerify(int argc, char** argv) {
  Args a = ckptdb::cli::ParseArgs(argc, argv, 2, ArgSpec{{"--json", "--all"}, {}});
  if (a.help) return std::cout << kVerifyHelp, kExitOk;
  if (!a.error.empty()) return Usage("verify: " + a.error, kVerifyHelp);
  if (a.positional.empty()) return Usage("verify: expected STORE [STEP...]", kVerifyHelp);
  if (a.Has("--all") && a.positional.size() > 1) return Usage("verify: give STEPs or --all, not both", kVerifyHelp);
  ReadContext c = OpenRead(a.positional[0]);
  if (!c.status.ok()) return Finish(c.status);
  ckptdb::cli::VerifyOptions o;
  for (size_t i = 1; i < a.positional.size(); ++i) {
    auto step = ckptdb::cli::ResolveStep(*c.reader, a.positional[i]);
    if (!step.ok()) return Finish(step.status());
    if (std::find(o.steps.begin(), o.steps.end(), *step) == o.steps.end()) o.steps.push_back(*step);
  }
  o.json = a.Has("--json");
  o.progress = ::isatty(STDERR_FILENO) != 0;
  return Finish(ckptdb::cli::Verify(*c.reader, o, std::cout, std::cerr));
}

int RunDiff(int argc, char** argv) {
  Args a = ckptdb::cli::ParseArgs(argc, argv, 2, ArgSpec{{"--json"}, {}});
  if (a.help) return std::cout << kDiffHelp, kExitOk;
  if (!a.error.empty()) return Usage("diff: " + a.error, kDiffHelp);
  if (a.positional.size() != 3) return Usage("diff: expected STORE A B", kDiffHelp);
  ReadContext c = OpenRead(a.positional[0]);
  if (!c.status.ok()) return Finish(c.status);
  auto sa = ckptdb::cli::ResolveStep(*c.reader, a.positional[1]);
  if (!sa.ok()) return Finish(sa.status());
  auto sb = ckptdb::cli::ResolveStep(*c.reader, a.positional[2]);
  if (!sb.ok()) return Finish(sb.status());
  return Finish(ckptdb::cli::Diff(*c.reader, *sa, *sb, a.Has("--json"), std::cout));
}

int RunExport(int argc, char** argv) {
  Args a = ckptdb::cli::ParseArgs(argc, argv, 2, ArgSpec{{"--json"}, {"--format"}});
  if (a.help) return std::cout << kExportHelp, kExitOk;
  if (!a.error.empty()) return Usage("export: " + a.error, kExportHelp);
  if (a.positional.size() != 3) return Usage("export: expected STORE STEP OUT", kExportHelp);
  const std::string* format = a.Value("--format");
  if (format == nullptr) return Usage("export: --format is required (--format safetensors)", kExportHelp);
  if (*format != "safetensors") {
    return Usage("export: unknown format '" + *format + "' (the format there is: safetensors)", kExportHelp);
  }
  ReadContext c = OpenRead(a.positional[0]);
  if (!c.status.ok()) return Finish(c.status);
  auto step = ckptdb::cli::ResolveStep(*c.reader, a.positional[1]);
  if (!step.ok()) return Finish(step.status());
  return Finish(ckptdb::cli::ExportSafetensors(*c.reader, *step, a.positional[2], a.Has("--json"), std::cout));
}

int RunRm(int argc, char** argv) {
  Args a = ckptdb::cli::ParseArgs(argc, argv, 2, ArgSpec{});
  if (a.help) return std::cout << kRmHelp, kExitOk;
  if (!a.error.empty()) return Usage("rm: " + a.error, kRmHelp);
  if (a.positional.size() < 2) return Usage("rm: expected STORE STEP...", kRmHelp);
  std::vector<std::string> steps(a.positional.begin() + 1, a.positional.end());
  return Finish(ckptdb::cli::RemoveSteps(a.positional[0], steps, std::cout));
}

// A count option: a positive integer.
bool ParseCount(const std::string& text, int64_t* out) {
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos) return false;
  *out = std::stoll(text);
  return *out >= 1;
}

// A fraction: a decimal number in [0, 1].
bool ParseFraction(const std::string& text, double* out) {
  if (text.empty() || text.size() > 32 || text.find_first_not_of("0123456789.") != std::string::npos) return false;
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && *out >= 0 && *out <= 1;
}

int RunGc(int argc, char** argv) {
  Args a = ckptdb::cli::ParseArgs(argc, argv, 2,
                                  ArgSpec{{"--dry-run", "--json"},
                                          {"--keep-last", "--keep-every", "--keep-best", "--metric", "--mode",
                                           "--min-unused", "--abandoned-after"}});
  if (a.help) return std::cout << kGcHelp, kExitOk;
  if (!a.error.empty()) return Usage("gc: " + a.error, kGcHelp);
  if (a.positional.size() != 1) return Usage("gc: expected STORE", kGcHelp);
  ckptdb::cli::GcOptions o;
  if (const std::string* k = a.Value("--keep-last")) {
    if (!ParseCount(*k, &o.policy.keep_last)) {
      return Usage("gc: --keep-last needs a positive integer, not '" + *k + "'", kGcHelp);
    }
  }
  if (const std::string* m = a.Value("--keep-every")) {
    if (!ParseCount(*m, &o.policy.keep_every)) {
      return Usage("gc: --keep-every needs a positive integer, not '" + *m + "'", kGcHelp);
    }
  }
  if (const std::string* k = a.Value("--keep-best")) {
    if (!ParseCount(*k, &o.policy.keep_best)) {
      return Usage("gc: --keep-best needs a positive integer, not '" + *k + "'", kGcHelp);
    }
    const std::string* metric = a.Value("--metric");
    if (metric == nullptr) return Usage("gc: --keep-best needs --metric NAME (the metric to rank steps by)", kGcHelp);
    if (!ckptdb::ValidateMetricName(*metric).ok()) {
      return Usage("gc: --metric needs a metric name, not '" + *metric + "'", kGcHelp);
    }
    o.policy.best_metric = *metric;
    if (const std::string* mode = a.Value("--mode")) {
      if (*mode != "min" && *mode != "max") return Usage("gc: --mode is min or max, not '" + *mode + "'", kGcHelp);
      o.policy.best_mode = *mode == "max" ? ckptdb::MetricMode::kMax : ckptdb::MetricMode::kMin;
    }
  } else if (a.Value("--metric") != nullptr || a.Value("--mode") != nullptr) {
    return Usage("gc: --metric and --mode go with --keep-best K", kGcHelp);
  }
  if (const std::string* f = a.Value("--min-unused")) {
    if (!ParseFraction(*f, &o.reclaim.min_unused_fraction)) {
      return Usage("gc: --min-unused needs a number from 0 to 1, not '" + *f + "'", kGcHelp);
    }
  }
  if (const std::string* t = a.Value("--abandoned-after")) {
    char* end = nullptr;
    const long long v = std::strtoll(t->c_str(), &end, 10);
    if (t->empty() || *end != '\0' || v < 0) {
      return Usage("gc: --abandoned-after needs a whole number of seconds >= 0, not '" + *t + "'", kGcHelp);
    }
    o.abandoned_save_seconds = v;
  }
  o.dry_run = a.Has("--dry-run");
  o.json = a.Has("--json");
  return Finish(ckptdb::cli::CollectGarbage(a.positional[0], o, std::cout));
}

int RunTag(int argc, char** argv) {
  Args a = ckptdb::cli::ParseArgs(argc, argv, 2, ArgSpec{{}, {"--delete"}});
  if (a.help) return std::cout << kTagHelp, kExitOk;
  if (!a.error.empty()) return Usage("tag: " + a.error, kTagHelp);
  if (const std::string* name = a.Value("--delete")) {
    if (a.positional.size() != 1) return Usage("tag: expected STORE --delete NAME", kTagHelp);
    return Finish(ckptdb::cli::Untag(a.positional[0], *name, std::cout));
  }
  if (a.positional.size() != 3) return Usage("tag: expected STORE STEP NAME", kTagHelp);
  return Finish(ckptdb::cli::TagStep(a.positional[0], a.positional[1], a.positional[2], std::cout));
}

const char kCpHelp[] =
    "usage: ckptdb cp SRC DST [--steps LIST] [--tags] [--dry-run]\n"
    "\n"
    "Copies committed steps from store SRC to store DST (each a directory or\n"
    "s3://BUCKET/PREFIX; DST is made when missing): a backup into a bucket, a\n"
    "checkpoint taken to another cluster, a bucket's steps brought to a local\n"
    "disk. Each step is read with every chunk's checksum verified and\n"
    "committed at DST whole or not at all, under its own number, with its\n"
    "entries, metrics, note and annotations. Steps go oldest first, so that\n"
    "DST's deduplication stores the chunks that did not change once. A step\n"
    "DST already has with the same entries, byte for byte, is left as it is\n"
    "(a copy that was interrupted can be run again); one with other content\n"
    "stops the copy there (AlreadyExists: the steps before it are copied).\n"
    "Progress goes to stderr, one line per step. One step is held in memory\n"
    "at a time.\n"
    "\n"
    "options:\n"
    "  --steps LIST  the steps to copy: numbers, 'latest' or tags, comma-\n"
    "                separated (default: every step)\n"
    "  --tags        point SRC's tags on the copied steps at them in DST too\n"
    "  --dry-run     say what would be copied; write nothing\n"
    "  --help        this text\n" EXIT_CODES;

int RunCp(int argc, char** argv) {
  Args a = ckptdb::cli::ParseArgs(argc, argv, 2, ArgSpec{{"--tags", "--dry-run"}, {"--steps"}});
  if (a.help) return std::cout << kCpHelp, kExitOk;
  if (!a.error.empty()) return Usage("cp: " + a.error, kCpHelp);
  if (a.positional.size() != 2) return Usage("cp: expected SRC DST", kCpHelp);
  const std::string& from = a.positional[0];
  const std::string& to = a.positional[1];
  ckptdb::CopyOptions o;
  o.tags = a.Has("--tags");
  o.dry_run = a.Has("--dry-run");
  if (const std::string* list = a.Value("--steps")) {
    auto reader = ckptdb::OpenStoreReader(from);
    if (!reader.ok()) return Finish(reader.status());
    size_t start = 0;
    while (start <= list->size()) {
      const size_t comma = list->find(',', start);
      const std::string item = list->substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (item.empty()) return Usage("cp: --steps has an empty item in '" + *list + "'", kCpHelp);
      auto step = ckptdb::cli::ResolveStep(**reader, item);
      if (!step.ok()) return Finish(step.status().WithContext("nothing was copied"));
      o.steps.push_back(*step);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  o.progress = [&](const ckptdb::CopiedStep& c, size_t i, size_t n) {
    const char* what = c.outcome == ckptdb::CopiedStep::Outcome::kCopied    ? "copied"
                       : c.outcome == ckptdb::CopiedStep::Outcome::kPresent ? "already there, identical"
                                                                            : "would copy";
    std::cerr << "ckptdb cp: step " << c.step << " (" << (i + 1) << " of " << n << "): " << what << ", "
              << ckptdb::cli::HumanBytes(c.logical_bytes);
    if (c.outcome == ckptdb::CopiedStep::Outcome::kCopied) {
      std::cerr << ", " << ckptdb::cli::HumanBytes(c.stored_bytes) << " added to " << to;
    }
    std::cerr << "\n";
  };
  auto copied = ckptdb::CopySteps(from, to, o);
  if (!copied.ok()) return Finish(copied.status());
  size_t n = 0;
  for (const ckptdb::CopiedStep& c : *copied) n += c.outcome == ckptdb::CopiedStep::Outcome::kCopied;
  std::cout << (o.dry_run ? "would copy " : "copied ") << (o.dry_run ? copied->size() : n) << " step(s) from " << from
            << " to " << to << "\n";
  return kExitOk;
}

int Run(int argc, char** argv) {
  if (argc < 2) return Usage("missing command", kMainHelp);
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") return std::cout << kMainHelp, kExitOk;
  if (cmd == "ls") return RunLs(argc, argv);
  if (cmd == "cat") return RunCat(argc, argv);
  if (cmd == "info") return RunInfo(argc, argv);
  if (cmd == "verify") return RunVerify(argc, argv);
  if (cmd == "diff") return RunDiff(argc, argv);
  if (cmd == "export") return RunExport(argc, argv);
  if (cmd == "rm") return RunRm(argc, argv);
  if (cmd == "gc") return RunGc(argc, argv);
  if (cmd == "tag") return RunTag(argc, argv);
  if (cmd == "cp") return RunCp(argc, argv);
  return Usage("unknown command '" + cmd + "'", kMainHelp);
}

}  // namespace

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  ckptdb::cli::InstallCheckedStdout();
  // A file size limit (ulimit -f) makes a write fail with EFBIG, reported
  // like a full disk, instead of killing the command mid-way.
  signal(SIGXFSZ, SIG_IGN);
  int code = Run(argc, argv);
  const ckptdb::Status out = ckptdb::cli::FlushCheckedStdout();
  if (!out.ok()) {
    std::cerr << "ckptdb: " << out.ToString() << "\n";
    if (code == kExitOk) code = kExitFailure;
  }
  return code;
}
