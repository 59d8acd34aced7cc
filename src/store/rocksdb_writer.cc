// The RocksDB store's writer side: staging SST files, ingestion, the metadata
// commit, and sweeping what failed saves left behind.
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/listener.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <unordered_map>

#include "format/chunk_codec.h"
#include "ckptdb/checkpoint.h"
#include "ckptdb/rocksdb_store.h"
#include "format/keys.h"
#include "format/metadata_codec.h"
#include "store/metadata_records.h"
#include "store/retention.h"
#include "store/shared_chunks.h"
#include "store/rocksdb_options.h"
#include "store/rocksdb_status.h"
#include "store/rocksdb_store_internal.h"
#include "util/status_macros.h"
#include "format/step_records.h"
#include "util/ordered_parallel.h"
#include "store/sst_chunk_writer.h"
#include "store/store_dir.h"
#include "store/unsynced_env.h"
#include "store/fork_safe_env.h"
#include "store/local_staging.h"
#include "store/unused_chunk_filter.h"

namespace fs = std::filesystem;

namespace ckptdb {

rocksdb::Options DatabaseOptions() {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.compression = rocksdb::kNoCompression;
  o.bottommost_compression = rocksdb::kNoCompression;
  // Blocks are checksummed with XXH3 (the fastest of RocksDB's checksums)
  // and verified on every read: see chunk_reader.cc.
  rocksdb::BlockBasedTableOptions table;
  table.checksum = rocksdb::kXXH3;
  // Index keys are the blocks' last keys, not shortened separators, so that
  // the size of a key range estimated from the index (ReclaimSpace: the
  // unused chunks of a file) is exact to a block: a shortened separator can
  // stand for keys past the block's last one, counting its block in a range
  // that starts right after it (a whole chunk).
  table.index_shortening = rocksdb::BlockBasedTableOptions::IndexShorteningMode::kNoShortening;
  // A data block closes before any key that would take it past block_size
  // (4 KiB): a block holds one chunk of any size, or small chunks that
  // together fit in 4 KiB, so reading a chunk reads and checksums its own
  // bytes (or at most 4 KiB). RocksDB's default (deviation 10) closes a
  // block only once it is 90% full, so a chunk under ~3.6 KiB (a scalar such
  // as Adam's "step", a bias, a compressed run of zeros) shared its block
  // with the next chunk however large, and reading it read both: a load of
  // 4 MiB tensors each followed by a scalar took 1.15x the CPU and 1.17x
  // the time (ckptdb-bench --data optim --tensor-bytes 4MiB). RocksDB
  // closes a block early when the key does not fit and the block is over
  // ceil(block_size * (100 - deviation) / 100) bytes: at 99, 41 bytes, less
  // than any entry of a data SST (a 29-byte key and a 16-byte chunk
  // header). 100 would turn the rule off (a limit of 0).
  table.block_size_deviation = 99;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  o.write_buffer_size = 16 << 20;
  o.max_background_jobs = 2;
  o.keep_log_file_num = 4;
  // A damaged or missing write-ahead log is an error, never a shorter
  // history: the sizes of synced WALs are recorded in the MANIFEST and
  // checked on open, and a record that fails its checksum anywhere but in
  // an unsynced tail (a crash while writing it) stops recovery.
  o.track_and_verify_wals_in_manifest = true;
  // No MADV_RANDOM / POSIX_FADV_RANDOM on SST files: chunks are megabytes
  // read front to back, and with random advice every 4 KiB page of an
  // mmap'd file is its own synchronous disk read (a cold load of 512 MiB:
  // 3.29 s instead of 0.27 s, ckptdb-bench --size 512MiB --world 2).
  o.advise_random_on_open = false;
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  return o;
}

namespace {

// Whether every write-ahead log file of the database is empty (or there is
// none): every commit was flushed to a table.
bool WriteAheadLogsEmpty(const std::string& db_dir) {
  StatusOr<DatabaseFiles> files = ListDatabaseFiles(db_dir);
  return files.ok() && files->logs_empty;
}

bool MayOpenDamagedStore(const rocksdb::Status& s, const std::string& db_dir) {
  if (s.ok() || !(s.IsIOError() || s.IsCorruption() || s.IsInvalidArgument())) return false;
  // The error names a table file of the database (NNNNNN.sst or .ldb).
  static const std::regex kTableFile("/[0-9]+\\.(sst|ldb)\\b");
  if (!std::regex_search(s.ToString(), kTableFile)) return false;
  return WriteAheadLogsEmpty(db_dir);
}

}  // namespace

rocksdb::Status OpenRocksDatabase(rocksdb::Options o, const std::string& db_dir, bool read_only, rocksdb::DB** db,
                                  const DatabaseFiles* listed) {
  auto open = [&] { return read_only ? rocksdb::DB::OpenForReadOnly(o, db_dir, db) : rocksdb::DB::Open(o, db_dir, db); };
  if (read_only && (listed != nullptr ? listed->logs_empty : WriteAheadLogsEmpty(db_dir))) {
    // What the checks would end in anyway (below), without a stat of every
    // table file on each reader's open.
    o.paranoid_checks = false;
    o.skip_checking_sst_file_sizes_on_db_open = true;
    return open();
  }
  rocksdb::Status s = open();
  if (!MayOpenDamagedStore(s, db_dir)) return s;
  o.paranoid_checks = false;
  o.skip_checking_sst_file_sizes_on_db_open = true;
  return open();
}

uint64_t NewSaveId() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}() ^
                             static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())};
  std::lock_guard<std::mutex> lock(mu);
  uint64_t id = 0;
  while (id == 0) id = rng();
  return id;
}

Status ValidateStoreOptions(const StoreOptions& o) {
  if (o.chunk_bytes < 4096 || o.chunk_bytes > kMaxChunkRawBytes) {
    return Status::InvalidArgument("StoreOptions.chunk_bytes " + std::to_string(o.chunk_bytes) +
                                   " is outside [4096, " + std::to_string(kMaxChunkRawBytes) + "]");
  }
  if (o.zstd_level < 1 || o.zstd_level > 19) {
    return Status::InvalidArgument("StoreOptions.zstd_level " + std::to_string(o.zstd_level) + " is outside [1, 19]");
  }
  if (o.max_open_files < 16 || o.max_open_files > 100000) {
    return Status::InvalidArgument("StoreOptions.max_open_files " + std::to_string(o.max_open_files) +
                                   " is outside [16, 100000]");
  }
  if (o.max_sst_file_bytes < o.chunk_bytes) {
    return Status::InvalidArgument("StoreOptions.max_sst_file_bytes is smaller than chunk_bytes");
  }
  if (o.deduplicate && !o.content_hashes) {
    return Status::InvalidArgument(
        "StoreOptions.deduplicate needs StoreOptions.content_hashes (chunks are matched by their content hash)");
  }
  if (o.chunk_layout != ChunkLayout::kBoxes && o.chunk_layout != ChunkLayout::kRows) {
    return Status::InvalidArgument("StoreOptions.chunk_layout " + std::to_string(static_cast<int>(o.chunk_layout)) +
                                   " is not a ChunkLayout (kBoxes 0, kRows 1)");
  }
  RETURN_IF_ERROR(ValidateCompression(o.compression, "StoreOptions.compression"));
  RETURN_IF_ERROR(ValidateRetentionPolicy(o.retention, "StoreOptions.retention"));
  if (o.abandoned_save_seconds < 0) {
    return Status::InvalidArgument("StoreOptions.abandoned_save_seconds is " + std::to_string(o.abandoned_save_seconds) +
                                   "; it must be >= 0");
  }
  if (o.s3_stall_timeout_seconds < 0 || o.s3_stall_timeout_seconds > 86400) {
    return Status::InvalidArgument("StoreOptions.s3_stall_timeout_seconds is " +
                                   std::to_string(o.s3_stall_timeout_seconds) + "; it must be in [0, 86400]");
  }
  return Status::OK();
}

