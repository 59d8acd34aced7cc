// The RocksDB store: ckptdb's real StorageWriter and StorageReader.
//
// A store is a directory:
//   STORE/CKPTDB     marker file naming the format; a directory without it
//                    is not a store and is never written to
//   STORE/db/        the RocksDB database (keys and values: proto/FORMAT.md)
//   STORE/staging/   per-save directories of SST files not yet ingested
//
// Writers on every rank build SST files (rocksdb::SstFileWriter) under
// staging/<save id>/; the coordinator ingests all of them in one
// IngestExternalFile call and then commits the step's metadata in one synced
// WriteBatch. Only the coordinator's process opens the database for writing;
// readers open it read-only, never block the writer, and see the store as it
// was at one moment: whole committed steps only.
#ifndef CKPTDB_ROCKSDB_STORE_H_
#define CKPTDB_ROCKSDB_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckptdb/communicator.h"
#include "ckptdb/status.h"
#include "ckptdb/storage.h"

namespace ckptdb {

enum class Compression : int {
  kNone = 0,  // chunks stored raw
  kZstd = 1,  // every chunk zstd-compressed
  kAuto = 2,  // zstd, but a chunk that does not shrink is stored raw
};

// How a piece of two or more dimensions is cut into chunks.
enum class ChunkLayout : int {
  // Into n-dimensional boxes sized from the piece's shape (store format 4),
  // where they differ from runs of whole rows: a load in any sharding (rows
  // saved, columns loaded) reads about what it needs instead of every chunk
  // of the rows it spans. CUDA tensors are still cut into runs of bytes (they
  // are read off the device range by range). The default.
  kBoxes = 0,
  // Into runs of chunk_bytes of the piece's row-major bytes, as every store
  // before format 4: a column shard reads every chunk of its rows.
  kRows = 1,
};

// Where the store is, as the ranks of a job see it.
enum class StoreAccess : int {
  // On a file system every rank sees (the default): each rank writes its
  // SST files into the store's staging area, which the coordinator ingests;
  // each loading rank reads the store itself. A rank that cannot see the
  // coordinator's staging directory fails the save, naming its host.
  kShared = 0,
  // On the coordinator's host only (no shared file system): every other rank
  // writes its SST files into StoreOptions::local_staging_dir and, once every
  // rank wrote, sends them to the coordinator over the job's communicator
  // (checksummed, in blocks of 8 MiB, all ranks at once); the coordinator
  // stores them in its staging area and commits as usual, all or nothing.
  // The other ranks never touch the store's path. Loads: OpenRemoteStoreReader.
  kCoordinatorOnly = 1,
};

// Whether a smaller or a larger value of a metric is better.
enum class MetricMode : int {
  kMin = 0,  // smaller is better (a loss)
  kMax = 1,  // larger is better (an accuracy)
};

// Which committed steps to keep when history is pruned (StoreOptions.retention
// on every commit, or StoreWriter::Prune). A step is kept when any rule keeps
// it; the newest step is always kept. With keep_last, keep_every and
// keep_best all 0 the policy keeps everything (it is disabled). Negative
// values are invalid, and so is keep_best without a valid best_metric
// (InvalidArgument from OpenStoreWriter and Prune).
struct RetentionPolicy {
  // Keep the newest keep_last steps. 0: this rule keeps none.
  int64_t keep_last = 0;
  // Keep every step whose number is a multiple of keep_every. 0: none.
  int64_t keep_every = 0;
  // Keep every step that has a tag. When false, a pruned step's tags are
  // deleted with it.
  bool keep_tagged = true;
  // Keep the keep_best steps with the best value of metric best_metric
  // (SaveOptions::metrics), smallest first with kMin, largest with kMax. 0:
  // this rule keeps none. Steps without that metric are never among the
  // best (another rule may keep them). Ties: of steps with equal values the
  // newer ranks first. Applied in the commit like the other rules: the step
  // being committed counts with its own metrics, and the set of steps left
  // is the one before the commit or the one after, never another.
  int64_t keep_best = 0;
  std::string best_metric;
  MetricMode best_mode = MetricMode::kMin;

