// The RocksDB store's reader side: a read-only view that never blocks the
// writer, chunked range reads with verification, and the step listing.
#include <rocksdb/db.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <unordered_set>

#include "format/chunk_codec.h"
#include "ckptdb/checkpoint.h"
#include "ckptdb/rocksdb_store.h"
#include "format/keys.h"
#include "format/metadata_codec.h"
#include "store/rocksdb_options.h"
#include "store/retention.h"
#include "store/rocksdb_status.h"
#include "util/status_macros.h"
#include "format/step_records.h"
#include "store/chunk_reader.h"
#include "store/data_files.h"
#include "util/ordered_parallel.h"
#include "store/store_dir.h"
#include "store/rocksdb_store_internal.h"
#include "store/metadata_records.h"

namespace fs = std::filesystem;

namespace ckptdb {

Status ValidateReaderOptions(const ReaderOptions& o) {
  if (o.s3_stall_timeout_seconds < 0 || o.s3_stall_timeout_seconds > 86400) {
    return Status::InvalidArgument("ReaderOptions.s3_stall_timeout_seconds is " +
                                   std::to_string(o.s3_stall_timeout_seconds) + "; it must be in [0, 86400]");
  }
  return Status::OK();
}

namespace {

// How many times Refresh tries to open a consistent view.
constexpr int kOpenAttempts = 25;

class RocksDBStoreReader final : public StoreReader, public ChunkValueSource, public ChunkPlaceSource {
 public:
  RocksDBStoreReader(std::string path, ReaderOptions options) : path_(std::move(path)), options_(options) {}
  ~RocksDBStoreReader() override {
    if (db_) db_->Close().PermitUncheckedError();
  }

  const std::string& path() const override { return path_; }

  Status Refresh() override {
    if (db_) {
      db_->Close().PermitUncheckedError();
      db_.reset();
    }
    // OpenForReadOnly reads the MANIFEST (which files hold what) and then
    // replays the WAL; it is not atomic against a live writer. Had a save's
    // ingestion (a MANIFEST edit) landed between the two, and its metadata
    // commit (a WAL write) before the replay, the view would hold the step's
    // metadata without its data; had a flush or a delete landed there, steps
    // could vanish. So a view counts only when the MANIFEST did not change
    // while it was being opened: then it is the state of the store at one
    // moment, every commit whole. A writer may also delete a file between our
    // listing and opening it: such races are transient, so try again.
    Status last;
    for (int attempt = 0; attempt < kOpenAttempts; ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(std::min(2 << attempt, 100)));
      const std::string before = ManifestState();
      rocksdb::DB* db = nullptr;
      rocksdb::Options o = DatabaseOptions();
      o.allow_mmap_reads = options_.mmap_reads;
      o.create_if_missing = false;
      o.max_open_files = options_.open_all_files ? -1 : std::clamp(options_.max_open_files, 16, 100000);
      // No table is opened to gather compaction statistics (a read-only
      // database compacts nothing): RocksDB would otherwise open up to 20
      // SST files of the store on every open and keep them open, which at
      // W ranks opening the store is 20 W opens of the shared directory.
      o.skip_stats_update_on_db_open = true;
      // (A damaged table file leaves the other steps readable.)
      // One listing of the directory (a file per rank and step) answers
      // both whether the logs are empty and whether one is missing; taken
      // within the steady window below, it holds for the open.
      StatusOr<DatabaseFiles> files = ListDatabaseFiles(DbDir(path_));
      rocksdb::Status s = OpenRocksDatabase(o, DbDir(path_), /*read_only=*/true, &db, files.ok() ? &*files : nullptr);
      std::unique_ptr<rocksdb::DB> opened(db);
      Status wal = !s.ok() ? Status::OK()
                   : files.ok() ? CheckWriteAheadLogPresent(path_, *files)
                                : CheckWriteAheadLogPresent(path_);
      // Only a view taken while the set of files stood still counts; a
      // failure while it changed may be a race with the writer, not damage.
      const bool steady = !before.empty() && ManifestState() == before;
      if (!s.ok() || !wal.ok()) {
        last = !s.ok() ? FromRocks(s, "opening store '" + path_ + "' read-only") : wal;
        if (steady || (!s.ok() && !s.IsIOError() && !s.IsCorruption() && !s.IsPathNotFound())) break;
        continue;
      }
      if (!steady) {
        opened->Close().PermitUncheckedError();
        last = Status::Unavailable("store '" + path_ + "' kept changing while it was opened read-only (" +
                                   std::to_string(kOpenAttempts) + " attempts); try again");
        continue;
      }
      db_ = std::move(opened);
      return Status::OK();
    }
    return last;
  }