namespace {

// How long a rank waits to see the coordinator's staging directory: up to
// 10 s (a network file system may show a new directory late), but within
// half the job's collective timeout, so that a rank that cannot see it
// reports so before the others, waiting for its write report, time out.
constexpr std::chrono::milliseconds kStagingVisibleWithin{10000};

std::chrono::milliseconds StagingVisibilityWait(const SaveContext& ctx) {
  if (ctx.collective_timeout.count() <= 0) return kStagingVisibleWithin;
  return std::min(kStagingVisibleWithin, ctx.collective_timeout / 2);
}

class RocksDBStoreWriter final : public StoreWriter {
 public:
  RocksDBStoreWriter(std::string path, StoreOptions options, const StoreWriterSeams& seams)
      : path_(std::move(path)), options_(options), env_(seams.env),
        split_elements_(seams.split_elements),
        seam_chunk_bytes_(seams.chunk_bytes),
        flush_after_writes_(seams.flush_after_writes),
        unsynced_env_(options.access == StoreAccess::kCoordinatorOnly ? NewUnsyncedEnv(env_) : nullptr),
        db_env_(NewForkSafeEnv(env_)) {}

  ~RocksDBStoreWriter() override {
    if (!db_) return;
    // A forked child's copy of its parent's database is the parent's: never
    // closed here (closing waits on the parent's background jobs, and
    // would delete files the parent may still use).
    if (db_opened_in_ != getpid()) {
      (void)db_.release();
      return;
    }
    db_->Close().PermitUncheckedError();
  }

  const std::string& path() const override { return path_; }

  Status OpenDatabase() override {
    RETURN_IF_ERROR(CheckNotForkedFromOpener());
    std::lock_guard<std::mutex> lock(mu_);
    return OpenLocked();
  }

  StatusOr<uint64_t> Prepare(int64_t step) override {
    RETURN_IF_ERROR(ValidateStep(step));
    RETURN_IF_ERROR(CheckNotForkedFromOpener());
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(OpenLocked());
    RETURN_IF_ERROR(CheckStepFree(step));
    uint64_t id = NewSaveId();
    std::error_code ec;
    fs::create_directories(StagingDir(path_, id), ec);
    if (ec) return FsError("cannot create staging directory", StagingDir(path_, id), ec);
    RETURN_IF_ERROR(WriteStagingMark(path_, id));
    // Durable before anything of this attempt is ingested: the sweep deletes
    // only data that a pending record names.
    rocksdb::WriteBatch batch;
    batch.Put(PendingKey(step, id), "").PermitUncheckedError();
    RETURN_IF_ERROR(WriteSynced(&batch, "recording the save of step " + std::to_string(step) + " as pending"));
    in_flight_.insert(id);
    return id;
  }

  StatusOr<std::vector<ReuseCandidate>> FindReusable(const SaveContext& ctx, const StepMetadata& planned) override {
    std::vector<ReuseCandidate> out;
    if (!options_.deduplicate) return out;
    RETURN_IF_ERROR(CheckNotForkedFromOpener());
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(OpenLocked());
    // The latest committed step: the one a training job's next save is most
    // like. A store without one, or whose latest metadata is unreadable,
    // offers nothing (the save writes every chunk).
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    it->SeekForPrev(MetadataKey(kMaxStep));
    int64_t latest;
    if (!it->Valid() || !ParseMetadataKey(it->key().ToStringView(), &latest)) return out;
    StatusOr<StepMetadata> base = CompleteStepMetadata(db_.get(), latest, it->value().ToStringView());
    if (!base.ok()) return out;
    const SaveRef base_save{base->step, base->save_id};
    const std::vector<SaveRef> base_shares = ReferencedSaves(*base);
    out = ReuseCandidatesFrom(std::move(*base), planned);
    if (!out.empty()) {
      // What the new step may refer to: the base's own chunks and those it
      // shares (checked by Finish).
      ReuseBase& rb = reuse_base_[ctx.save_id];
      rb.step = base_save;
      rb.saves.insert(rb.step);
      for (const SaveRef& r : base_shares) rb.saves.insert(r);
    }
    return out;
  }

  Status PrepareStorage(const SaveContext& ctx, const std::vector<WriteItem>& items) override {
    RETURN_IF_ERROR(CheckWriteItems(ctx, items));
    if (SendsFiles(ctx)) {
      // This rank's files stay on its own host until they are sent, in a
      // folder this process locks; what dead ranks left there goes first
      // (store/local_staging.h).
      (void)SweepAbandonedStagingFolders(LocalStagingRoot());
      ASSIGN_OR_RETURN(StagingLock lock, MakeStagingFolder(LocalStagingDir(ctx)));
      std::lock_guard<std::mutex> l(staging_mu_);
      staging_locks_[ctx.save_id] = std::move(lock);
      return Status::OK();
    }
    // The coordinator made the directory and marked it: a rank that does not
    // see it is on a host where the store is not the coordinator's.
    return WaitForStagingMark(path_, ctx.save_id, StagingVisibilityWait(ctx));
  }

  FileDelivery delivery() const override {
    return options_.access == StoreAccess::kCoordinatorOnly ? FileDelivery::kSent : FileDelivery::kShared;
  }

  StatusOr<std::string> ReceivedFilePath(const SaveContext& ctx, int rank, const std::string& name) override {
    if (delivery() != FileDelivery::kSent) {
      return Status::FailedPrecondition("store '" + path_ + "' is shared: no files are sent to the coordinator");
    }
    return (fs::path(StagingDir(path_, ctx.save_id)) / ("from-rank-" + std::to_string(rank) + "-" + name)).string();
  }

  void DiscardLocalFiles(const SaveContext& ctx) override {
    if (!SendsFiles(ctx)) return;
    std::optional<StagingLock> lock;
    {
      std::lock_guard<std::mutex> l(staging_mu_);
      auto it = staging_locks_.find(ctx.save_id);
      if (it != staging_locks_.end()) {
        lock = std::move(it->second);
        staging_locks_.erase(it);
      }
    }
    if (lock.has_value()) {
      lock->RemoveFolder();
    } else {  // (a folder this writer did not make: its PrepareStorage failed, or another writer's)
      std::error_code ec;
      fs::remove_all(LocalStagingDir(ctx), ec);
    }
  }

  StatusOr<WriteResult> Write(const SaveContext& ctx, const std::vector<WriteItem>& items) override {
    ChunkWriteOptions o;
    o.chunk_bytes = options_.chunk_bytes;
    o.compression = options_.compression;
    o.zstd_level = options_.zstd_level;
    o.max_sst_file_bytes = options_.max_sst_file_bytes;
    o.invalidate_page_cache = options_.sst_invalidate_page_cache;
    o.threads = options_.threads > 0 ? options_.threads : DefaultParallelism();
    o.split_elements = split_elements_;
    if (seam_chunk_bytes_ != 0) o.chunk_bytes = seam_chunk_bytes_;
    o.boxes = options_.chunk_layout == ChunkLayout::kBoxes;
    o.content_hashes = options_.content_hashes;
    if (SendsFiles(ctx)) {
      // Files that are sent and deleted need no sync (the coordinator syncs
      // what it receives).
      rocksdb::Options unsynced = Options();
      unsynced.env = unsynced_env_.get();
      o.writeback_bytes = 0;  // never synced: left to the page cache
      return WriteItemsToSst(LocalStagingDir(ctx), ctx, items, unsynced, o);
    }
    return WriteItemsToSst(StagingDir(path_, ctx.save_id), ctx, items, Options(), o);
  }