  bool enabled() const { return keep_last > 0 || keep_every > 0 || keep_best > 0; }
};

struct StoreOptions {
  // Raw bytes per chunk. A read of any byte range fetches only the chunks
  // covering it, and never needs more than this much memory per chunk. Larger
  // chunks mean fewer keys and less per-chunk overhead. Range [4 KiB, 1 GiB].
  uint64_t chunk_bytes = 4u << 20;
  // How pieces of two or more dimensions are cut into chunks (ChunkLayout).
  // Reads handle both layouts, also within one step.
  ChunkLayout chunk_layout = ChunkLayout::kBoxes;
  // How chunks are compressed on save: one of Compression's values. Reads
  // handle every codec.
  Compression compression = Compression::kNone;
  int zstd_level = 1;  // 1 (fast) .. 19
  // A rank starts a new SST file after this many bytes of values. Bounds the
  // size of one file; each file is ingested as a whole.
  uint64_t max_sst_file_bytes = 1ull << 30;
  // Passed to SstFileWriter: when true, written pages are dropped from the
  // page cache, which makes an immediate read-back several times slower on
  // these machines (tools/bench/README.md). Default false keeps them cached.
  bool sst_invalidate_page_cache = false;
  // Sweep leftovers of failed saves when the coordinator opens the database.
  bool sweep_on_open = true;
  // How many SST files the writer's database keeps open at most (RocksDB's
  // table cache; files are opened when needed and closed when evicted), so
  // that the descriptors a writer holds stay bounded whatever the length of
  // the history and the world size (every step adds one file per rank).
  // Range [16, 100000]. The default leaves room under a 1024-descriptor
  // limit for a reader in the same process (ReaderOptions.max_open_files),
  // sockets and the application's own files.
  int max_open_files = 64;
  // Worker threads that checksum and compress chunks while the calling
  // thread appends them to the rank's SST file. 0: the machine's hardware
  // threads. Ranks on one host each start their own workers.
  int threads = 0;
  // Record each chunk's content hash (XXH3-128 of its raw bytes, computed by
  // the workers that checksum it) in the step's metadata
  // (StoredPiece::chunk_hashes): `ckptdb diff` then compares unchanged
  // entries without reading them. Costs one more pass over the bytes, on
  // the encoding workers.
  bool content_hashes = true;
  // Deduplication across steps: a chunk whose content hash, raw length and
  // encoding equal those of the chunk at the same position of the same
  // entry's piece (same region, dtype and chunk size) in the store's latest
  // step is not written again; the new step's metadata refers to the stored
  // chunk (StoredPiece::references). Deleting a step keeps the chunks that
  // kept steps refer to, and gives each chunk's space back with the last
  // step using it. Needs content_hashes. Each rank decides for its own
  // chunks, from the hashes the coordinator sends with the save id: no chunk
  // crosses the network to be compared.
  bool deduplicate = true;
  // Applied by every commit (StorageWriter::Finish): the steps the policy
  // drops are deleted in the same synced WriteBatch that commits the new
  // step, and their space is given back right after. Disabled by default.
  // Costs one scan of the step and tag keys per commit. The step being
  // committed is never among the dropped ones, even when it is older than
  // the steps the policy keeps. keep_last and keep_every must be >= 0.
  RetentionPolicy retention;
  // Where the store is (StoreAccess); every rank of a save must give the
  // same value (a save whose ranks disagree fails on every rank, naming
  // them).
  StoreAccess access = StoreAccess::kShared;
  // With kCoordinatorOnly, on every rank but the coordinator: the directory
  // under which the rank keeps its SST files until they are sent (a
  // directory per save, removed once sent, also when the save fails).
  // Empty: the system's temporary directory ($TMPDIR, else /tmp). Needs room
  // for the rank's share of one step; the files are not synced, so they
  // mostly stay in the page cache. A directory that a rank which died
  // (killed, out of memory) left there is removed by the next save that
  // stages in the same place on that host: each is locked by the process
  // using it (a lock file beside it), so a live one is never touched.
  std::string local_staging_dir;
  // Bucket stores (s3://) only: gc (Sweep) takes a save whose pending marker
  // is older than this, by the server's clock, as dead, and deletes its
  // objects; a younger one is taken as running and left alone. A running
  // save writes its marker again every quarter of this (at most every 5
  // minutes), so a save may run for any length of time; its commit is
  // refused (Aborted, nothing committed) if the marker went unrefreshed for
  // half of this (a server that stopped answering), since gc may then have
  // taken it for dead. So gc is safe with any threshold at least half the
  // savers'. 0: every save is taken as dead (gc only). It is also how long
  // the objects a rewrite of ReclaimSpace replaced stay for readers that
  // read the index before, and how long gc waits for a rewrite that is
  // running (its marker, kept fresh the same way). >= 0; default one hour.
  int64_t abandoned_save_seconds = 3600;
  // Bucket stores (s3://) only: a request that moves no byte for this many
  // seconds is abandoned and retried, and a second silent try ends it with
  // Unavailable naming the object and the endpoint (a server that stopped
  // answering never hangs a save). 0: CKPTDB_S3_STALL_TIMEOUT, else 10 s.
  // Range [0, 86400].
  int64_t s3_stall_timeout_seconds = 0;
};

// A committed step, as listed.
struct StepInfo {
  int64_t step = 0;
  int64_t created_unix_ms = 0;
  int32_t world_size = 1;
  uint64_t entries = 0;
  uint64_t logical_bytes = 0;
  // Bytes the step added to the store: its chunk values as stored, without
  // the chunks it shares with earlier steps.
  uint64_t stored_bytes = 0;
  std::vector<std::string> tags;  // names of the tags on this step, sorted
  // What the step recorded about itself (SaveOptions::metrics and note).
  std::map<std::string, double> metrics;
  std::string note;
  // Both the step's summary record and its metadata are unreadable: only
  // `step` is known (StoreReader::FindDamagedRecords says why).
  bool damaged = false;
};

// A small record of the store (a step's metadata or summary, a tag) whose
// value is unreadable.
struct RecordDamage {
  std::string record;  // "metadata of step 3", "summary of step 3", "tag 'best'"
  Status error;
};

// Tags name steps ("best", "release-1"). A name is 1 to 128 characters of
// [A-Za-z0-9._-] and starts with a letter, so it is never a step number; the
// name "latest" is reserved. InvalidArgument naming the problem otherwise.
Status ValidateTagName(const std::string& name);

// Figures about a store's files, for `ckptdb info`.
struct StoreStats {
  uint64_t sst_files = 0;          // live SST files
  uint64_t sst_bytes = 0;          // their total size
  uint64_t live_data_bytes = 0;    // RocksDB's estimate of live data
  uint64_t estimated_keys = 0;     // RocksDB's estimate of the number of keys
  uint64_t wal_files = 0;          // write-ahead log files
  uint64_t wal_bytes = 0;
  uint64_t disk_bytes = 0;         // every file under STORE/db
  uint64_t staging_dirs = 0;       // leftovers of unfinished saves
  std::vector<uint64_t> files_per_level;  // SST files at level 0, 1, ...
};

// What a sweep found and removed: data of save attempts recorded as pending
// (written before their data was ingested, removed by their commit) whose
// metadata was never committed, i.e. failed or interrupted saves; and
// staging directories.
struct SweepStats {
  uint64_t orphan_saves = 0;
  uint64_t staging_dirs = 0;
  // Data of save attempts that is neither committed nor recorded as pending:
  // never deleted by a sweep, because it may be a committed step whose
  // metadata was lost (or a failed save of a format-1 store, which had no
  // pending records). Counted per (step, save id).
  uint64_t unaccounted_saves = 0;
  // Save attempts whose data was deleted (every key range-deleted) but whose
  // files were still on disk, as a crash between a delete and the reclaiming
  // of its space leaves them: their files are dropped.
  uint64_t deleted_saves_reclaimed = 0;
  // Bucket stores (s3://): objects that ReclaimSpace's rewrites replaced
  // (or a failed rewrite left), deleted once abandoned_save_seconds passed
  // since the rewrite. Always 0 for a directory.
  uint64_t replaced_objects = 0;
};

// Which files StoreWriter::ReclaimSpace rewrites.
struct ReclaimOptions {
  // A data file that still holds chunks kept steps share is rewritten when
  // at least this fraction of its bytes belongs to chunks no step uses any
  // more (deleted steps' chunks). Rewriting costs reading and writing the
  // file's used bytes once (a file is rewritten again only when more of its
  // chunks fall out of use). What is left unrewritten stays below this
  // fraction of each file, so by default a store holds at most about 1.05x
  // what its steps use. Range [0, 1]; 0 rewrites every file with any unused
  // chunk. Default 0.05.
  double min_unused_fraction = 0.05;
  // Only say what would be rewritten.
  bool dry_run = false;
};

// What ReclaimSpace found and did. Byte counts of unused chunks are
// estimates from the files' indexes (to a block).
struct ReclaimStats {
  uint64_t files_rewritten = 0;  // (with dry_run: that would be)
  uint64_t bytes_before = 0;     // the rewritten files' sizes
  uint64_t bytes_after = 0;      // the sizes of the files that replace them (with dry_run: estimated)
  // Unused bytes left in files below min_unused_fraction, and how many.
  uint64_t files_left = 0;
  uint64_t unused_bytes_left = 0;
  // A bucket store (s3://) rewrites no object while a save is running (its
  // pending marker is young): how many were, when nothing was rewritten for
  // that reason. Run gc again between saves. Always 0 for a directory.
  uint64_t saves_running = 0;
};

// Thread safety: the methods of one StoreWriter may be called from several
// threads; commits, deletes, tags, sweeps and rewrites are serialised
// internally.
//
// fork() (a store in a directory): a writer whose database is open (or being
// opened) belongs to the process that opened it. In a child forked from that
// process, its calls fail at once with FailedPrecondition naming both
// processes, also when a thread of the parent was inside one of them at the
// fork (a save preparing or committing); destroying it leaves the parent's
// database alone. A child may open a store anew, with a writer of its own (its
// database gets background threads of its own), once the parent's writer of
// that store was destroyed before the fork; a store a writer of the parent held
// open at the fork stays the parent's in the child: opening it there fails with
// Unavailable (RocksDB's lock table, which the child inherits). One process
// writes a store at a time: the parent opens it again once the child's writer
// is destroyed or the child has exited. Readers take no lock and run no
// background work: a child opens readers of any store, and a reader the parent
// opened reads in the child (Refresh sees later steps), unless a thread of the
// parent was inside one of its calls at the fork. (The Python package destroys
// its idle writers before every fork: python/README.md.)
class StoreWriter : public StorageWriter {
 public:
  // Opens the database for writing if it is not yet open (creating the store
  // when missing); the coordinator's Prepare does this too. Sweeps when
  // options.sweep_on_open.
  virtual Status OpenDatabase() = 0;
  // Removes leftovers of failed saves (see SweepStats). REQUIRES: no save in
  // flight on this writer.
  virtual StatusOr<SweepStats> Sweep() = 0;
  // What Sweep would remove, without removing it.
  virtual StatusOr<SweepStats> FindLeftovers() = 0;
  // Deletes a committed step, and the tags on it, and gives its space back
  // (less the chunks that other steps share with it: they stay as long as a
  // step uses them, and so does the rest of the file holding them until
  // ReclaimSpace rewrites it). NotFound if absent; DataLoss, deleting nothing, when a
  // step that stays has unreadable chunk references.
  virtual Status DeleteStep(int64_t step) = 0;
  // Deletes every step in `steps` (and their tags) in one synced WriteBatch:
  // all of them go or, on error, none. NotFound naming the first absent step,
  // before anything is deleted. Space is given back after the commit by
  // dropping the files none of whose chunks is used (DeleteFilesInRange; no
  // data is rewritten): ReclaimSpace gives back the rest.
  virtual Status DeleteSteps(const std::vector<int64_t>& steps) = 0;
  // Gives back the space of unused chunks inside files that still hold
  // chunks kept steps share (a deleted step's file keeps its unchanged chunks
  // for the later steps that share them; the delete drops only files none of
  // whose chunks is used): rewrites each such file whose unused part reaches
  // options.min_unused_fraction with only its used chunks, one file at a
  // time, as one RocksDB compaction each. Crash-safe: a file is replaced
  // atomically, and nothing any committed step uses is ever dropped. A reader
  // that opened the store earlier and opens files lazily gets IOError (No
  // such file) reading a replaced file: Refresh. InvalidArgument for a
  // fraction outside [0, 1]; DataLoss, rewriting nothing, when a committed
  // step's chunk references are unreadable (as for DeleteStep). Saves
  // started on this writer stay safe (commits wait for it).
  // A bucket store (s3://) rewrites such an object into a new one holding its
  // used chunks and names it in one conditional index write (nothing is
  // rewritten while a save runs: ReclaimStats.saves_running); the object it
  // replaces stays abandoned_save_seconds more, so a reader that read the
  // index before still loads, then a later gc (Sweep, a pruning commit)
  // deletes it. A save that began before the rewrite and shares the
  // rewritten chunks is refused at its commit (Aborted, nothing committed).
  // Objects written before the block-starts property are kept as they are.
  virtual StatusOr<ReclaimStats> ReclaimSpace(const ReclaimOptions& options) = 0;
  // Applies `policy` to the committed steps now: returns the steps it drops
  // (increasing), deleted as by DeleteSteps unless dry_run. A disabled policy
  // drops nothing.
  virtual StatusOr<std::vector<int64_t>> Prune(const RetentionPolicy& policy, bool dry_run) = 0;
  // The steps StoreOptions.retention dropped in the last successful Finish.
  virtual std::vector<int64_t> PrunedByLastCommit() const = 0;
  // Points tag `name` at committed `step` (moving it if it named another
  // step; one synced write). InvalidArgument for a bad name, NotFound when
  // the step is not committed. Returns the step the tag named before, if any.
  virtual StatusOr<std::optional<int64_t>> Tag(int64_t step, const std::string& name) = 0;
  // Removes a tag (the step stays). NotFound when there is no such tag.
  virtual Status DeleteTag(const std::string& name) = 0;
  virtual const std::string& path() const = 0;
};

// A writer for the store at `path`: a directory, or s3://BUCKET/PREFIX for a
// store in an S3 bucket (src/bucket/README.md; proto/FORMAT.md §9:
// settings from AWS's variables and files; FailedPrecondition when no
// credentials are found). Fails with InvalidArgument naming the
// option and its value when an option is out of its range (see StoreOptions),
// and with FailedPrecondition when `path` is a file, or a non-empty directory
// that is not a ckptdb store. The store is
// created by the coordinator's first Prepare when it does not exist.
StatusOr<std::unique_ptr<StoreWriter>> OpenStoreWriter(const std::string& path, const StoreOptions& options = {});

// A reader sees one consistent state of the store (as of opening or the last
// Refresh): only whole, committed steps, never one half-way through a commit
// or a delete. Thread safety: one call at a time per object (Refresh
// replaces the underlying database handle).
class StoreReader : public StorageReader {
 public:
  // Every committed step, in increasing order, with its tags. Reads the small
  // per-step summary records, not the full metadata (fast with many steps);
  // a step whose summary is damaged is described from its metadata, and one
  // whose metadata is damaged too is listed with `damaged` set.
  virtual StatusOr<std::vector<StepInfo>> ListSteps() = 0;
  // The highest committed step, or NotFound when the store has none.
  virtual StatusOr<int64_t> LatestStep() = 0;
  // The highest committed step <= `step`, or NotFound when there is none.
  virtual StatusOr<int64_t> LatestStepAtOrBefore(int64_t step) = 0;
  // Whether `step` is committed.
  virtual StatusOr<bool> HasStep(int64_t step) = 0;
  // Every tag: name -> step. A tag may name a step that was deleted by a
  // writer that predates tags; ResolveTag reports that. A tag whose value is
  // damaged is left out (FindDamagedRecords names it; ResolveTag fails with
  // DataLoss for it); a writer's DeleteTag removes it.
  virtual StatusOr<std::map<std::string, int64_t>> ListTags() = 0;
  // The step a tag names. NotFound when there is no such tag, or when its
  // step is no longer committed.
  virtual StatusOr<int64_t> ResolveTag(const std::string& name) = 0;
  // The committed step with the best value of metric `name` (smallest with
  // kMin, largest with kMax; of equal values the newest step), as
  // RetentionPolicy::keep_best ranks them. NotFound naming the metric when
  // no step has it; InvalidArgument for an invalid name.
  virtual StatusOr<int64_t> BestStep(const std::string& name, MetricMode mode = MetricMode::kMin) = 0;
  // Every step metadata, summary and tag record whose value is unreadable,
  // in key order (each value is decoded and its checksum checked). Damage of
  // one record never stops the listing calls for the others.
  virtual StatusOr<std::vector<RecordDamage>> FindDamagedRecords() = 0;
  // File figures of the store (StoreStats).
  virtual StatusOr<StoreStats> GetStoreStats() = 0;
  // Re-reads the database so that steps committed since the reader was opened
  // become visible.
  virtual Status Refresh() = 0;
  virtual const std::string& path() const = 0;
};

struct ReaderOptions {
  // Bucket stores (s3://) only: as StoreOptions::s3_stall_timeout_seconds.
  int64_t s3_stall_timeout_seconds = 0;
  // Open every SST file of the database when the reader opens or refreshes
  // (RocksDB max_open_files = -1): one descriptor per file, i.e. per rank
  // and step of the whole history, which runs into the process's descriptor
  // limit after a few hundred steps; opening costs time in proportion to
  // the number of files (about 0.7 s for 10,000 steps here). Its one
  // advantage: a read never needs a file the writer deleted since opening.
  // false (the default): files are opened on first use, at most
  // max_open_files at a time; opening is fast whatever the history, and a
  // damaged file affects only the steps it holds. The listing calls
  // (ListSteps, LatestStep, LatestStepAtOrBefore, HasStep, ListTags,
  // ResolveTag, ReadMetadata) refresh and retry by themselves when a file
  // they need was deleted meanwhile; Read of a step that a writer deleted
  // meanwhile may fail with IOError. (Data files are never rewritten: only
  // deleting a step removes its files.)
  bool open_all_files = false;
  // Worker threads that fetch, verify and decode chunks on Read. 0: the
  // machine's hardware threads.
  int threads = 0;
  // Read SST files through mmap: a chunk is verified and decoded straight
  // from the page cache, one copy fewer than pread into a buffer (loads
  // measured 1.4-1.6x faster here with ckptdb-bench). A mapping keeps the
  // data of a file the writer deletes meanwhile. Costs address space only.
  bool mmap_reads = true;
  // With open_all_files false: how many SST files stay open at most (and
  // so, with mmap_reads, mapped). Range [16, 100000].
  int max_open_files = 64;
};

// A read-only view of the store at `path` (a directory or s3://BUCKET/PREFIX)
// as of the call (see Refresh). For a bucket: NotFound naming the bucket when
// it does not exist, or the store when no step was ever committed there.
// NotFound when nothing is at `path`; FailedPrecondition when it is a file or
// not a ckptdb store.
StatusOr<std::unique_ptr<StoreReader>> OpenStoreReader(const std::string& path, const ReaderOptions& options = {});

// A reader for Load on every rank of a job whose store every rank sees (a
// directory on a shared file system, StoreAccess::kShared, or a bucket)
// that opens the store on the coordinator only. A rank's own OpenStoreReader
// replays the database's MANIFEST, which lists a file per rank and step of
// the whole history, and lists its directory: W ranks restarting a job do
// that W times on the shared file system, and ranks run as threads of one
// process pay it W times over (at 4,096 thread-ranks, 12 ms each). Here the
// coordinator opens the database (on its first ReadMetadata or
// ReadMetadataFor, so that an error there reaches every rank) and answers
// each rank, as OpenRemoteStoreReader's does, with the step's entries and
// only the pieces that meet its regions, and also with the few table files
// its chunks lie in (a rank's own chunks lie in its own file); the rank then
// reads its chunks from those files alone (mmap when options.mmap_reads),
// each value checked by RocksDB's block checksum and its own, on
// options.threads threads, and never opens the database. What a rank
// receives does not grow with the world size. A file a rank cannot open
// (deleted since the coordinator listed it, or a store that is not on a
// file system the rank's host shares) fails that rank's read with IOError
// naming the file, and Load makes every rank fail alike.
// A bucket (s3://BUCKET/PREFIX) is read the same way: the coordinator
// alone GETs the store's index and the step's record (whose head lists
// every object of the step, a few hundred KiB at thousands of ranks) and
// names each rank the objects its chunks lie in; the rank GETs those
// objects' tails and its chunks, with a client made from the environment's
// settings (as OpenStoreReader's, options.s3_stall_timeout_seconds
// applying), and nothing else. An object a rank cannot read is DataLoss
// naming it, and Load makes every rank fail alike.
// The calls are collective, as OpenRemoteStoreReader's: every rank calls
// ReadMetadata (or ReadMetadataFor) and then Read, for the same step.
// `comm` (not owned) must outlive the reader. InvalidArgument when comm is
// null, coordinator_rank not one of its ranks, or
// options.s3_stall_timeout_seconds out of [0, 86400].
StatusOr<std::unique_ptr<StorageReader>> OpenSharedStoreReader(const std::string& path, Communicator* comm,
                                                               int coordinator_rank = 0,
                                                               const ReaderOptions& options = {});

// A reader for Load on every rank of a job whose store is on the
// coordinator's host only (StoreAccess::kCoordinatorOnly). The coordinator
// opens the store at `path` (on its first ReadMetadata or ReadMetadataFor,
// so that an error there reaches every rank) and reads it as
// OpenStoreReader's reader does; every other rank gets the step's metadata
// from the coordinator, then the stored values of exactly the chunks it
// needs, and never touches `path`. With ReadMetadataFor (what Load calls)
// each rank sends the coordinator what it loads and receives the step's
// entries without their pieces and only the pieces that meet its regions:
// what a rank receives does not grow with the world size (ReadMetadata
// sends every rank the whole step's).
// The coordinator serves each rank on a thread of its own, only chunks of
// the step being loaded (a rank that asks for another is refused with
// InvalidArgument naming the chunk), in batches of up to 16 MiB sent all at
// once; each rank receives them on a thread of its own while its
// options.threads reader threads verify each value by its own checksum,
// decode it and place it. Memory stays bounded: a rank holds at most
// 64 MiB of values received and not yet taken (one batch, when larger),
// as much in buffers kept for reuse, and one value per reader thread. A
// rank that fails part-way still takes what the coordinator sends, so
// neither is left waiting; the coordinator's error reaches the rank it
// served, and Load makes every rank fail alike.
// The calls are collective: every rank of `comm` calls ReadMetadata (or
// ReadMetadataFor) and then Read, in the same order and for the same step,
// as Load does; a
// rank that asks for another step than the coordinator fails with
// InvalidArgument. Not for LoadWhole on one rank alone. `comm` (not owned)
// must outlive the reader and support point-to-point messages (gloo's does;
// one whose SendParts/RecvParts are the defaults works, more slowly).
// InvalidArgument when comm is null or coordinator_rank not one of its ranks.
StatusOr<std::unique_ptr<StorageReader>> OpenRemoteStoreReader(const std::string& path, Communicator* comm,
                                                               int coordinator_rank = 0,
                                                               const ReaderOptions& options = {});

}  // namespace ckptdb

#endif  // CKPTDB_ROCKSDB_STORE_H_