  StatusOr<StepMetadata> ReadMetadata(int64_t step) override {
    return Retrying([&] { return ReadMetadataOnce(step); });
  }
  StatusOr<std::vector<StepInfo>> ListSteps() override {
    return Retrying([&] { return ListStepsOnce(); });
  }
  StatusOr<int64_t> LatestStep() override {
    return Retrying([&] { return LatestStepOnce(); });
  }
  StatusOr<int64_t> LatestStepAtOrBefore(int64_t step) override {
    return Retrying([&] { return LatestStepAtOrBeforeOnce(step); });
  }
  StatusOr<bool> HasStep(int64_t step) override {
    return Retrying([&] { return HasStepOnce(step); });
  }
  StatusOr<std::map<std::string, int64_t>> ListTags() override {
    return Retrying([&] { return ListTagsOnce(); });
  }
  StatusOr<std::vector<RecordDamage>> FindDamagedRecords() override {
    return Retrying([&] { return FindDamagedRecordsOnce(); });
  }
  StatusOr<int64_t> ResolveTag(const std::string& name) override {
    return Retrying([&] { return ResolveTagOnce(name); });
  }
  StatusOr<int64_t> BestStep(const std::string& name, MetricMode mode) override {
    RETURN_IF_ERROR(ValidateMetricName(name));
    ASSIGN_OR_RETURN(std::vector<StepInfo> steps, ListSteps());
    std::map<int64_t, double> values;
    for (const StepInfo& s : steps) {
      auto it = s.metrics.find(name);
      if (it != s.metrics.end()) values[s.step] = it->second;
    }
    const std::vector<int64_t> ranked = RankByMetric(values, mode);
    if (ranked.empty()) return Status::NotFound("no step of store '" + path_ + "' has metric '" + name + "'");
    return ranked.front();
  }

 private:
  // With files opened lazily, the writer may have deleted (compacted or
  // pruned) a file of the version this reader opened; a refreshed view has
  // what is current. Listing calls retry on that; Read does not.
  template <typename F>
  auto Retrying(F f) -> decltype(f()) {
    for (int attempt = 0;; ++attempt) {
      auto r = f();
      if (r.ok() || options_.open_all_files || attempt >= 2) return r;
      const Status& st = r.status();
      if (st.code() != StatusCode::kIOError || st.message().find("No such file") == std::string::npos) return r;
      if (!Refresh().ok()) return r;
    }
  }

  StatusOr<StepMetadata> ReadMetadataOf(int64_t step, const std::vector<std::string>& fqns) override {
    return Retrying([&] { return ReadMetadataOnce(step, &fqns); });
  }

  StatusOr<StepMetadata> ReadMetadataFor(int64_t step, const std::vector<std::string>& fqns,
                                         const std::vector<EntryRegion>& regions) override {
    return Retrying([&]() -> StatusOr<StepMetadata> {
      ASSIGN_OR_RETURN(std::string value, ReadMetadataValueOnce(step));
      return CompleteStepMetadataFor(db_.get(), step, value, fqns, regions);
    });
  }

  StatusOr<StepMetadata> ReadStepSummary(int64_t step) override {
    return Retrying([&]() -> StatusOr<StepMetadata> {
      ASSIGN_OR_RETURN(std::string value, ReadMetadataValueOnce(step));
      return DecodeStepHeader(step, value);  // a format-6 step's without pieces, an older one's whole
    });
  }

  Status ReadEntryPieces(StepMetadata* md, const std::vector<std::string>& fqns) override {
    return Retrying([&]() -> StatusOr<bool> {
      RETURN_IF_ERROR(ReadEntryPiecesOnce(md, fqns));
      return true;
    }).status();
  }