  Status Finish(const SaveContext& ctx, const StepMetadata& metadata, const std::vector<WriteResult>& results) override {
    RETURN_IF_ERROR(CheckNotForkedFromOpener());
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(OpenLocked());
    Status v = ValidateStepMetadata(metadata);
    if (!v.ok()) return Status::Internal("refusing to commit inconsistent metadata: " + v.message());
    std::vector<std::string> files;
    for (const WriteResult& r : results) files.insert(files.end(), r.files.begin(), r.files.end());
    if (!files.empty()) {
      RETURN_IF_ERROR(FromRocks(db_->IngestExternalFile(files, IngestOptions()),
                                "ingesting " + std::to_string(files.size()) + " SST files of step " +
                                    std::to_string(ctx.step)));
    }
    // The step may have been committed by another save on this writer since
    // Prepare; the DB lock keeps other processes out, and mu_ other saves of
    // this writer until the commit.
    RETURN_IF_ERROR(CheckStepFree(ctx.step));
    const std::vector<SaveRef> referenced = ReferencedSaves(metadata);
    if (!referenced.empty()) RETURN_IF_ERROR(CheckReferencesLive(ctx, referenced));
    const std::vector<std::optional<PiecesGrid>> grids = GridsOf(metadata);
    RETURN_IF_ERROR(IngestPiecesRecords(ctx, metadata, grids));
    rocksdb::WriteBatch batch;
    // The step's M record: what makes it exist.
    RETURN_IF_ERROR(AddStepRecordPut(metadata, grids, &batch));
    if (!referenced.empty()) {
      RETURN_IF_ERROR(FromRocks(batch.Put(ReferencesKey(ctx.step), EncodeReferencesValue(referenced)),
                                "metadata batch"));
    }
    RETURN_IF_ERROR(
        FromRocks(batch.Put(SummaryKey(ctx.step), EncodeSummaryValue(SummarizeStep(metadata))), "metadata batch"));
    RETURN_IF_ERROR(FromRocks(batch.Delete(PendingKey(ctx.step, ctx.save_id)), "metadata batch"));
    // Retention: the steps the policy drops go in the same batch, so the new
    // step and the pruning commit together or not at all.
    std::vector<int64_t> pruned;
    std::vector<KeyRange> dropped;  // data ranges the pruning drops
    if (options_.retention.enabled()) {
      ASSIGN_OR_RETURN(History h, ReadHistory());
      h.steps.insert(std::upper_bound(h.steps.begin(), h.steps.end(), ctx.step), ctx.step);
      std::map<int64_t, double> best_values;
      if (options_.retention.keep_best > 0) {
        ASSIGN_OR_RETURN(best_values, MetricOfSteps(h.steps, options_.retention.best_metric));
        auto own = metadata.metrics.find(options_.retention.best_metric);
        if (own != metadata.metrics.end()) best_values[ctx.step] = own->second;
      }
      pruned = StepsToPrune(h.steps, h.TaggedSteps(), options_.retention, best_values);
      // A save never commits a step only to delete it (a step numbered below
      // the ones kept, saved late): what the caller just saved stays.
      pruned.erase(std::remove(pruned.begin(), pruned.end(), ctx.step), pruned.end());
      // (AddStepDeletes adds nothing to the batch when it fails.)
      StatusOr<std::vector<KeyRange>> d = AddStepDeletes(pruned, h, &metadata, &batch);
      if (d.ok()) {
        dropped = std::move(d).value();
      } else if (d.status().code() == StatusCode::kDataLoss) {
        // A kept step's references are unreadable: prune nothing this time
        // (the commit stands; `ckptdb verify` names the damage).
        pruned.clear();
      } else {
        return d.status();
      }
    }
    RETURN_IF_ERROR(WriteSynced(&batch, "committing the metadata of step " + std::to_string(ctx.step)));
    RemoveStaging(ctx.save_id);
    in_flight_.erase(ctx.save_id);
    reuse_base_.erase(ctx.save_id);
    pruned_by_last_commit_ = pruned;
    // The commit stands. Move it out of the WAL into a checksummed SST now,
    // so that a committed step never depends on the log for long; and give
    // the space of pruned steps back. Both are best effort (the next commit,
    // delete or sweep retries them).
    (void)FlushLocked();
    (void)ReclaimRanges(dropped);
    return Status::OK();
  }

  // The pieces records of the step `metadata` commits, ingested as one SST
  // file of their own before the batch that puts its M value: nothing reads
  // them before that batch lands (a reader finds them through M), and none
  // passes through a write batch, the log and a memtable, each a copy (a
  // step of 600,000 pieces: 600,000 records). Records that an earlier save
  // of this step ingested without committing (a crash between the two) are
  // deleted first, so the step holds its own only: the step is free (no M
  // record), so no committed step's are touched.
  Status IngestPiecesRecords(const SaveContext& ctx, const StepMetadata& metadata,
                             const std::vector<std::optional<PiecesGrid>>& grids) {
    const std::string what = "the pieces records of step " + std::to_string(ctx.step);
    const std::string file = StagingDir(path_, ctx.save_id) + "/pieces.sst";
    ASSIGN_OR_RETURN(uint64_t records, WritePiecesRecordsFile(metadata, grids, Options(), file));
    if (records == 0) return Status::OK();
    ASSIGN_OR_RETURN(bool stale_records, HasPiecesRecords(ctx.step));
    if (stale_records) {
      rocksdb::WriteBatch stale;
      RETURN_IF_ERROR(AddPiecesRecordsDelete(db_.get(), ctx.step, &stale));
      RETURN_IF_ERROR(WriteSynced(&stale, "deleting " + what + " an earlier save left"));
    }
    return FromRocks(db_->IngestExternalFile({file}, IngestOptions()), "ingesting " + what);
  }

  // How a save's files are ingested: hard links (no copy of the data), with
  // no snapshot kept for them (no reader needs their keys before the
  // commit).
  static rocksdb::IngestExternalFileOptions IngestOptions() {
    rocksdb::IngestExternalFileOptions io;
    io.move_files = true;
    io.snapshot_consistency = false;
    io.allow_global_seqno = true;
    io.allow_blocking_flush = true;
    io.write_global_seqno = false;
    return io;
  }

  // Whether some pieces record of `step` is visible.
  StatusOr<bool> HasPiecesRecords(int64_t step) {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    it->Seek(PiecesStepBegin(step));
    const bool found = it->Valid() && it->key().compare(PiecesStepEnd(step)) < 0;
    RETURN_IF_ERROR(FromRocks(it->status(), "reading the pieces records of step " + std::to_string(step)));
    return found;
  }

  // A save shares chunks only with the step FindReusable offered (and what
  // that step itself shares): refused when that step was deleted since, as
  // its chunks may be gone.
  Status CheckReferencesLive(const SaveContext& ctx, const std::vector<SaveRef>& referenced) {
    auto b = reuse_base_.find(ctx.save_id);
    if (b == reuse_base_.end()) {
      return Status::Internal("the metadata of step " + std::to_string(ctx.step) +
                              " shares chunks, but this save was offered none");
    }
    const ReuseBase& base = b->second;
    ASSIGN_OR_RETURN(std::optional<uint64_t> id, CommittedSaveId(base.step.step));
    if (!id || *id != base.step.save_id) {
      return Status::FailedPrecondition("step " + std::to_string(base.step.step) + ", whose chunks step " +
                                        std::to_string(ctx.step) +
                                        " shares, was deleted while the save ran; save the step again");
    }
    for (const SaveRef& r : referenced) {
      if (base.saves.count(r) == 0) {
        return Status::Internal("step " + std::to_string(ctx.step) + " refers to chunks of save " +
                                std::to_string(r.save_id) + " of step " + std::to_string(r.step) +
                                ", which step " + std::to_string(base.step.step) + " does not hold");
      }
    }
    return Status::OK();
  }