  // The M value of `step`; NotFound naming the store and its latest step.
  StatusOr<std::string> ReadMetadataValueOnce(int64_t step) {
    RETURN_IF_ERROR(ValidateStep(step));
    std::string value;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), MetadataKey(step), &value);
    if (s.IsNotFound()) {
      std::string hint;
      auto latest = LatestStepOnce();
      hint = latest.ok() ? " (latest step is " + std::to_string(*latest) + ")" : " (the store has no steps)";
      return Status::NotFound("step " + std::to_string(step) + " not found in store '" + path_ + "'" + hint);
    }
    RETURN_IF_ERROR(FromRocks(s, "reading the metadata of step " + std::to_string(step)));
    return value;
  }

  // The whole metadata, or with `fqns`, the pieces of those entries only
  // (metadata_records.h).
  StatusOr<StepMetadata> ReadMetadataOnce(int64_t step, const std::vector<std::string>* fqns = nullptr) {
    ASSIGN_OR_RETURN(std::string value, ReadMetadataValueOnce(step));
    return fqns == nullptr ? CompleteStepMetadata(db_.get(), step, value)
                           : CompleteStepMetadataOf(db_.get(), step, value, *fqns);
  }

  // The named entries' pieces records only. When one cannot be read, the M
  // value says whether that is damage or something else: the step gone,
  // saved again, or keeping its pieces inline (before format 6: they are
  // taken from there).
  Status ReadEntryPiecesOnce(StepMetadata* md, const std::vector<std::string>& fqns) {
    const std::unordered_set<std::string> wanted(fqns.begin(), fqns.end());
    std::vector<uint32_t> indices;
    for (uint32_t i = 0; i < md->entries.size(); ++i) {
      if (md->entries[i].pieces_omitted && wanted.count(md->entries[i].fqn) > 0) indices.push_back(i);
    }
    if (indices.empty()) return Status::OK();
    const Status read = ReadEntryPiecesRecords(db_.get(), md, indices);
    if (read.ok()) return read;
    ASSIGN_OR_RETURN(std::string value, ReadMetadataValueOnce(md->step));
    ASSIGN_OR_RETURN(StepMetadata stored, DecodeStepHeader(md->step, value));
    if (stored.save_id != md->save_id || stored.entries.size() != md->entries.size()) {
      return Status::FailedPrecondition("step " + std::to_string(md->step) +
                                        " was saved again since its metadata was read");
    }
    if (stored.entries.empty() || stored.entries.front().pieces_omitted) return read;  // format 6: damage
    for (uint32_t i : indices) {
      if (md->entries[i].pieces_omitted) {
        md->entries[i].pieces = std::move(stored.entries[i].pieces);
        md->entries[i].pieces_omitted = false;
      }
    }
    return Status::OK();
  }

 public:
  StatusOr<ReadStats> Read(const StepMetadata& md, const std::vector<ReadItem>& items) override {
    return ReadChunks(db_.get(), md, items, options_.threads > 0 ? options_.threads : DefaultParallelism());
  }

  Status GetChunkValue(const DataKey& key, rocksdb::PinnableSlice* value) override {
    return ckptdb::GetChunkValue(db_.get(), key, value);
  }

  // Every table file of the database, whatever the step: a step's chunks
  // lie in files of its own saves and of those it shares chunks with.
  StatusOr<std::unique_ptr<ChunkPlaceIndex>> PlacesOf(int64_t, uint64_t) override {
    return TableFilePlaces(ListTableFiles());
  }

 private:
  std::vector<DataFile> ListTableFiles() {
    std::vector<rocksdb::LiveFileMetaData> live;
    db_->GetLiveFilesMetaData(&live);
    std::vector<DataFile> out;
    out.reserve(live.size());
    for (rocksdb::LiveFileMetaData& f : live) {
      std::string name = std::move(f.name);  // "/000123.sst"
      if (!name.empty() && name[0] == '/') name.erase(0, 1);
      out.push_back(DataFile{std::move(name), std::move(f.smallestkey), std::move(f.largestkey)});
    }
    return out;
  }

  StatusOr<std::vector<StepInfo>> ListStepsOnce() {
    std::vector<StepInfo> out;
    // Metadata keys say which steps exist; the summary record beside each
    // (same batch) says what ListSteps reports without decoding the whole
    // Metadata. A step without a summary (a store written before summaries
    // existed) falls back to its metadata.
    rocksdb::ReadOptions ro;
    ro.fill_cache = false;
    std::unique_ptr<rocksdb::Iterator> mit(db_->NewIterator(ro));
    std::unique_ptr<rocksdb::Iterator> sit(db_->NewIterator(ro));
    sit->Seek(std::string(1, kSummaryPrefix));
    for (mit->Seek(std::string(1, kMetadataPrefix)); mit->Valid(); mit->Next()) {
      int64_t step;
      if (!ParseMetadataKey(mit->key().ToStringView(), &step)) break;
      int64_t sstep = -1;
      while (sit->Valid() && ParseSummaryKey(sit->key().ToStringView(), &sstep) && sstep < step) sit->Next();
      StepInfo info;
      info.step = step;
      StepSummary sum;
      bool has_summary = false;
      if (sit->Valid() && sstep == step) {
        auto decoded = DecodeSummaryValue(sit->value().ToStringView());
        if (decoded.ok()) {
          sum = *decoded;
          has_summary = true;
        }
      }
      if (has_summary) {
        info.created_unix_ms = sum.created_unix_ms;
        info.world_size = sum.world_size;
        info.entries = sum.entries;
        info.logical_bytes = sum.logical_bytes;
        info.stored_bytes = sum.stored_bytes;
        info.metrics = std::move(sum.metrics);
        info.note = std::move(sum.note);
      } else if (auto md = CompleteStepMetadata(db_.get(), step, mit->value().ToStringView()); md.ok()) {
        // No summary (a store written before summaries existed), or a
        // damaged one.
        info.created_unix_ms = md->created_unix_ms;
        info.world_size = md->world_size;
        info.entries = md->entries.size();
        info.logical_bytes = md->logical_bytes();
        info.stored_bytes = md->stored_bytes();
        info.metrics = md->metrics;
        info.note = md->note;
      } else {
        info.damaged = true;
      }
      out.push_back(std::move(info));
    }
    RETURN_IF_ERROR(FromRocks(mit->status(), "listing steps of '" + path_ + "'"));
    RETURN_IF_ERROR(FromRocks(sit->status(), "listing steps of '" + path_ + "'"));
    ASSIGN_OR_RETURN(auto tags, ListTagsOnce());
    for (const auto& [name, step] : tags) {
      auto pos = std::lower_bound(out.begin(), out.end(), step,
                                  [](const StepInfo& a, int64_t s) { return a.step < s; });
      if (pos != out.end() && pos->step == step) pos->tags.push_back(name);  // names arrive sorted
    }
    return out;
  }

  StatusOr<int64_t> LatestStepOnce() {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    // Data keys ('D') sort before metadata keys ('M'): the last key before
    // 'N' is the highest step's metadata, if any.
    it->SeekForPrev(std::string(1, kMetadataPrefix + 1));
    int64_t step;
    if (it->Valid() && ParseMetadataKey(it->key().ToStringView(), &step)) return step;
    RETURN_IF_ERROR(FromRocks(it->status(), "finding the latest step"));
    return Status::NotFound("store '" + path_ + "' has no committed step");
  }

  StatusOr<int64_t> LatestStepAtOrBeforeOnce(int64_t step) {
    RETURN_IF_ERROR(ValidateStep(step));
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    it->SeekForPrev(MetadataKey(step));
    int64_t found;
    if (it->Valid() && ParseMetadataKey(it->key().ToStringView(), &found)) return found;
    RETURN_IF_ERROR(FromRocks(it->status(), "finding the latest step at or before " + std::to_string(step)));
    return Status::NotFound("store '" + path_ + "' has no committed step at or before " + std::to_string(step));
  }

  StatusOr<bool> HasStepOnce(int64_t step) {
    RETURN_IF_ERROR(ValidateStep(step));
    rocksdb::PinnableSlice v;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), db_->DefaultColumnFamily(), MetadataKey(step), &v);
    if (s.IsNotFound()) return false;
    RETURN_IF_ERROR(FromRocks(s, "looking up step " + std::to_string(step)));
    return true;
  }

  StatusOr<std::map<std::string, int64_t>> ListTagsOnce() {
    std::map<std::string, int64_t> tags;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(std::string(1, kTagPrefix)); it->Valid(); it->Next()) {
      std::string name;
      if (!ParseTagKey(it->key().ToStringView(), &name)) break;
      auto step = DecodeTagValue(it->value().ToStringView());
      if (step.ok()) tags[name] = *step;  // a damaged tag is left out
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "listing tags of '" + path_ + "'"));
    return tags;
  }

  StatusOr<std::vector<RecordDamage>> FindDamagedRecordsOnce() {
    std::vector<RecordDamage> out;
    rocksdb::ReadOptions ro;
    ro.fill_cache = false;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    int64_t pieces_step_checked = -1;
    for (it->Seek(std::string(1, kMetadataPrefix)); it->Valid(); it->Next()) {
      const std::string_view key = it->key().ToStringView();
      int64_t step;
      uint64_t id;
      std::string name;
      uint32_t entry;
      if (ParseMetadataKey(key, &step)) {
        // With its pieces records (format 6): each one missing, damaged or
        // another entry's is named.
        auto md = CompleteStepMetadata(db_.get(), step, it->value().ToStringView());
        if (!md.ok()) out.push_back({"metadata of step " + std::to_string(step), md.status()});
      } else if (ParsePiecesKey(key, &step, &entry)) {
        // Pieces records without their step's metadata (never written so):
        // named once per step. (Those of a step with metadata were checked
        // with it.)
        if (step != pieces_step_checked) {
          pieces_step_checked = step;
          std::string v;
          rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), MetadataKey(step), &v);
          if (s.IsNotFound()) {
            out.push_back({"pieces records of step " + std::to_string(step),
                           Status::DataLoss("pieces records of a step that has no metadata")});
          }
        }
      } else if (ParseSummaryKey(key, &step)) {
        auto sum = DecodeSummaryValue(it->value().ToStringView());
        if (!sum.ok()) out.push_back({"summary of step " + std::to_string(step), sum.status()});
      } else if (ParseTagKey(key, &name)) {
        auto tagged = DecodeTagValue(it->value().ToStringView());
        if (!tagged.ok()) out.push_back({"tag '" + name + "'", tagged.status()});
      } else if (ParseReferencesKey(key, &step)) {
        auto refs = DecodeReferencesValue(it->value().ToStringView());
        if (!refs.ok()) out.push_back({"references of step " + std::to_string(step), refs.status()});
      } else if (!ParsePendingKey(key, &step, &id)) {
        break;
      }
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "reading the records of '" + path_ + "'"));
    return out;
  }

  StatusOr<int64_t> ResolveTagOnce(const std::string& name) {
    RETURN_IF_ERROR(ValidateTagName(name));
    std::string v;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), TagKey(name), &v);
    if (s.IsNotFound()) return Status::NotFound("no tag '" + name + "' in store '" + path_ + "'");
    RETURN_IF_ERROR(FromRocks(s, "reading tag '" + name + "'"));
    auto step = DecodeTagValue(v);
    if (!step.ok()) return step.status().WithContext("tag '" + name + "'");
    ASSIGN_OR_RETURN(bool exists, HasStepOnce(*step));
    if (!exists) {
      return Status::NotFound("tag '" + name + "' names step " + std::to_string(*step) +
                              ", which is no longer in store '" + path_ + "'");
    }
    return step;
  }

 public:
  StatusOr<StoreStats> GetStoreStats() override {
    StoreStats st;
    std::vector<rocksdb::LiveFileMetaData> files;
    db_->GetLiveFilesMetaData(&files);
    for (const auto& f : files) {
      st.sst_files++;
      st.sst_bytes += f.size;
      if (f.level >= 0) {
        if (st.files_per_level.size() <= static_cast<size_t>(f.level)) st.files_per_level.resize(f.level + 1);
        st.files_per_level[f.level]++;
      }
    }
    uint64_t v = 0;
    if (db_->GetIntProperty(rocksdb::DB::Properties::kEstimateLiveDataSize, &v)) st.live_data_bytes = v;
    if (db_->GetIntProperty(rocksdb::DB::Properties::kEstimateNumKeys, &v)) st.estimated_keys = v;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(DbDir(path_), ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      std::error_code fec;
      if (!it->is_regular_file(fec)) continue;
      const uint64_t size = it->file_size(fec);
      if (fec) continue;  // removed by the writer meanwhile
      st.disk_bytes += size;
      if (it->path().extension() == ".log") {
        st.wal_files++;
        st.wal_bytes += size;
      }
    }
    if (fs::is_directory(StagingRoot(path_), ec)) {
      for (auto it = fs::directory_iterator(StagingRoot(path_), ec); !ec && it != fs::directory_iterator();
           it.increment(ec)) {
        st.staging_dirs++;
      }
    }
    return st;
  }

 private:
  // The name of the current MANIFEST and its size, or "" when unreadable: it
  // changes with every change of the set of files (ingest, flush,
  // compaction, DeleteFilesInRange), and with nothing else.
  std::string ManifestState() const {
    std::ifstream current(DbDir(path_) + "/CURRENT");
    std::string name;
    if (!std::getline(current, name) || name.empty()) return "";
    std::error_code ec;
    const uintmax_t size = fs::file_size(DbDir(path_) + "/" + name, ec);
    if (ec) return "";
    return name + ":" + std::to_string(size);
  }

  const std::string path_;
  const ReaderOptions options_;
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace

StatusOr<std::unique_ptr<StoreReader>> OpenDirectoryStoreReader(const std::string& path, const ReaderOptions& options) {
  ASSIGN_OR_RETURN(StorePathState state, InspectStorePath(path));
  if (state == StorePathState::kMissing) return Status::NotFound("no store at '" + path + "'");
  if (state == StorePathState::kEmptyDir) {
    return Status::FailedPrecondition("'" + path + "' is an empty directory, not a ckptdb store");
  }
  RETURN_IF_ERROR(CheckStoreFormat(path, /*for_writing=*/false));
  auto reader = std::make_unique<RocksDBStoreReader>(path, options);
  RETURN_IF_ERROR(reader->Refresh());
  return std::unique_ptr<StoreReader>(std::move(reader));
}

}  // namespace ckptdb