  void Abort(const SaveContext& ctx) override {
    // (A forked child's copy has no save of its own to abort: Prepare
    // refused it.)
    if (!CheckNotForkedFromOpener().ok()) return;
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.erase(ctx.save_id);
    reuse_base_.erase(ctx.save_id);
    if (db_ && db_opened_in_ == getpid()) {
      (void)DropSaveData(ctx.step, ctx.save_id);
      // Out of the WAL, as commits are: a store whose WAL is empty can still
      // be opened when one of its SST files is damaged.
      (void)FlushLocked();
    }
    RemoveStaging(ctx.save_id);
  }

  // Moves what is in the memtable (and so only in the WAL) into an SST.
  Status FlushLocked() {
    if (!flush_after_writes_) return Status::OK();
    rocksdb::FlushOptions fo;
    fo.wait = true;
    fo.allow_write_stall = true;
    return FromRocks(db_->Flush(fo), "flushing the commit log of '" + path_ + "'");
  }

  StatusOr<SweepStats> Sweep() override {
    RETURN_IF_ERROR(CheckNotForkedFromOpener());
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(OpenLocked());
    return SweepLocked();
  }

  StatusOr<SweepStats> FindLeftovers() override {
    RETURN_IF_ERROR(CheckNotForkedFromOpener());
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(OpenLocked());
    return SweepLocked(/*dry_run=*/true);
  }

  Status DeleteStep(int64_t step) override { return DeleteSteps({step}); }

  Status DeleteSteps(const std::vector<int64_t>& steps) override {
    for (int64_t step : steps) RETURN_IF_ERROR(ValidateStep(step));
    std::vector<int64_t> sorted = steps;
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    RETURN_IF_ERROR(CheckNotForkedFromOpener());
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(OpenLocked());
    ASSIGN_OR_RETURN(History h, ReadHistory());
    for (int64_t step : sorted) {
      if (!std::binary_search(h.steps.begin(), h.steps.end(), step)) {
        return Status::NotFound("step " + std::to_string(step) + " not found in store '" + path_ + "'");
      }
    }
    return DeleteStepsLocked(sorted, h);
  }

  StatusOr<std::vector<int64_t>> Prune(const RetentionPolicy& policy, bool dry_run) override {
    RETURN_IF_ERROR(ValidateRetentionPolicy(policy));
    RETURN_IF_ERROR(CheckNotForkedFromOpener());
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(OpenLocked());
    ASSIGN_OR_RETURN(History h, ReadHistory());
    std::map<int64_t, double> best_values;
    if (policy.keep_best > 0) {
      ASSIGN_OR_RETURN(best_values, MetricOfSteps(h.steps, policy.best_metric));
    }
    std::vector<int64_t> drop = StepsToPrune(h.steps, h.TaggedSteps(), policy, best_values);
    if (!dry_run && !drop.empty()) RETURN_IF_ERROR(DeleteStepsLocked(drop, h));
    return drop;
  }

  StatusOr<ReclaimStats> ReclaimSpace(const ReclaimOptions& options) override {
    if (!(options.min_unused_fraction >= 0 && options.min_unused_fraction <= 1)) {
      return Status::InvalidArgument("ReclaimOptions.min_unused_fraction " +
                                     std::to_string(options.min_unused_fraction) + " is outside [0, 1]");
    }
    RETURN_IF_ERROR(CheckNotForkedFromOpener());
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(OpenLocked());
    ASSIGN_OR_RETURN(std::vector<UnusedInFile> files, FindUnusedChunks());
    ReclaimStats stats;
    for (const UnusedInFile& f : files) {
      if (static_cast<double>(f.unused_bytes) < options.min_unused_fraction * static_cast<double>(f.file.size)) {
        stats.files_left++;
        stats.unused_bytes_left += f.unused_bytes;
        continue;
      }
      stats.files_rewritten++;
      stats.bytes_before += f.file.size;
      if (options.dry_run) {
        stats.bytes_after += f.file.size - std::min(f.file.size, f.unused_bytes);
        continue;
      }
      ASSIGN_OR_RETURN(uint64_t after, RewriteWithout(f));
      stats.bytes_after += after;
    }
    return stats;
  }

  std::vector<int64_t> PrunedByLastCommit() const override {
    if (!CheckNotForkedFromOpener().ok()) return {};
    std::lock_guard<std::mutex> lock(mu_);
    return pruned_by_last_commit_;
  }

  StatusOr<std::optional<int64_t>> Tag(int64_t step, const std::string& name) override {
    RETURN_IF_ERROR(ValidateStep(step));
    RETURN_IF_ERROR(ValidateTagName(name));
    RETURN_IF_ERROR(CheckNotForkedFromOpener());
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(OpenLocked());
    std::string v;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), MetadataKey(step), &v);
    if (s.IsNotFound()) {
      return Status::NotFound("step " + std::to_string(step) + " not found in store '" + path_ + "'");
    }
    RETURN_IF_ERROR(FromRocks(s, "reading the metadata of step " + std::to_string(step)));
    std::optional<int64_t> previous;
    s = db_->Get(rocksdb::ReadOptions(), TagKey(name), &v);
    if (s.ok()) {
      auto old = DecodeTagValue(v);  // a damaged value is simply replaced
      if (old.ok()) previous = *old;
    } else if (!s.IsNotFound()) {
      RETURN_IF_ERROR(FromRocks(s, "reading tag '" + name + "'"));
    }
    rocksdb::WriteBatch batch;
    batch.Put(TagKey(name), EncodeTagValue(step)).PermitUncheckedError();
    RETURN_IF_ERROR(WriteSynced(&batch, "writing tag '" + name + "'"));
    (void)FlushLocked();
    return previous;
  }

  Status DeleteTag(const std::string& name) override {
    RETURN_IF_ERROR(ValidateTagName(name));
    RETURN_IF_ERROR(CheckNotForkedFromOpener());
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(OpenLocked());
    std::string v;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), TagKey(name), &v);
    if (s.IsNotFound()) return Status::NotFound("no tag '" + name + "' in store '" + path_ + "'");
    RETURN_IF_ERROR(FromRocks(s, "reading tag '" + name + "'"));
    rocksdb::WriteBatch batch;
    batch.Delete(TagKey(name)).PermitUncheckedError();
    RETURN_IF_ERROR(WriteSynced(&batch, "deleting tag '" + name + "'"));
    (void)FlushLocked();
    return Status::OK();
  }

 private:
  // The committed steps and the tags, as the writer sees them now.
  struct History {
    std::vector<int64_t> steps;                      // increasing
    std::vector<std::pair<std::string, int64_t>> tags;  // name -> step
    std::set<int64_t> TaggedSteps() const {
      std::set<int64_t> out;
      for (const auto& t : tags) {
        if (t.second >= 0) out.insert(t.second);
      }
      return out;
    }
  };

  // The value of metric `name` of each of `steps` that has it, from its
  // summary record, or from its metadata when the summary is missing or
  // unreadable. A step whose records are both unreadable has no value (it
  // is never among the best; `ckptdb verify` names the damage).
  StatusOr<std::map<int64_t, double>> MetricOfSteps(const std::vector<int64_t>& steps, const std::string& name) {
    std::map<int64_t, double> out;
    for (int64_t step : steps) {
      std::string v;
      std::map<std::string, double> metrics;
      rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), SummaryKey(step), &v);
      StatusOr<StepSummary> sum = s.ok() ? DecodeSummaryValue(v) : StatusOr<StepSummary>(Status::NotFound(""));
      if (!s.ok() && !s.IsNotFound()) RETURN_IF_ERROR(FromRocks(s, "reading the summary of step " + std::to_string(step)));
      if (sum.ok()) {
        metrics = std::move(sum->metrics);
      } else {
        s = db_->Get(rocksdb::ReadOptions(), MetadataKey(step), &v);
        if (s.IsNotFound()) continue;  // not committed (the step being committed: the caller adds it)
        RETURN_IF_ERROR(FromRocks(s, "reading the metadata of step " + std::to_string(step)));
        auto md = DecodeStepHeader(step, v);  // (the metrics are in the M record)
        if (!md.ok()) continue;
        metrics = std::move(md->metrics);
      }
      auto it = metrics.find(name);
      if (it != metrics.end()) out[step] = it->second;
    }
    return out;
  }

  StatusOr<History> ReadHistory() {
    History h;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(std::string(1, kMetadataPrefix)); it->Valid(); it->Next()) {
      int64_t step;
      if (!ParseMetadataKey(it->key().ToStringView(), &step)) break;
      h.steps.push_back(step);
    }
    for (it->Seek(std::string(1, kTagPrefix)); it->Valid(); it->Next()) {
      std::string name;
      if (!ParseTagKey(it->key().ToStringView(), &name)) break;
      // A damaged tag names no step: it protects none from retention, and
      // DeleteTag removes it.
      auto step = DecodeTagValue(it->value().ToStringView());
      h.tags.emplace_back(std::move(name), step.ok() ? *step : -1);
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "listing steps and tags of '" + path_ + "'"));
    return h;
  }

  // Adds to `batch` what removes each of `steps` (committed) whole: its
  // metadata, summary, references record, the tags on it and range deletes
  // of its data, less the chunks that steps which stay refer to (with
  // `committing`, the step the same batch commits, among them). Returns the
  // data ranges dropped, for ReclaimRanges once the batch is written. On
  // error nothing is added to `batch`.
  StatusOr<std::vector<KeyRange>> AddStepDeletes(const std::vector<int64_t>& steps, const History& h,
                                                 const StepMetadata* committing, rocksdb::WriteBatch* batch) {
    if (steps.empty()) return std::vector<KeyRange>{};
    const std::set<int64_t> deleted(steps.begin(), steps.end());
    ASSIGN_OR_RETURN(auto refs, ReadReferenceRecords());
    ASSIGN_OR_RETURN(auto committed, ReadCommitted());
    SharedChunkView view;
    for (auto& [step, saves] : refs) {
      if (committed.count(step) == 0) continue;  // a record without its step (never written so)
      (deleted.count(step) > 0 ? view.deleted_refs : view.kept_refs)[step] = std::move(saves);
    }
    if (committing != nullptr) {
      std::vector<SaveRef> saves = ReferencedSaves(*committing);
      if (!saves.empty()) view.kept_refs[committing->step] = std::move(saves);
    }
    view.kept_owns = [&](const SaveRef& save) {
      if (committing != nullptr && save.step == committing->step) return committing->save_id == save.save_id;
      auto c = committed.find(save.step);
      if (c == committed.end() || deleted.count(save.step) > 0) return false;
      return c->second == save.save_id || c->second == kUnreadable;
    };
    view.metadata_of = [&](int64_t step) -> StatusOr<StepMetadata> {
      if (committing != nullptr && step == committing->step) return *committing;
      return ReadStepMetadata(db_.get(), step);
    };
    // The data first: when it cannot be dropped safely, nothing is deleted.
    ASSIGN_OR_RETURN(std::vector<KeyRange> drop, DataRangesToDrop(deleted, view));
    for (int64_t step : steps) {
      RETURN_IF_ERROR(AddStepMetadataDeletes(db_.get(), step, batch));
      batch->Delete(SummaryKey(step)).PermitUncheckedError();
      batch->Delete(ReferencesKey(step)).PermitUncheckedError();
      for (const auto& [name, tagged] : h.tags) {
        if (tagged == step) batch->Delete(TagKey(name)).PermitUncheckedError();
      }
    }
    for (const KeyRange& r : drop) {
      batch->DeleteRange(db_->DefaultColumnFamily(), r.first, r.second).PermitUncheckedError();
    }
    return drop;
  }

  Status DeleteStepsLocked(const std::vector<int64_t>& steps, const History& h) {
    if (steps.empty()) return Status::OK();
    // The metadata goes in the same batch as the range deletes: each step
    // disappears whole, and its data becomes unreachable at once.
    rocksdb::WriteBatch batch;
    ASSIGN_OR_RETURN(std::vector<KeyRange> dropped, AddStepDeletes(steps, h, nullptr, &batch));
    RETURN_IF_ERROR(WriteSynced(&batch, steps.size() == 1 ? "deleting step " + std::to_string(steps[0])
                                                          : "deleting " + std::to_string(steps.size()) + " steps"));
    (void)FlushLocked();  // the delete leaves the WAL at once, as commits do
    Status reclaimed = ReclaimRanges(dropped);
    RestoreReserve(path_);
    return reclaimed;
  }

  // A data file holding chunks that kept steps share, and the key ranges of
  // the chunks in it that no step uses (already range-deleted).
  struct UnusedInFile {
    rocksdb::LiveFileMetaData file;
    std::vector<KeyRange> unused;
    uint64_t unused_bytes = 0;  // estimated from the file's index
  };

  // Every data file of a save that committed steps share chunks of but none
  // owns, with unused chunks in it.
  StatusOr<std::vector<UnusedInFile>> FindUnusedChunks() {
    ASSIGN_OR_RETURN(auto refs, ReadReferenceRecords());
    ASSIGN_OR_RETURN(auto committed, ReadCommitted());
    SharedChunkView view;
    for (auto& [step, saves] : refs) {
      if (committed.count(step) > 0) view.kept_refs[step] = std::move(saves);
    }
    view.kept_owns = [&](const SaveRef& save) {
      auto c = committed.find(save.step);
      return c != committed.end() && (c->second == save.save_id || c->second == kUnreadable);
    };
    view.metadata_of = [&](int64_t step) -> StatusOr<StepMetadata> {
      return ReadStepMetadata(db_.get(), step);
    };
    ASSIGN_OR_RETURN(auto used, UsedRangesOfSharedSaves(view));
    std::vector<UnusedInFile> out;
    if (used.empty()) return out;
    std::vector<rocksdb::LiveFileMetaData> files;
    db_->GetLiveFilesMetaData(&files);
    for (rocksdb::LiveFileMetaData& f : files) {
      // Level 0 files (flushed, or ingested over a flushed one) overlap
      // others and cannot be compacted alone; a file of keys of several
      // saves or of records besides data is left alone too.
      DataKey a, b;
      if (f.level == 0 || !ParseDataKey(f.smallestkey, &a) || !ParseDataKey(f.largestkey, &b) || a.step != b.step ||
          a.save_id != b.save_id) {
        continue;
      }
      auto u = used.find(SaveRef{a.step, a.save_id});
      if (u == used.end() || in_flight_.count(a.save_id) > 0) continue;
      const KeyRange span(f.smallestkey, f.largestkey + std::string(1, '\0'));
      std::vector<KeyRange> unused = SubtractRanges({span}, u->second);
      if (unused.empty()) continue;
      ASSIGN_OR_RETURN(uint64_t bytes, EstimateBytes(f, span, unused));
      if (bytes == 0) continue;  // only gaps between chunks
      out.push_back(UnusedInFile{std::move(f), std::move(unused), bytes});
    }
    return out;
  }

  // The bytes of `ranges` (sorted, inside `span`, the key span of file `f`)
  // in `f`, from its index, to a block. A range that runs to the end of the
  // span would also count the file's index, filter and properties blocks;
  // they are left out.
  StatusOr<uint64_t> EstimateBytes(const rocksdb::LiveFileMetaData& f, const KeyRange& span,
                                   const std::vector<KeyRange>& ranges) {
    std::vector<rocksdb::Range> r;
    r.reserve(ranges.size() + 1);
    for (const KeyRange& k : ranges) r.emplace_back(k.first, k.second);
    r.emplace_back(span.first, span.second);
    std::vector<uint64_t> sizes(r.size(), 0);
    rocksdb::SizeApproximationOptions so;
    so.include_memtables = false;
    so.include_files = true;
    const std::string what = "estimating the unused bytes of " + f.name;
    RETURN_IF_ERROR(FromRocks(
        db_->GetApproximateSizes(so, db_->DefaultColumnFamily(), r.data(), static_cast<int>(r.size()), sizes.data()),
        what));
    uint64_t bytes = 0;
    for (size_t i = 0; i + 1 < sizes.size(); ++i) bytes += sizes[i];
    if (ranges.back().second != span.second) return bytes;
    rocksdb::TablePropertiesCollection props;
    RETURN_IF_ERROR(
        FromRocks(db_->GetPropertiesOfTablesInRange(db_->DefaultColumnFamily(), &r.back(), 1, &props), what));
    auto p = props.find(f.db_path + f.name);
    if (p == props.end() || !p->second) return bytes;
    const uint64_t whole = sizes.back();
    const uint64_t past_data = whole > p->second->data_size ? whole - p->second->data_size : 0;
    return bytes - std::min(sizes[sizes.size() - 2], past_data);
  }

  // Compacts `f` alone into its own level with its unused chunks filtered
  // out: RocksDB writes and syncs the new file, then swaps the two in one
  // MANIFEST edit (a crash leaves one or the other). Returns the new size.
  StatusOr<uint64_t> RewriteWithout(const UnusedInFile& f) {
    rocksdb::CompactionOptions co;
    co.compression = rocksdb::kNoCompression;  // chunks are compressed by ckptdb
    rocksdb::CompactionJobInfo info;
    std::vector<std::string> outputs;
    unused_chunk_filter_.Arm(f.unused);
    rocksdb::Status s = db_->CompactFiles(co, {f.file.name}, f.file.level, -1, &outputs, &info);
    unused_chunk_filter_.Disarm();
    RETURN_IF_ERROR(FromRocks(s, "rewriting " + f.file.name + " without its unused chunks"));
    return info.stats.total_output_bytes;
  }

  // Every step's references record (R key) -> the saves it refers to; a
  // damaged record is read from the step's metadata instead, and is
  // nullopt when that is unreadable too.
  StatusOr<std::map<int64_t, std::optional<std::vector<SaveRef>>>> ReadReferenceRecords() {
    std::map<int64_t, std::optional<std::vector<SaveRef>>> out;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(std::string(1, kReferencesPrefix)); it->Valid(); it->Next()) {
      int64_t step;
      if (!ParseReferencesKey(it->key().ToStringView(), &step)) break;
      StatusOr<std::vector<SaveRef>> saves = DecodeReferencesValue(it->value().ToStringView());
      if (saves.ok()) {
        out[step] = std::move(saves).value();
        continue;
      }
      std::string v;
      StatusOr<StepMetadata> md = Status::NotFound("");
      if (db_->Get(rocksdb::ReadOptions(), MetadataKey(step), &v).ok()) md = CompleteStepMetadata(db_.get(), step, v);
      out[step] = md.ok() ? std::optional<std::vector<SaveRef>>(ReferencedSaves(*md)) : std::nullopt;
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "listing the references of steps in '" + path_ + "'"));
    return out;
  }

  // One DeleteFilesInRanges call for all of `ranges` (one MANIFEST edit; a
  // call per step made pruning 1,000 steps take seconds).
  Status ReclaimRanges(const std::vector<std::pair<std::string, std::string>>& ranges) {
    if (ranges.empty()) return Status::OK();
    std::vector<rocksdb::Slice> bounds;
    bounds.reserve(2 * ranges.size());
    for (const auto& [begin, end] : ranges) {
      bounds.emplace_back(begin);
      bounds.emplace_back(end);
    }
    std::vector<rocksdb::RangePtr> ptrs;
    ptrs.reserve(ranges.size());
    for (size_t i = 0; i < ranges.size(); ++i) ptrs.emplace_back(&bounds[2 * i], &bounds[2 * i + 1]);
    return FromRocks(rocksdb::DeleteFilesInRanges(db_.get(), db_->DefaultColumnFamily(), ptrs.data(), ptrs.size(),
                                                  /*include_end=*/false),
                     "reclaiming the files of " + std::to_string(ranges.size()) + " deleted range(s)");
  }

  // A synced write of `batch`: durable when it returns OK.
  Status WriteSynced(rocksdb::WriteBatch* batch, const std::string& what) {
    rocksdb::WriteOptions wo;
    wo.sync = true;
    return FromRocks(db_->Write(wo, batch), what);
  }

  rocksdb::Options Options() const {
    rocksdb::Options o = DatabaseOptions();
    o.max_open_files = options_.max_open_files;
    o.env = db_env_.get();
    // (Inert unless ReclaimSpace armed it; a reader needs none.)
    o.compaction_filter = &unused_chunk_filter_;
    return o;
  }

  // FailedPrecondition when this process was forked from the one that opened
  // the database (or was opening it): the database, its lock and its
  // background threads are that process's. Checked before mu_ is taken: a
  // thread of the parent may have held it at the fork (a save preparing or
  // committing), and no thread here would ever release it.
  Status CheckNotForkedFromOpener() const {
    const pid_t opener = db_opened_in_.load();
    if (opener == 0 || opener == getpid()) return Status::OK();
    return Status::FailedPrecondition(
        "store '" + path_ + "' was opened for writing by process " + std::to_string(opener) +
        ", which this process (" + std::to_string(getpid()) +
        ") was forked from: a writer is not usable across fork(); open a writer in this process (the parent "
        "must close its own first: one process writes a store at a time)");
  }

  Status OpenLocked() {
    RETURN_IF_ERROR(CheckNotForkedFromOpener());
    if (db_) return Status::OK();
    // Marked before opening: a child forked while this thread opens is
    // refused as once it is open.
    db_opened_in_ = getpid();
    Status opened = OpenNewLocked();
    if (!db_) db_opened_in_ = 0;
    return opened;
  }

  Status OpenNewLocked() {
    RETURN_IF_ERROR(ValidateStoreOptions(options_));
    ASSIGN_OR_RETURN(StorePathState state, InspectStorePath(path_));
    (void)state;
    RETURN_IF_ERROR(CreateStoreDir(path_));  // refuses a newer format
    RETURN_IF_ERROR(CheckWriteAheadLogPresent(path_));
    // On a (nearly) full disk, make room for RocksDB's own files first.
    ReleaseReserveIfLow(path_);
    RETURN_IF_ERROR(CheckRoomToOpen(path_));
    rocksdb::DB* db = nullptr;
    // (A store with a damaged table file opens too: its other steps stay
    // usable and the damaged one can be dropped.)
    rocksdb::Status s = OpenRocksDatabase(Options(), DbDir(path_), /*read_only=*/false, &db);
    if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
      return Status::Unavailable("store '" + path_ + "' is open for writing by another process: " + s.ToString());
    }
    RETURN_IF_ERROR(FromRocks(s, "opening store '" + path_ + "'"));
    db_.reset(db);
    // The lock is ours: no older writer is writing format 1 beside us.
    if (Status up = UpgradeStoreFormat(path_); !up.ok()) {
      db_.reset();
      return up;
    }
    if (options_.sweep_on_open) {
      auto swept = SweepLocked();
      if (!swept.ok()) return swept.status().WithContext("sweeping store '" + path_ + "' on open");
    }
    RestoreReserve(path_);
    return Status::OK();
  }

  Status CheckStepFree(int64_t step) {
    std::string v;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), MetadataKey(step), &v);
    if (s.ok()) return Status::AlreadyExists("step " + std::to_string(step) + " already exists in store '" + path_ + "'");
    if (s.IsNotFound()) return Status::OK();
    return FromRocks(s, "checking whether step " + std::to_string(step) + " exists");
  }

  // Removes the keys of one save attempt and the files holding only them;
  // and, when its step has no M record, the step's pieces records (what the
  // attempt ingested before its commit failed: IngestPiecesRecords). Called
  // under mu_, so no save of this writer is between that ingestion and its
  // commit.
  Status DropSaveData(int64_t step, uint64_t save_id) {
    std::string begin = DataSaveBegin(step, save_id);
    std::string end = DataSaveEnd(step, save_id);
    rocksdb::WriteBatch batch;
    RETURN_IF_ERROR(FromRocks(batch.DeleteRange(db_->DefaultColumnFamily(), begin, end), "dropping save data"));
    if (CheckStepFree(step).ok()) RETURN_IF_ERROR(AddPiecesRecordsDelete(db_.get(), step, &batch));
    RETURN_IF_ERROR(FromRocks(batch.Delete(PendingKey(step, save_id)), "dropping save data"));
    RETURN_IF_ERROR(WriteSynced(&batch, "dropping the data of a failed save of step " + std::to_string(step)));
    return ReclaimRanges({{begin, end}});
  }

  // Whether this rank keeps its files locally and sends them.
  bool SendsFiles(const SaveContext& ctx) const {
    return options_.access == StoreAccess::kCoordinatorOnly && ctx.rank != ctx.coordinator_rank;
  }

  std::string LocalStagingRoot() const {
    std::error_code ec;
    const fs::path root =
        options_.local_staging_dir.empty() ? fs::temp_directory_path(ec) : fs::path(options_.local_staging_dir);
    return root.empty() ? "/tmp" : root.string();
  }

  std::string LocalStagingDir(const SaveContext& ctx) const {
    return (fs::path(LocalStagingRoot()) / ("ckptdb-staging-" + SaveIdName(ctx.save_id) + "-rank-" +
                                            std::to_string(ctx.rank)))
        .string();
  }

  void RemoveStaging(uint64_t save_id) {
    std::error_code ec;
    fs::remove_all(StagingDir(path_, save_id), ec);
  }

  StatusOr<SweepStats> SweepLocked(bool dry_run = false) {
    SweepStats stats;
    ASSIGN_OR_RETURN(auto committed, ReadCommitted());
    // Saves that committed steps share chunks of (possibly of steps deleted
    // since): accounted for, never swept. (A step whose references cannot be
    // read adds none, which is safe: only pending saves are ever swept, and
    // no committed step refers to a pending one.)
    std::set<SaveRef> referenced;
    {
      ASSIGN_OR_RETURN(auto refs, ReadReferenceRecords());
      for (const auto& [step, saves] : refs) {
        if (saves) referenced.insert(saves->begin(), saves->end());
      }
    }
    // The save attempts known to have been in flight (pending records).
    std::set<std::pair<int64_t, uint64_t>> pending;
    {
      std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
      for (it->Seek(std::string(1, kPendingPrefix)); it->Valid(); it->Next()) {
        int64_t step;
        uint64_t id;
        if (!ParsePendingKey(it->key().ToStringView(), &step, &id)) break;
        pending.emplace(step, id);
      }
      RETURN_IF_ERROR(FromRocks(it->status(), "listing pending saves"));
    }
    // The save attempts that have data, from the files' key ranges (every
    // ingested file holds the keys of one save of one rank): no file is
    // opened, so a damaged file of a committed step cannot stop a sweep.
    // Data of a save that is neither committed nor pending is left alone:
    // it may belong to a step whose commit record was lost (a damaged log),
    // and only a pending record proves that a save was never committed.
    std::set<std::pair<int64_t, uint64_t>> orphans;
    // Files whose every key was deleted but which are still on disk (a crash
    // between a delete and the reclaiming of its files).
    std::vector<KeyRange> dead;
    bool complete = true;  // every file's attempts were listed
    for (const auto& [step, id] : SavesWithData(&complete)) {
      auto c = committed.find(step);
      if (c != committed.end() && (c->second == id || c->second == kUnreadable)) continue;
      if (in_flight_.count(id) > 0) continue;  // a save of this writer, still running
      if (referenced.count(SaveRef{step, id}) > 0) continue;  // chunks kept steps share
      if (pending.count({step, id}) > 0) {
        orphans.emplace(step, id);
      } else if (HasLiveData(step, id)) {
        stats.unaccounted_saves++;
      } else {
        dead.emplace_back(DataSaveBegin(step, id), DataSaveEnd(step, id));
      }
    }
    stats.deleted_saves_reclaimed = dead.size();
    if (!dry_run) {
      for (const auto& [step, id] : orphans) RETURN_IF_ERROR(DropSaveData(step, id));
      // No key of theirs is visible: dropping their files loses nothing.
      RETURN_IF_ERROR(ReclaimRanges(dead));
      // Pending records of saves that left no data (or were committed).
      // (Kept while some file could not be listed: its data may be theirs.)
      rocksdb::WriteBatch batch;
      for (const auto& [step, id] : pending) {
        // (DropSaveData removed those of the dropped saves already.)
        if (orphans.count({step, id}) == 0 && complete && in_flight_.count(id) == 0) {
          batch.Delete(PendingKey(step, id)).PermitUncheckedError();
          // A save that wrote no data (every chunk shared) may still have
          // ingested its step's pieces records before failing to commit.
          ASSIGN_OR_RETURN(bool leftovers, HasPiecesRecords(step));
          if (leftovers && CheckStepFree(step).ok()) {
            RETURN_IF_ERROR(AddPiecesRecordsDelete(db_.get(), step, &batch));
          }
        }
      }
      if (batch.Count() > 0) RETURN_IF_ERROR(WriteSynced(&batch, "clearing pending records"));
      if (!orphans.empty() || batch.Count() > 0) (void)FlushLocked();
    }
    stats.orphan_saves = orphans.size();
    std::error_code ec;
    if (fs::exists(StagingRoot(path_), ec)) {
      std::set<fs::path> running;  // staging directories of saves still running here
      for (uint64_t id : in_flight_) running.insert(StagingDir(path_, id));
      for (const auto& d : fs::directory_iterator(StagingRoot(path_), ec)) {
        if (running.count(d.path()) > 0) continue;
        if (!dry_run) fs::remove_all(d.path(), ec);
        ++stats.staging_dirs;
      }
    }
    return stats;
  }

  static constexpr uint64_t kUnreadable = 0;  // save ids are never 0

  // Committed step -> its save id (kUnreadable when its metadata is
  // unreadable and it has no readable summary).
  StatusOr<std::map<int64_t, uint64_t>> ReadCommitted() {
    std::map<int64_t, uint64_t> committed;
    // The save id comes from the step's summary record when it has one
    // (cheap), else from its metadata.
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    std::unique_ptr<rocksdb::Iterator> sit(db_->NewIterator(rocksdb::ReadOptions()));
    sit->Seek(std::string(1, kSummaryPrefix));
    for (it->Seek(std::string(1, kMetadataPrefix)); it->Valid(); it->Next()) {
      int64_t step;
      if (!ParseMetadataKey(it->key().ToStringView(), &step)) break;
      int64_t sstep = -1;
      while (sit->Valid() && ParseSummaryKey(sit->key().ToStringView(), &sstep) && sstep < step) sit->Next();
      const bool has_summary = sit->Valid() && sstep == step;
      committed[step] = SaveIdOf(has_summary ? sit->value().ToStringView() : std::string_view(),
                                 it->value().ToStringView());
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "listing steps"));
    RETURN_IF_ERROR(FromRocks(sit->status(), "listing step summaries"));
    return committed;
  }

  // The save id of a committed step, from its summary record when that reads
  // (cheap), else from its metadata; kUnreadable when neither does (a step
  // whose metadata is unreadable keeps all its data: never delete what might
  // be committed).
  static uint64_t SaveIdOf(std::string_view summary, std::string_view metadata) {
    if (!summary.empty()) {
      auto sum = DecodeSummaryValue(summary);
      if (sum.ok()) return sum->save_id;
    }
    // (The save id is in the M record, whatever the format.)
    auto md = DecodeMetadataRecord(metadata);
    return md.ok() ? md->metadata.save_id : kUnreadable;
  }

  // ReadCommitted's answer for one step: nullopt when it is not committed.
  StatusOr<std::optional<uint64_t>> CommittedSaveId(int64_t step) {
    std::string metadata, summary;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), MetadataKey(step), &metadata);
    if (s.IsNotFound()) return std::optional<uint64_t>();
    RETURN_IF_ERROR(FromRocks(s, "reading the metadata of step " + std::to_string(step)));
    s = db_->Get(rocksdb::ReadOptions(), SummaryKey(step), &summary);
    if (!s.ok() && !s.IsNotFound()) RETURN_IF_ERROR(FromRocks(s, "reading the summary of step " + std::to_string(step)));
    return std::optional<uint64_t>(SaveIdOf(s.ok() ? summary : std::string(), metadata));
  }

  // (step, save id) of every save attempt whose keys some live file holds.
  // Files holding keys of several attempts (none are written so, but a
  // compaction could merge them) are scanned, one seek per attempt; a file
  // that cannot be read there is skipped.
  std::set<std::pair<int64_t, uint64_t>> SavesWithData(bool* complete) {
    std::set<std::pair<int64_t, uint64_t>> out;
    std::vector<rocksdb::LiveFileMetaData> files;
    db_->GetLiveFilesMetaData(&files);
    const std::string data_end(1, kMetadataPrefix);  // data keys sort before 'M'
    for (const rocksdb::LiveFileMetaData& f : files) {
      DataKey a, b;
      if (f.smallestkey >= data_end) continue;  // metadata, summaries, tags only
      if (ParseDataKey(f.smallestkey, &a) && ParseDataKey(f.largestkey, &b) && a.step == b.step &&
          a.save_id == b.save_id) {
        out.emplace(a.step, a.save_id);
        continue;
      }
      // Keys of several attempts, or data keys beside other records (a step
      // number saved again after a delete lands above its range tombstone,
      // and may be compacted with the small files): skip-scan its data part.
      rocksdb::ReadOptions ro;
      ro.fill_cache = false;
      const std::string upper_key = std::min(f.largestkey + std::string(1, '\0'), data_end);
      rocksdb::Slice upper(upper_key);
      ro.iterate_upper_bound = &upper;
      std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
      for (it->Seek(f.smallestkey); it->Valid();) {
        DataKey k;
        if (!ParseDataKey(it->key().ToStringView(), &k)) break;
        out.emplace(k.step, k.save_id);
        if (k.save_id == UINT64_MAX) {
          if (k.step == INT64_MAX) break;
          it->Seek(DataSaveBegin(k.step + 1, 0));
        } else {
          it->Seek(DataSaveBegin(k.step, k.save_id + 1));
        }
      }
      if (!it->status().ok()) *complete = false;
    }
    return out;
  }

  // Whether some key of the attempt is visible (not range-deleted). When its
  // files cannot be read, it counts as there.
  bool HasLiveData(int64_t step, uint64_t save_id) {
    rocksdb::ReadOptions ro;
    ro.fill_cache = false;
    const std::string end = DataSaveEnd(step, save_id);
    rocksdb::Slice upper(end);
    ro.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    it->Seek(DataSaveBegin(step, save_id));
    return it->Valid() || !it->status().ok();
  }

  const std::string path_;
  const StoreOptions options_;
  rocksdb::Env* const env_;  // null: RocksDB's default
  const bool split_elements_;
  const uint64_t seam_chunk_bytes_;
  const bool flush_after_writes_;
  // With kCoordinatorOnly: the Env of a rank's files before they are sent.
  const std::unique_ptr<rocksdb::Env> unsynced_env_;
  // The database's Env: env_'s files, background threads of this process
  // (fork_safe_env.h).
  const std::unique_ptr<rocksdb::Env> db_env_;
  mutable std::mutex mu_;  // guards db_, the step check + commit, deletes and tags
  // The database's compaction filter: outlives db_.
  UnusedChunkFilter unused_chunk_filter_;
  std::unique_ptr<rocksdb::DB> db_;
  // The process that opened db_ (or is opening it, under mu_); 0 while
  // closed. Read without mu_ by CheckNotForkedFromOpener.
  std::atomic<pid_t> db_opened_in_{0};
  std::vector<int64_t> pruned_by_last_commit_;
  std::set<uint64_t> in_flight_;  // save ids prepared here and not yet finished or aborted
  // Save id -> the step FindReusable offered chunks of, and the saves its
  // chunks are in (checked by Finish).
  struct ReuseBase {
    SaveRef step;
    std::set<SaveRef> saves;
  };
  std::map<uint64_t, ReuseBase> reuse_base_;
  std::mutex staging_mu_;
  std::map<uint64_t, StagingLock> staging_locks_;  // save id -> its local staging folder; guarded by staging_mu_
};

}  // namespace

StatusOr<std::unique_ptr<StoreWriter>> OpenStoreWriterWithSeams(const std::string& path, const StoreOptions& options,
                                                                const StoreWriterSeams& seams) {
  RETURN_IF_ERROR(ValidateStoreOptions(options));
  ASSIGN_OR_RETURN(StorePathState state, InspectStorePath(path));
  if (state == StorePathState::kStore) RETURN_IF_ERROR(CheckStoreFormat(path, /*for_writing=*/true));
  return std::unique_ptr<StoreWriter>(new RocksDBStoreWriter(path, options, seams));
}

StatusOr<std::unique_ptr<StoreWriter>> OpenStoreWriterWithEnv(const std::string& path, const StoreOptions& options,
                                                              rocksdb::Env* env) {
  StoreWriterSeams seams;
  seams.env = env;
  return OpenStoreWriterWithSeams(path, options, seams);
}

StatusOr<std::unique_ptr<StoreWriter>> OpenDirectoryStoreWriter(const std::string& path, const StoreOptions& options) {
  return OpenStoreWriterWithSeams(path, options, StoreWriterSeams{});
}

}  // namespace ckptdb
