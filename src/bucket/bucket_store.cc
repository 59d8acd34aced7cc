#include "bucket/bucket_store.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "bucket/bucket_index.h"
#include "bucket/checksum_probe.h"
#include "bucket/conditional_probe.h"
#include "bucket/object_keys.h"
#include "bucket/object_rewrite.h"
#include "bucket/object_upload_env.h"
#include "bucket/save_marker.h"
#include "bucket/sst_object_options.h"
#include "bucket/step_objects.h"
#include "format/chunk_codec.h"
#include "format/metadata_codec.h"
#include "format/step_records.h"
#include "s3/s3_config.h"
#include "store/chunk_reader.h"
#include "store/retention.h"
#include "store/rocksdb_status.h"
#include "store/rocksdb_store_internal.h"
#include "store/shared_chunks.h"
#include "store/sst_chunk_writer.h"
#include "util/hex.h"
#include "util/le_bytes.h"
#include "util/ordered_parallel.h"
#include "util/status_macros.h"
#include "util/thread_fanout.h"

namespace ckptdb {
namespace bucket {
namespace {

namespace fs = std::filesystem;


bool Unhex(std::string_view s, std::string* out) {
  if (s.size() % 2 != 0) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  out->clear();
  for (size_t i = 0; i < s.size(); i += 2) {
    const int hi = nibble(s[i]), lo = nibble(s[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi << 4 | lo));
  }
  return true;
}

// A WriteResult::files entry: "KEY SIZE SMALLEST LARGEST", the keys in hex
// (object keys hold no spaces: they are made here).
std::string EncodeObjectEntry(const SstObject& o) {
  return o.key + " " + std::to_string(o.size) + " " + HexEncode(o.smallest_key) + " " + HexEncode(o.largest_key);
}

StatusOr<SstObject> DecodeObjectEntry(const std::string& entry) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t sp = entry.find(' ', start);
    parts.push_back(entry.substr(start, sp == std::string::npos ? std::string::npos : sp - start));
    if (sp == std::string::npos) break;
    start = sp + 1;
  }
  SstObject o;
  bool ok = parts.size() == 4;
  if (ok) {
    o.key = parts[0];
    char* end = nullptr;
    o.size = std::strtoull(parts[1].c_str(), &end, 10);
    ok = !parts[1].empty() && *end == '\0' && Unhex(parts[2], &o.smallest_key) && Unhex(parts[3], &o.largest_key);
  }
  if (!ok) return Status::Internal("a rank reported a malformed bucket object entry '" + entry + "'");
  return o;
}

Status ValidateOptions(const StoreOptions& o, const BucketWriteOptions& w) {
  RETURN_IF_ERROR(ValidateStoreOptions(o));
  if (w.part_bytes == 0 || w.upload_threads < 1 || w.upload_file_bytes == 0) {
    return Status::InvalidArgument("BucketWriteOptions.part_bytes, upload_threads and upload_file_bytes must be positive");
  }
  return Status::OK();
}



int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}





// How often a running save's marker is written again: a quarter of the
// threshold (so gc, and the commit's own check at half of it, never see it
// stale), at most every 5 minutes, at least every 0.1 s; none when the
// threshold is 0 (a writer that only runs gc, taking every save as dead).
std::chrono::milliseconds HeartbeatInterval(int64_t abandoned_save_seconds) {
  if (abandoned_save_seconds <= 0) return std::chrono::milliseconds(0);
  return std::chrono::milliseconds(std::clamp<int64_t>(abandoned_save_seconds * 250, 100, 300000));
}

// A client like `client` that tries each request once: what cleanup after a
// failure uses, so that a server that stopped answering costs it one stall
// limit per request, not the retries (what it leaves is gc's).
std::shared_ptr<s3::S3Client> OneTryClient(const std::shared_ptr<s3::S3Client>& client) {
  s3::S3ClientOptions o = client->options();
  o.max_attempts = 1;
  o.max_stalled_attempts = 1;
  StatusOr<std::unique_ptr<s3::S3Client>> c = s3::S3Client::Create(client->settings(), o);
  if (!c.ok()) return client;
  return std::shared_ptr<s3::S3Client>(std::move(*c));
}

// Deletes `keys` 1000 at a time (S3's limit per request).
Status DeleteKeys(s3::S3Client* client, const std::string& bucket, const std::vector<std::string>& keys) {
  for (size_t i = 0; i < keys.size(); i += 1000) {
    const size_t end = std::min(keys.size(), i + 1000);
    RETURN_IF_ERROR(client->DeleteObjects(bucket, std::vector<std::string>(keys.begin() + i, keys.begin() + end)));
  }
  return Status::OK();
}

std::string StepNotFound(int64_t step, const std::string& where) {
  return "step " + std::to_string(step) + " not found in store '" + where + "'";
}

// The markers of one listing (pending/ or rewrites/: "<step>-<save id>-..."
// after `skip` bytes of each key) by save, and which are young: younger than
// `threshold_s` by the server's clock (a marker's LastModified, moved
// forward by its heartbeat, against the listing's Date; the writing host's
// clock is not used). A threshold of 0 makes none young.
class MarkerAges {
 public:
  MarkerAges(const s3::Listing& listing, size_t skip, int64_t threshold_s)
      : server_now_(listing.server_unix_ms), threshold_s_(threshold_s) {
    for (const s3::ObjectInfo& o : listing.objects) {
      SaveRef ref;
      if (o.key.size() > skip && ParseSaveRef(std::string_view(o.key).substr(skip), '-', &ref)) {
        markers_[ref].push_back(&o);
      }
    }
  }

  bool Young(const SaveRef& ref) const {
    auto m = markers_.find(ref);
    if (m == markers_.end() || threshold_s_ <= 0) return false;
    for (const s3::ObjectInfo* o : m->second) {
      // A server without a Date header: every marker is young. The Date has
      // whole seconds, LastModified may too: a second of slack keeps the
      // rounding on the side of young.
      if (server_now_ <= 0 || server_now_ - o->last_modified_unix_ms < threshold_s_ * 1000 + 1000) return true;
    }
    return false;
  }
  const std::map<SaveRef, std::vector<const s3::ObjectInfo*>>& all() const { return markers_; }

 private:
  const int64_t server_now_;
  const int64_t threshold_s_;
  std::map<SaveRef, std::vector<const s3::ObjectInfo*>> markers_;
};

// What gc found under a store's prefix (FindGarbage).
struct Garbage {
  std::vector<std::string> keys;  // to delete
  uint64_t bytes = 0;
  uint64_t failed_saves = 0;   // saves never committed (no record, or a record no index named)
  uint64_t deleted_saves = 0;  // saves of deleted steps
  uint64_t stale_markers = 0;  // pending markers of saves that died before uploading anything
  uint64_t running_saves = 0;  // left alone: their markers are young
  uint64_t replaced_objects = 0;  // objects a committed rewrite replaced (or a failed one left)
  // Multipart uploads a rank killed mid-upload left open: (key, upload id).
  std::vector<std::pair<std::string, std::string>> uploads;
};

class BucketStoreWriter : public StoreWriter {
 public:
  BucketStoreWriter(std::shared_ptr<s3::S3Client> client, std::string bucket, std::string prefix,
                    StoreOptions options, BucketWriteOptions write_options)
      : client_(std::move(client)),
        cleanup_client_(OneTryClient(client_)),
        bucket_(std::move(bucket)),
        prefix_(std::move(prefix)),
        path_("s3://" + bucket_ + "/" + prefix_),
        options_(std::move(options)),
        write_options_(std::move(write_options)) {}

  ~BucketStoreWriter() override {
    std::map<uint64_t, std::unique_ptr<SaveMarker>> markers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      markers.swap(markers_);
    }
    // Their heartbeats stop; the markers stay for gc to judge.
    markers.clear();
  }

  FileDelivery delivery() const override { return FileDelivery::kShared; }

  StatusOr<uint64_t> Prepare(int64_t step) override {
    RETURN_IF_ERROR(CheckConditionalWrites());
    ASSIGN_OR_RETURN(IndexSnapshot snap, ReadIndex(client_.get(), bucket_, prefix_));
    if (snap.index.steps.count(step) != 0) {
      return Status::AlreadyExists("step " + std::to_string(step) + " is already committed in " + path_);
    }
    const uint64_t id = NewSaveId();
    // Before any rank uploads: gc leaves the objects of a save with a fresh
    // marker alone, and the heartbeat keeps it fresh until the save ends.
    auto marker = std::make_unique<SaveMarker>(
        client_.get(), bucket_, PendingKey(prefix_, step, id, NowUnixMs() + write_options_.host_clock_offset_ms),
        HeartbeatInterval(options_.abandoned_save_seconds));
    RETURN_IF_ERROR(marker->Start());
    std::lock_guard<std::mutex> lock(mu_);
    markers_[id] = std::move(marker);
    return id;
  }

  StatusOr<std::vector<ReuseCandidate>> FindReusable(const SaveContext& ctx, const StepMetadata& planned) override {
    std::vector<ReuseCandidate> out;
    if (!options_.deduplicate) return out;
    // The latest committed step: the one a training job's next save is most
    // like. Its record lists the objects the new step may come to read.
    ASSIGN_OR_RETURN(IndexSnapshot snap, ReadIndex(client_.get(), bucket_, prefix_));
    if (snap.index.steps.empty()) return out;
    const IndexStep& latest = snap.index.steps.rbegin()->second;
    StatusOr<std::string> value =
        client_->GetObject(bucket_, StepRecordKey(prefix_, latest.step, latest.summary.save_id));
    if (!value.ok()) return out;  // an unreadable base offers nothing: every chunk is written
    StatusOr<WholeStepRecord> record = DecodeWholeStepRecord(*value);
    if (!record.ok()) return out;
    StepMetadata& base = record->metadata;
    if (base.step != latest.step || base.save_id != latest.summary.save_id) return out;
    out = ReuseCandidatesFrom(std::move(base), planned);
    if (!out.empty()) {
      Base b;
      b.objects = ObjectsNow(snap.index, prefix_, std::move(record->objects));
      for (const auto& [save, r] : snap.index.rewritten) b.rewrite_ids[save] = r.rewrite_id;
      std::lock_guard<std::mutex> lock(mu_);
      base_[ctx.save_id] = std::move(b);
    }
    return out;
  }

  Status PrepareStorage(const SaveContext& ctx, const std::vector<WriteItem>& items) override {
    return CheckWriteItems(ctx, items);
  }

  // The rank's SST files stream into the bucket as SstFileWriter writes
  // them (bucket/object_upload_env.h): no local copy, uploads overlapped
  // with encoding, at most (upload_threads + 1) parts of part_bytes held.
  StatusOr<WriteResult> Write(const SaveContext& ctx, const std::vector<WriteItem>& items) override {
    const std::string save_prefix = SaveDataPrefix(prefix_, ctx.step, ctx.save_id);
    char root[96];
    std::snprintf(root, sizeof(root), "/ckptdb-upload-%016" PRIx64 "-rank-%d/", ctx.save_id, ctx.rank);
    // Integrity on the way: the bodies' CRC-32C where the server checks it,
    // else their signed SHA-256 (bucket/checksum_probe.h).
    client_->set_crc32c_payloads(Crc32cVerdict(client_.get(), bucket_, prefix_));
    UploadLedger ledger;
    ObjectUploadOptions uo;
    uo.part_bytes = write_options_.part_bytes;
    uo.parts_in_flight = write_options_.upload_threads;
    uo.cleanup_client = cleanup_client_.get();
    std::unique_ptr<rocksdb::Env> env =
        NewObjectUploadEnv(rocksdb::Env::Default(), client_.get(), bucket_, save_prefix, root, uo, &ledger);
    rocksdb::Options db_options = SstObjectWriteOptions();
    db_options.env = env.get();
    ChunkWriteOptions o;
    o.chunk_bytes = options_.chunk_bytes;
    o.compression = options_.compression;
    o.zstd_level = options_.zstd_level;
    o.max_sst_file_bytes = std::min(options_.max_sst_file_bytes, write_options_.upload_file_bytes);
    o.threads = options_.threads > 0 ? options_.threads : DefaultParallelism();
    o.boxes = options_.chunk_layout == ChunkLayout::kBoxes;
    o.content_hashes = options_.content_hashes;
    o.writeback_bytes = 0;  // (no disk)
    o.block_per_key = true;  // (SstObjectWriteOptions: every key a block)
    std::vector<SstObject> objects;
    o.on_file_finished = [&](const std::string& path, const rocksdb::ExternalSstFileInfo& info) {
      SstObject obj;
      obj.key = save_prefix + fs::path(path).filename().string();
      obj.size = info.file_size;
      obj.smallest_key = info.smallest_key;
      obj.largest_key = info.largest_key;
      objects.push_back(std::move(obj));
      return Status::OK();
    };
    std::string dir(root);
    dir.pop_back();
    StatusOr<WriteResult> written = WriteItemsToSst(dir, ctx, items, db_options, o);
    // An upload's own error (Unavailable naming the object, ...), not the
    // IOError RocksDB wrapped it in.
    Status failed = written.ok() || ledger.first_error().ok() ? written.status() : ledger.first_error();
    const std::map<std::string, uint64_t> uploaded = ledger.objects();
    for (const SstObject& obj : objects) {
      if (!failed.ok()) break;
      auto it = uploaded.find(obj.key);
      if (it == uploaded.end() || it->second != obj.size) {
        failed = Status::DataLoss("object s3://" + bucket_ + "/" + obj.key + " was not uploaded whole (" +
                                  std::to_string(obj.size) + " bytes written)");
      }
    }
    if (!failed.ok()) {
      // This rank's objects go now; the coordinator's Abort lists the rest.
      std::vector<std::string> keys;
      for (const auto& [key, size] : uploaded) keys.push_back(key);
      if (!keys.empty()) (void)DeleteKeys(cleanup_client_.get(), bucket_, keys);
      return failed;
    }
    WriteResult result = std::move(written).value();
    result.files.clear();
    for (const SstObject& obj : objects) result.files.push_back(EncodeObjectEntry(obj));
    return result;
  }

  StatusOr<std::string> ReceivedFilePath(const SaveContext&, int, const std::string&) override {
    return Status::FailedPrecondition("bucket store " + path_ + " is shared: no files are sent to the coordinator");
  }

  void DiscardLocalFiles(const SaveContext&) override {}

  Status Finish(const SaveContext& ctx, const StepMetadata& metadata,
                const std::vector<WriteResult>& results) override {
    Status v = ValidateStepMetadata(metadata);
    if (!v.ok()) return Status::Internal("refusing to commit inconsistent metadata: " + v.message());
    std::vector<SstObject> objects;  // the step's, as the record lists them
    const std::string own = SaveDataPrefix(prefix_, ctx.step, ctx.save_id);
    for (const WriteResult& r : results) {
      for (const std::string& entry : r.files) {
        ASSIGN_OR_RETURN(SstObject o, DecodeObjectEntry(entry));
        if (o.key.compare(0, own.size(), own) != 0) {
          return Status::Internal("rank " + std::to_string(r.rank) + " reported object '" + o.key +
                                  "' outside this save's prefix " + own);
        }
        objects.push_back(std::move(o));
      }
    }
    // Every object is where the ranks said, whole, before the step refers
    // to it: one HEAD each, 16 at once.
    RETURN_IF_ERROR(CheckSizes(ctx, objects));
    const SaveRef self{ctx.step, ctx.save_id};
    std::vector<SaveRef> uses = ReferencedSaves(metadata);
    uses.push_back(self);
    std::sort(uses.begin(), uses.end());
    uses.erase(std::unique(uses.begin(), uses.end()), uses.end());
    std::map<SaveRef, uint64_t> rewrite_ids;  // of the shared saves, as the base was read
    if (uses.size() > 1) {
      // The base step's objects that hold the chunks this step shares.
      std::lock_guard<std::mutex> lock(mu_);
      auto base = base_.find(ctx.save_id);
      if (base == base_.end()) {
        return Status::Internal("step " + std::to_string(ctx.step) +
                                " refers to chunks of other saves, but none were offered to this save");
      }
      for (const SstObject& o : base->second.objects) {
        SaveRef ref;
        if (SaveOfDataObject(prefix_, o.key, &ref) && std::binary_search(uses.begin(), uses.end(), ref)) {
          objects.push_back(o);
        }
      }
      rewrite_ids = base->second.rewrite_ids;
    }
    RETURN_IF_ERROR(
        client_
            ->PutObject(bucket_, StepRecordKey(prefix_, ctx.step, ctx.save_id),
                        EncodeHeadedStepRecord(metadata, objects))
            .status());
    // The last moment to refuse: after this the index names the step.
    RETURN_IF_ERROR(CheckMarkerFresh(ctx));
    IndexStep entry;
    entry.step = ctx.step;
    entry.summary = SummarizeStep(metadata);
    entry.uses = uses;
    std::vector<int64_t> pruned;
    StatusOr<IndexSnapshot> written = UpdateIndex(client_.get(), bucket_, prefix_, [&](BucketIndex* index) {
      if (index->steps.count(ctx.step) != 0) {
        return Status::AlreadyExists("step " + std::to_string(ctx.step) + " was committed in " + path_ +
                                     " by another save first");
      }
      RETURN_IF_ERROR(CheckSharedSavesStay(*index, uses, self, rewrite_ids));
      index->steps.emplace(ctx.step, entry);
      pruned = PruneIndex(index, options_.retention);
      // A save never commits a step only to delete it (a step numbered
      // below the ones kept, saved late): what the caller just saved stays.
      if (std::find(pruned.begin(), pruned.end(), ctx.step) != pruned.end()) {
        return Status::Internal("retention dropped the step being committed");
      }
      return Status::OK();
    });
    if (!written.ok()) {
      // An index write that failed without an answer may have landed: the
      // index read back decides.
      if (written.status().code() != StatusCode::kAlreadyExists && CommittedBy(ctx, client_.get()) == Committed::kThisSave) {
        EndSave(ctx);
        return Status::OK();
      }
      return written.status();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      pruned_last_ = pruned;
    }
    EndSave(ctx);
    if (!pruned.empty()) (void)DeleteGarbage(cleanup_client_.get());  // best effort: gc finishes the job
    return Status::OK();
  }

  // Best effort, one try per request (cleanup_client_): a server that
  // stopped answering costs one stall limit per request here, and what is
  // left (objects, the marker, now no longer refreshed) is gc's.
  void Abort(const SaveContext& ctx) override {
    std::unique_ptr<SaveMarker> marker = StopMarker(ctx.save_id);
    // Finish may have failed after its index write landed, or without
    // knowing: the objects of a step that is (or may be) this save's stay.
    if (CommittedBy(ctx, cleanup_client_.get()) != Committed::kNotThisSave) return;
    StatusOr<std::vector<s3::ObjectInfo>> objects =
        cleanup_client_->ListAll(bucket_, SaveDataPrefix(prefix_, ctx.step, ctx.save_id));
    if (!objects.ok()) return;
    std::vector<std::string> keys;
    for (const s3::ObjectInfo& o : *objects) keys.push_back(o.key);
    keys.push_back(StepRecordKey(prefix_, ctx.step, ctx.save_id));
    if (DeleteKeys(cleanup_client_.get(), bucket_, keys).ok() && marker != nullptr) {
      (void)cleanup_client_->DeleteObject(bucket_, marker->key());
    }
  }

  Status OpenDatabase() override { return client_->HeadBucket(bucket_); }

  StatusOr<SweepStats> Sweep() override { return SweepOrFind(/*dry_run=*/false); }
  StatusOr<SweepStats> FindLeftovers() override { return SweepOrFind(/*dry_run=*/true); }

  Status DeleteStep(int64_t step) override { return DeleteSteps({step}); }

  Status DeleteSteps(const std::vector<int64_t>& steps) override {
    RETURN_IF_ERROR(CheckConditionalWrites());
    RETURN_IF_ERROR(UpdateIndex(client_.get(), bucket_, prefix_, [&](BucketIndex* index) {
                      for (int64_t step : steps) {
                        if (index->steps.count(step) == 0) {
                          return Status::NotFound(StepNotFound(step, path_) + "; nothing was deleted");
                        }
                      }
                      for (int64_t step : steps) DropStep(index, step);
                      return Status::OK();
                    }).status());
    (void)DeleteGarbage(cleanup_client_.get());  // best effort: gc finishes the job
    return Status::OK();
  }

  // Rewrites the objects of saves whose own step is gone and whose chunks
  // kept steps still share, where their unused share reaches
  // options.min_unused_fraction (bucket/object_rewrite.h), each save's
  // rewrite committed by one conditional index write; the objects it
  // replaced are deleted by gc once its marker is older than
  // abandoned_save_seconds (proto/FORMAT.md §9, "Rewriting").
  StatusOr<ReclaimStats> ReclaimSpace(const ReclaimOptions& options) override {
    if (!(options.min_unused_fraction >= 0 && options.min_unused_fraction <= 1)) {
      return Status::InvalidArgument("ReclaimOptions.min_unused_fraction is " +
                                     std::to_string(options.min_unused_fraction) + "; it must be in [0, 1]");
    }
    ReclaimStats stats;
    // Listed before the index is read: a save that starts later reads the
    // index after this, and the commit of a rewrite refuses no save that
    // read it before (CheckSharedSavesStay refuses the save).
    ASSIGN_OR_RETURN(s3::Listing pending, client_->ListAllTimed(bucket_, prefix_ + "pending/"));
    ASSIGN_OR_RETURN(IndexSnapshot snap, ReadIndex(client_.get(), bucket_, prefix_));
    std::set<SaveRef> owned;
    std::map<SaveRef, std::set<int64_t>> users;  // of each save, the steps that read it
    for (const auto& [step, s] : snap.index.steps) {
      owned.insert(SaveRef{step, s.summary.save_id});
      for (const SaveRef& u : s.uses) users[u].insert(step);
    }
    bool any_shared = false;
    for (const auto& [save, steps] : users) any_shared = any_shared || owned.count(save) == 0;
    if (!any_shared) return stats;
    const MarkerAges markers(pending, prefix_.size() + 8, options_.abandoned_save_seconds);
    for (const auto& [ref, objects] : markers.all()) stats.saves_running += markers.Young(ref) ? 1 : 0;
    if (stats.saves_running > 0) return stats;
    if (!options.dry_run) RETURN_IF_ERROR(CheckConditionalWrites());
    // The kept steps' records, read whole once: their chunks, their objects.
    std::map<int64_t, StatusOr<WholeStepRecord>> records;
    auto record_of = [&](int64_t step) -> const StatusOr<WholeStepRecord>& {
      auto it = records.find(step);
      if (it == records.end()) {
        const IndexStep& s = snap.index.steps.at(step);
        StatusOr<std::string> value = client_->GetObject(bucket_, StepRecordKey(prefix_, step, s.summary.save_id));
        StatusOr<WholeStepRecord> r =
            value.ok() ? DecodeWholeStepRecord(*value) : StatusOr<WholeStepRecord>(value.status());
        if (r.ok() && (r->metadata.step != step || r->metadata.save_id != s.summary.save_id)) {
          r = Status::DataLoss("the record of step " + std::to_string(step) + " holds another save's metadata");
        }
        it = records.emplace(step, std::move(r)).first;
      }
      return it->second;
    };
    SharedChunkView view;
    for (const auto& [step, s] : snap.index.steps) view.kept_refs[step] = s.uses;
    view.kept_owns = [&](const SaveRef& save) { return owned.count(save) != 0; };
    view.metadata_of = [&](int64_t step) -> StatusOr<StepMetadata> {
      const StatusOr<WholeStepRecord>& r = record_of(step);
      if (!r.ok()) return r.status();
      return r->metadata;
    };
    ASSIGN_OR_RETURN(auto used, UsedRangesOfSharedSaves(view));
    bool committed = false;
    for (const auto& [save, ranges] : used) {
      // The objects the steps read of it now: every record of them lists
      // them all (or its objects before a rewrite the index replaces).
      std::vector<SstObject> objects;
      std::set<std::string> seen;
      for (int64_t step : users[save]) {
        const StatusOr<WholeStepRecord>& r = record_of(step);
        if (!r.ok()) continue;  // (its metadata was read above: not reached)
        for (SstObject& o : ObjectsNow(snap.index, prefix_, r->objects)) {
          SaveRef of;
          if (SaveOfDataObject(prefix_, o.key, &of) && of == save && seen.insert(o.key).second) {
            objects.push_back(std::move(o));
          }
        }
      }
      ASSIGN_OR_RETURN(bool done, RewriteSave(snap, save, users[save], objects, ranges, options, &stats));
      committed = committed || done;
    }
    if (committed) (void)DeleteGarbage(cleanup_client_.get());  // best effort: gc finishes the job
    return stats;
  }

  StatusOr<std::vector<int64_t>> Prune(const RetentionPolicy& policy, bool dry_run) override {
    RETURN_IF_ERROR(ValidateRetentionPolicy(policy, "policy"));
    ASSIGN_OR_RETURN(IndexSnapshot snap, ReadIndex(client_.get(), bucket_, prefix_));
    std::vector<int64_t> dropped = PruneIndex(&snap.index, policy);
    if (dry_run || dropped.empty()) return dropped;
    RETURN_IF_ERROR(CheckConditionalWrites());
    RETURN_IF_ERROR(UpdateIndex(client_.get(), bucket_, prefix_, [&](BucketIndex* index) {
                      dropped = PruneIndex(index, policy);
                      return Status::OK();
                    }).status());
    (void)DeleteGarbage(cleanup_client_.get());  // best effort: gc finishes the job
    return dropped;
  }

  std::vector<int64_t> PrunedByLastCommit() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return pruned_last_;
  }

  StatusOr<std::optional<int64_t>> Tag(int64_t step, const std::string& name) override {
    RETURN_IF_ERROR(ValidateTagName(name));
    RETURN_IF_ERROR(CheckConditionalWrites());
    std::optional<int64_t> before;
    RETURN_IF_ERROR(UpdateIndex(client_.get(), bucket_, prefix_, [&](BucketIndex* index) {
                      if (index->steps.count(step) == 0) return Status::NotFound(StepNotFound(step, path_));
                      auto it = index->tags.find(name);
                      before = it == index->tags.end() ? std::nullopt : std::optional<int64_t>(it->second);
                      index->tags[name] = step;
                      return Status::OK();
                    }).status());
    return before;
  }

  Status DeleteTag(const std::string& name) override {
    RETURN_IF_ERROR(CheckConditionalWrites());
    return UpdateIndex(client_.get(), bucket_, prefix_, [&](BucketIndex* index) {
             if (index->tags.erase(name) == 0) {
               return Status::NotFound("tag '" + name + "' not found in store '" + path_ + "'");
             }
             return Status::OK();
           })
        .status();
  }

  const std::string& path() const override { return path_; }

 private:
  // Removes `step` and the tags naming it from the index.
  static void DropStep(BucketIndex* index, int64_t step) {
    index->steps.erase(step);
    for (auto it = index->tags.begin(); it != index->tags.end();) {
      it = it->second == step ? index->tags.erase(it) : std::next(it);
    }
    ForgetUnusedRewrites(index);
  }

  // Drops what `policy` drops from the index; returns those steps.
  static std::vector<int64_t> PruneIndex(BucketIndex* index, const RetentionPolicy& policy) {
    if (!policy.enabled()) return {};
    std::vector<int64_t> steps;
    std::set<int64_t> tagged;
    std::map<int64_t, double> best_values;
    for (const auto& [step, s] : index->steps) {
      steps.push_back(step);
      auto m = s.summary.metrics.find(policy.best_metric);
      if (policy.keep_best > 0 && m != s.summary.metrics.end()) best_values[step] = m->second;
    }
    for (const auto& [name, step] : index->tags) tagged.insert(step);
    std::vector<int64_t> dropped = StepsToPrune(steps, tagged, policy, best_values);
    for (int64_t step : dropped) DropStep(index, step);
    return dropped;
  }

  // One save's rewrite (ReclaimSpace): its new objects, under a marker that
  // gc honours as it does a running save's, then the index write that names
  // them, refused when the save's readers or rewrite changed since `snap`.
  // Returns whether a rewrite was committed.
  StatusOr<bool> RewriteSave(const IndexSnapshot& snap, const SaveRef& save, const std::set<int64_t>& readers,
                             const std::vector<SstObject>& objects, const std::vector<KeyRange>& used,
                             const ReclaimOptions& options, ReclaimStats* stats) {
    auto before = snap.index.rewritten.find(save);
    const uint64_t id_before = before == snap.index.rewritten.end() ? 0 : before->second.rewrite_id;
    const uint64_t id = NewSaveId();
    const std::string folder = RewriteDataPrefix(prefix_, save, id);
    std::unique_ptr<SaveMarker> marker;
    if (!options.dry_run) {
      marker = std::make_unique<SaveMarker>(client_.get(), bucket_, RewriteMarkerKey(prefix_, save, id),
                                            HeartbeatInterval(options_.abandoned_save_seconds));
      RETURN_IF_ERROR(marker->Start());
    }
    RewriteOptions ro;
    ro.min_unused_fraction = options.min_unused_fraction;
    ro.dry_run = options.dry_run;
    ro.cleanup_client = cleanup_client_.get();
    StatusOr<SaveRewrite> rewrite = RewriteSaveObjects(client_.get(), bucket_, objects, used, folder, ro);
    if (!rewrite.ok()) {
      // (Its uploads are deleted already.)
      if (marker != nullptr) {
        marker->Stop();
        (void)cleanup_client_->DeleteObject(bucket_, marker->key());
      }
      return rewrite.status();
    }
    stats->files_rewritten += rewrite->files_rewritten;
    stats->bytes_before += rewrite->bytes_before;
    stats->bytes_after += rewrite->bytes_after;
    stats->files_left += rewrite->files_left;
    stats->unused_bytes_left += rewrite->unused_bytes_left;
    if (marker == nullptr) return false;  // a dry run
    std::vector<std::string> uploaded;
    for (const SstObject& o : rewrite->objects) {
      if (o.key.compare(0, folder.size(), folder) == 0) uploaded.push_back(o.key);
    }
    Status status;
    const bool changed = rewrite->changed;
    if (changed && options_.abandoned_save_seconds > 0 &&
        marker->StalestAge().count() * 2 >= options_.abandoned_save_seconds * 1000) {
      status = Status::Aborted("the rewrite of step " + std::to_string(save.step) + "'s objects in " + path_ +
                               " was not committed: its marker went unrefreshed past half of "
                               "abandoned_save_seconds, so gc may have taken it for dead");
    }
    bool committed = false;
    bool unknown = false;  // the index write failed without saying whether it landed
    if (status.ok() && changed) {
      bool refused = false;
      StatusOr<IndexSnapshot> written = UpdateIndex(client_.get(), bucket_, prefix_, [&](BucketIndex* index) {
        auto now = index->rewritten.find(save);
        bool same = (now == index->rewritten.end() ? 0 : now->second.rewrite_id) == id_before;
        for (const auto& [step, s] : index->steps) {
          if (step == save.step && s.summary.save_id == save.save_id) same = false;  // (owned again: never)
          if (std::binary_search(s.uses.begin(), s.uses.end(), save) && readers.count(step) == 0) same = false;
        }
        if (!same) {
          refused = true;
          return Status::Aborted("the steps that read the save, or its objects, changed during the rewrite");
        }
        index->rewritten[save] = RewrittenSave{id, rewrite->objects};
        ForgetUnusedRewrites(index);
        return Status::OK();
      });
      committed = written.ok();
      // Refused (another writer changed what the rewrite rests on): left for
      // a later gc. Failed otherwise: the index may name the new objects.
      if (!written.ok() && !refused) {
        status = written.status();
        unknown = true;
      }
    }
    marker->Stop();
    if (committed || unknown) {
      // Written again: gc keeps the objects the rewrite replaced (or, when
      // its index write did not land, its own) for abandoned_save_seconds
      // from now, and the index decides which are the save's.
      (void)client_->PutObject(bucket_, marker->key(), "");
    } else {
      uploaded.push_back(marker->key());
      (void)DeleteKeys(cleanup_client_.get(), bucket_, uploaded);  // what gc would delete later
    }
    if (!status.ok()) return status;
    return committed;
  }

  // A save that shares chunks of other saves commits only while a step of
  // the index still reads them (a step deleted during the save may have had
  // its objects deleted already), and while gc has not rewritten their
  // objects since the save read them (`rewrite_ids`: the rewrite of each
  // save then, none when absent): the rewrite kept the chunks the steps of
  // its time use, which need not be this save's.
  Status CheckSharedSavesStay(const BucketIndex& index, const std::vector<SaveRef>& uses, const SaveRef& self,
                              const std::map<SaveRef, uint64_t>& rewrite_ids) {
    std::set<SaveRef> read;
    for (const auto& [step, s] : index.steps) read.insert(s.uses.begin(), s.uses.end());
    for (const SaveRef& ref : uses) {
      if (ref == self) continue;
      if (read.count(ref) == 0) {
        return Status::Aborted("step " + std::to_string(self.step) + " shares chunks with step " +
                               std::to_string(ref.step) + ", which was deleted from " + path_ +
                               " during the save; nothing was committed: save again");
      }
      auto now = index.rewritten.find(ref);
      auto then = rewrite_ids.find(ref);
      const uint64_t id_now = now == index.rewritten.end() ? 0 : now->second.rewrite_id;
      if (id_now != (then == rewrite_ids.end() ? 0 : then->second)) {
        return Status::Aborted("step " + std::to_string(self.step) + " shares chunks of step " +
                               std::to_string(ref.step) + "'s save, whose objects gc rewrote in " + path_ +
                               " during the save; nothing was committed: save again");
      }
    }
    return Status::OK();
  }

  // Every write of the history rests on conditional writes: refused on a
  // server that ignores them (bucket/conditional_probe.h).
  Status CheckConditionalWrites() { return ConditionalWriteVerdict(client_.get(), bucket_, prefix_); }

  // The save's marker must never have been older than half the threshold:
  // then gc, judging by the server's clock with a threshold of at least that
  // half, cannot have taken the save for dead and deleted its objects.
  Status CheckMarkerFresh(const SaveContext& ctx) {
    if (options_.abandoned_save_seconds <= 0) return Status::OK();
    std::lock_guard<std::mutex> lock(mu_);
    auto it = markers_.find(ctx.save_id);
    if (it == markers_.end()) return Status::OK();  // a writer that did not Prepare this save
    const int64_t stalest_ms = it->second->StalestAge().count();
    if (stalest_ms * 2 < options_.abandoned_save_seconds * 1000) return Status::OK();
    const Status why = it->second->last_error();
    return Status::Aborted("step " + std::to_string(ctx.step) + " was not committed to " + path_ + ": its pending " +
                           "marker went " + std::to_string(stalest_ms / 1000.0).substr(0, 6) +
                           " s without a refresh, past half of abandoned_save_seconds (" +
                           std::to_string(options_.abandoned_save_seconds) +
                           " s), so gc may have taken the save for dead and deleted its objects" +
                           (why.ok() ? std::string() : " (the last refresh failed: " + why.message() + ")") +
                           "; save again");
  }

  // Ends the save's heartbeat; returns its marker (null when none).
  std::unique_ptr<SaveMarker> StopMarker(uint64_t save_id) {
    std::unique_ptr<SaveMarker> marker;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = markers_.find(save_id);
      if (it != markers_.end()) {
        marker = std::move(it->second);
        markers_.erase(it);
      }
      base_.erase(save_id);
    }
    if (marker != nullptr) marker->Stop();
    return marker;
  }

  enum class Committed { kThisSave, kNotThisSave, kUnknown };
  // Whether the index names ctx.step as this save's, read back.
  Committed CommittedBy(const SaveContext& ctx, s3::S3Client* client) {
    StatusOr<IndexSnapshot> snap = ReadIndex(client, bucket_, prefix_);
    if (!snap.ok()) return Committed::kUnknown;
    auto it = snap->index.steps.find(ctx.step);
    if (it == snap->index.steps.end()) return Committed::kNotThisSave;
    return it->second.summary.save_id == ctx.save_id ? Committed::kThisSave : Committed::kNotThisSave;
  }

  // The save is over: its marker goes (best effort: a marker left behind
  // only makes gc wait abandoned_save_seconds longer for its leftovers).
  void EndSave(const SaveContext& ctx) {
    std::unique_ptr<SaveMarker> marker = StopMarker(ctx.save_id);
    if (marker != nullptr) (void)cleanup_client_->DeleteObject(bucket_, marker->key());
  }

  // Every object under the prefix that no committed step reads and no
  // running save may still need. Lists data/, steps/ and pending/ before
  // reading the index: a save writes its marker before any object and
  // deletes it only after its index write, so an object listed here is
  // either named by the index read after, or its save's marker was listed,
  // or its save is over without a commit (proto/FORMAT.md, "gc").
  StatusOr<Garbage> FindGarbage(s3::S3Client* client) {
    ASSIGN_OR_RETURN(std::vector<s3::ObjectInfo> data, client->ListAll(bucket_, prefix_ + "data/"));
    ASSIGN_OR_RETURN(std::vector<s3::MultipartUploadInfo> uploads,
                     client->ListMultipartUploads(bucket_, prefix_ + "data/"));
    ASSIGN_OR_RETURN(std::vector<s3::ObjectInfo> records, client->ListAll(bucket_, prefix_ + "steps/"));
    ASSIGN_OR_RETURN(s3::Listing pending_listing, client->ListAllTimed(bucket_, prefix_ + "pending/"));
    ASSIGN_OR_RETURN(s3::Listing rewrite_listing, client->ListAllTimed(bucket_, prefix_ + "rewrites/"));
    ASSIGN_OR_RETURN(IndexSnapshot snap, ReadIndex(client, bucket_, prefix_));
    std::set<SaveRef> used;
    for (const auto& [step, s] : snap.index.steps) {
      used.insert(s.uses.begin(), s.uses.end());
      used.insert(SaveRef{step, s.summary.save_id});
    }
    const MarkerAges markers(pending_listing, prefix_.size() + 8, options_.abandoned_save_seconds);
    auto running = [&](const SaveRef& ref) { return markers.Young(ref); };
    // A save's rewrite is running, or committed so recently that a reader
    // may still hold the objects it replaced.
    const MarkerAges rewrites(rewrite_listing, prefix_.size() + 9, options_.abandoned_save_seconds);
    Garbage g;
    std::map<SaveRef, std::vector<const s3::ObjectInfo*>> saves;
    std::set<SaveRef> with_record;
    for (const s3::ObjectInfo& o : data) {
      SaveRef ref;
      if (SaveOfDataObject(prefix_, o.key, &ref)) saves[ref].push_back(&o);
    }
    for (const s3::ObjectInfo& o : records) {
      SaveRef ref;
      if (ParseSaveRef(std::string_view(o.key).substr(prefix_.size() + 6), '/', &ref)) {
        saves[ref].push_back(&o);
        with_record.insert(ref);
      }
    }
    for (const auto& [ref, objects] : saves) {
      if (used.count(ref) != 0) {
        if (!rewrites.Young(ref)) AddReplaced(snap.index, ref, objects, &g);
        continue;
      }
      if (running(ref)) {
        ++g.running_saves;
        continue;
      }
      for (const s3::ObjectInfo* o : objects) {
        g.keys.push_back(o->key);
        g.bytes += o->size;
      }
      ++(with_record.count(ref) != 0 ? g.deleted_saves : g.failed_saves);
    }
    for (const s3::MultipartUploadInfo& u : uploads) {
      SaveRef ref;
      // (An upload of a used save is a rewrite's.)
      if (SaveOfDataObject(prefix_, u.key, &ref) &&
          (used.count(ref) == 0 ? !running(ref) : !rewrites.Young(ref))) {
        g.uploads.emplace_back(u.key, u.upload_id);
      }
    }
    for (const auto& [ref, objects] : markers.all()) {
      if (running(ref)) continue;
      for (const s3::ObjectInfo* o : objects) g.keys.push_back(o->key);
      if (saves.count(ref) == 0) ++g.stale_markers;
    }
    // After the objects they protected (keys are deleted in order).
    for (const auto& [ref, objects] : rewrites.all()) {
      if (rewrites.Young(ref)) continue;
      for (const s3::ObjectInfo* o : objects) g.keys.push_back(o->key);
    }
    return g;
  }

  // The objects of `save` (one that steps use) that its steps no longer
  // read: those a committed rewrite replaced, or a failed one uploaded.
  void AddReplaced(const BucketIndex& index, const SaveRef& save, const std::vector<const s3::ObjectInfo*>& objects,
                   Garbage* g) const {
    const std::string own = SaveDataPrefix(prefix_, save.step, save.save_id);
    std::set<std::string> now;
    auto r = index.rewritten.find(save);
    if (r != index.rewritten.end()) {
      for (const SstObject& o : r->second.objects) now.insert(o.key);
    }
    for (const s3::ObjectInfo* o : objects) {
      if (o->key.compare(0, own.size(), own) != 0) continue;  // its record
      // Not rewritten: the save's own objects are those right in its folder.
      const bool current = r != index.rewritten.end() ? now.count(o->key) != 0
                                                      : o->key.find('/', own.size()) == std::string::npos;
      if (current) continue;
      g->keys.push_back(o->key);
      g->bytes += o->size;
      ++g->replaced_objects;
    }
  }

  StatusOr<Garbage> DeleteGarbage(s3::S3Client* client) {
    ASSIGN_OR_RETURN(Garbage g, FindGarbage(client));
    for (const auto& [key, id] : g.uploads) RETURN_IF_ERROR(client->AbortMultipartUpload(bucket_, key, id));
    RETURN_IF_ERROR(DeleteKeys(client, bucket_, g.keys));
    return g;
  }

  StatusOr<SweepStats> SweepOrFind(bool dry_run) {
    ASSIGN_OR_RETURN(Garbage g, dry_run ? FindGarbage(client_.get()) : DeleteGarbage(client_.get()));
    SweepStats s;
    s.orphan_saves = g.failed_saves;
    s.staging_dirs = g.stale_markers + g.uploads.size();
    s.deleted_saves_reclaimed = g.deleted_saves;
    s.replaced_objects = g.replaced_objects;
    return s;
  }

  // One HEAD per object, 16 at once (ThreadFanout: as many threads as a
  // capped process can start); the first failure stops the rest.
  Status CheckSizes(const SaveContext& ctx, const std::vector<SstObject>& objects) {
    constexpr size_t kHeadThreads = 16;
    std::atomic<bool> failed{false};
    std::mutex mu;
    Status first;
    ThreadFanout heads(objects.size(), kHeadThreads - 1, [&](size_t i) {
      if (failed.load()) return;
      const SstObject& o = objects[i];
      StatusOr<s3::ObjectInfo> info = client_->HeadObject(bucket_, o.key);
      Status s = info.status();
      if (s.ok() && info->size != o.size) {
        s = Status::DataLoss("object s3://" + bucket_ + "/" + o.key + " of step " + std::to_string(ctx.step) +
                             " holds " + std::to_string(info->size) + " bytes, but " + std::to_string(o.size) +
                             " were uploaded");
      }
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first.ok()) first = s;
        failed = true;
      }
    });
    heads.Join();  // (the caller takes jobs too)
    return first;
  }

  const std::shared_ptr<s3::S3Client> client_;
  const std::shared_ptr<s3::S3Client> cleanup_client_;  // one try per request
  const std::string bucket_;
  const std::string prefix_;
  const std::string path_;  // s3://bucket/prefix
  const StoreOptions options_;
  const BucketWriteOptions write_options_;
  mutable std::mutex mu_;
  std::map<uint64_t, std::unique_ptr<SaveMarker>> markers_;  // save id -> its running marker; guarded by mu_
  // What a save read of the step it deduplicates against: the objects that
  // hold that step's chunks, and the rewrite of each save then.
  struct Base {
    std::vector<SstObject> objects;
    std::map<SaveRef, uint64_t> rewrite_ids;
  };
  std::map<uint64_t, Base> base_;  // save id -> its base; guarded by mu_
  std::vector<int64_t> pruned_last_;                         // guarded by mu_
};

class BucketReader : public StoreReader, public ChunkPlaceSource {
 public:
  BucketReader(std::shared_ptr<s3::S3Client> client, std::string bucket, std::string prefix, int threads)
      : client_(std::move(client)),
        bucket_(std::move(bucket)),
        prefix_(std::move(prefix)),
        path_("s3://" + bucket_ + "/" + prefix_),
        threads_(threads) {}

  Status Refresh() override {
    ASSIGN_OR_RETURN(IndexSnapshot snap, ReadIndex(client_.get(), bucket_, prefix_));
    if (!snap.exists) {
      return Status::NotFound("no ckptdb store at " + path_ + " (no object " + IndexKey(prefix_) +
                              " in bucket '" + bucket_ + "': a store is made by its first committed save)");
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (RewriteIds(snap.index) != RewriteIds(index_)) {
      // The objects that hold a save's chunks follow the index: what was
      // opened before stays alive (a Read may be using it) but is not used.
      heads_.clear();
      objects_.clear();
      for (auto& [save, source] : sources_) retired_sources_.push_back(std::move(source));
      sources_.clear();
    }
    index_ = std::move(snap.index);
    return Status::OK();
  }

  StatusOr<std::vector<StepInfo>> ListSteps() override {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<int64_t, std::vector<std::string>> tags;
    for (const auto& [name, step] : index_.tags) tags[step].push_back(name);
    std::vector<StepInfo> out;
    for (const auto& [step, s] : index_.steps) {
      StepInfo info;
      info.step = step;
      info.created_unix_ms = s.summary.created_unix_ms;
      info.world_size = s.summary.world_size;
      info.entries = s.summary.entries;
      info.logical_bytes = s.summary.logical_bytes;
      info.stored_bytes = s.summary.stored_bytes;
      info.tags = tags[step];
      info.metrics = s.summary.metrics;
      info.note = s.summary.note;
      out.push_back(std::move(info));
    }
    return out;
  }

  StatusOr<int64_t> LatestStep() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (index_.steps.empty()) return Status::NotFound("store '" + path_ + "' has no committed step");
    return index_.steps.rbegin()->first;
  }

  StatusOr<int64_t> LatestStepAtOrBefore(int64_t step) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.steps.upper_bound(step);
    if (it == index_.steps.begin()) {
      return Status::NotFound("store '" + path_ + "' has no committed step at or before " + std::to_string(step));
    }
    return std::prev(it)->first;
  }

  StatusOr<bool> HasStep(int64_t step) override {
    std::lock_guard<std::mutex> lock(mu_);
    return index_.steps.count(step) != 0;
  }

  StatusOr<std::map<std::string, int64_t>> ListTags() override {
    std::lock_guard<std::mutex> lock(mu_);
    return index_.tags;
  }

  StatusOr<int64_t> ResolveTag(const std::string& name) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.tags.find(name);
    if (it == index_.tags.end()) return Status::NotFound("tag '" + name + "' not found in store '" + path_ + "'");
    return it->second;
  }

  StatusOr<int64_t> BestStep(const std::string& name, MetricMode mode) override {
    RETURN_IF_ERROR(ValidateMetricName(name));
    std::map<int64_t, double> values;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [step, s] : index_.steps) {
        auto it = s.summary.metrics.find(name);
        if (it != s.summary.metrics.end()) values[step] = it->second;
      }
    }
    const std::vector<int64_t> ranked = RankByMetric(values, mode);
    if (ranked.empty()) return Status::NotFound("no step of store '" + path_ + "' has metric '" + name + "'");
    return ranked.front();
  }

  // The index is one checksummed object (a damaged one fails the open); a
  // step record is checked when its step is read.
  StatusOr<std::vector<RecordDamage>> FindDamagedRecords() override { return std::vector<RecordDamage>{}; }

  StatusOr<StoreStats> GetStoreStats() override {
    ASSIGN_OR_RETURN(std::vector<s3::ObjectInfo> all, client_->ListAll(bucket_, prefix_));
    StoreStats s;
    const std::string data = prefix_ + "data/", pending = prefix_ + "pending/";
    for (const s3::ObjectInfo& o : all) {
      s.disk_bytes += o.size;
      if (o.key.compare(0, data.size(), data) == 0) {
        ++s.sst_files;
        s.sst_bytes += o.size;
      } else if (o.key.compare(0, pending.size(), pending) == 0) {
        ++s.staging_dirs;
      }
    }
    return s;
  }

  const std::string& path() const override { return path_; }

  StatusOr<StepMetadata> ReadMetadata(int64_t step) override {
    ASSIGN_OR_RETURN(const SaveRef save, CommittedSave(step));
    const std::string key = StepRecordKey(prefix_, step, save.save_id);
    ASSIGN_OR_RETURN(std::string value, GetRecord(step, key, 0, 0));
    StatusOr<WholeStepRecord> record = DecodeWholeStepRecord(value);
    if (!record.ok()) return Damaged(step, key, record.status());
    RETURN_IF_ERROR(CheckHolds(record->metadata, save, key));
    std::lock_guard<std::mutex> lock(mu_);
    objects_[save] = ObjectsNow(index_, prefix_, std::move(record->objects));
    return std::move(record->metadata);
  }

  // A version-2 or 3 record: its head (one GET, two when it is over 64
  // KiB) and the named entries' pieces values (a GET per run of adjacent
  // ones). A version-1 record is read whole.
  StatusOr<StepMetadata> ReadMetadataOf(int64_t step, const std::vector<std::string>& fqns) override {
    ASSIGN_OR_RETURN(StepMetadata md, ReadStepSummary(step));
    RETURN_IF_ERROR(ReadEntryPieces(&md, fqns));
    return md;
  }

  // As ReadMetadataOf, reading of an entry kept in pages (version 3) only
  // the pages that meet its regions.
  StatusOr<StepMetadata> ReadMetadataFor(int64_t step, const std::vector<std::string>& fqns,
                                         const std::vector<EntryRegion>& regions) override {
    ASSIGN_OR_RETURN(StepMetadata md, ReadStepSummary(step));
    RETURN_IF_ERROR(ReadPiecesOf(&md, fqns, &regions));
    return md;
  }

  StatusOr<StepMetadata> ReadStepSummary(int64_t step) override {
    ASSIGN_OR_RETURN(const SaveRef save, CommittedSave(step));
    ASSIGN_OR_RETURN(std::shared_ptr<const RecordHead> head, HeadOf(save));
    if (head->whole.has_value()) return *head->whole;  // version 1
    return head->head.summary;
  }

  Status ReadEntryPieces(StepMetadata* metadata, const std::vector<std::string>& fqns) override {
    return ReadPiecesOf(metadata, fqns, nullptr);
  }

  StatusOr<ReadStats> Read(const StepMetadata& metadata, const std::vector<ReadItem>& items) override {
    ASSIGN_OR_RETURN(const SstObjectSource* source, SourceOf(SaveRef{metadata.step, metadata.save_id}));
    return ReadChunksFrom(source->Getter(), metadata, items, threads_, source->Planner());
  }

  // The objects the save's record lists (its head, read once).
  StatusOr<std::unique_ptr<ChunkPlaceIndex>> PlacesOf(int64_t step, uint64_t save_id) override {
    const SaveRef save{step, save_id};
    RETURN_IF_ERROR(HeadOf(save).status());
    std::lock_guard<std::mutex> lock(mu_);
    return StepObjectPlaces(objects_[save]);
  }

 private:
  // Reads into `metadata` the pieces of the entries `fqns` names that it
  // lacks: of an entry kept in pages that `regions` names, only the pages
  // that meet its regions (pieces_partial unless that is every page); of
  // the others, every value. One ranged GET per run of adjacent values.
  Status ReadPiecesOf(StepMetadata* metadata, const std::vector<std::string>& fqns,
                      const std::vector<EntryRegion>* regions) {
    const SaveRef save{metadata->step, metadata->save_id};
    ASSIGN_OR_RETURN(const SaveRef now, CommittedSave(metadata->step));
    if (now.save_id != save.save_id) {
      return Status::FailedPrecondition("step " + std::to_string(save.step) +
                                        " was saved again since its metadata was read");
    }
    ASSIGN_OR_RETURN(std::shared_ptr<const RecordHead> head, HeadOf(save));
    const std::unordered_set<std::string> named(fqns.begin(), fqns.end());
    std::vector<size_t> wanted;  // entries to read, in record order
    for (size_t i = 0; i < metadata->entries.size(); ++i) {
      const EntryMetadata& e = metadata->entries[i];
      if (e.pieces_omitted && named.count(e.fqn) > 0) wanted.push_back(i);
    }
    if (wanted.empty()) return Status::OK();
    if (head->whole.has_value()) {  // version 1: the pieces came with the record
      for (size_t i : wanted) {
        if (i >= head->whole->entries.size() || head->whole->entries[i].fqn != metadata->entries[i].fqn) continue;
        metadata->entries[i].pieces = head->whole->entries[i].pieces;
        metadata->entries[i].pieces_omitted = false;
      }
      return Status::OK();
    }
    std::unordered_map<std::string, std::vector<EntryRegion>> by_entry;
    if (regions != nullptr) {
      for (const EntryRegion& r : *regions) by_entry[r.fqn].push_back(r);
    }
    // Every value to read: (entry, page or none for an entry's one value).
    struct Value {
      size_t entry;
      std::optional<uint32_t> page;
      ByteRange at;
    };
    std::vector<Value> values;
    std::vector<size_t> paged_all;  // paged entries read whole
    for (size_t i : wanted) {
      const std::vector<ByteRange>& at = head->head.pieces[i];
      const std::vector<PiecesPage>& pages = head->head.pages[i];
      if (pages.empty()) {
        values.push_back({i, std::nullopt, at[0]});
        continue;
      }
      auto found = by_entry.find(metadata->entries[i].fqn);
      std::vector<uint32_t> chosen;
      if (found != by_entry.end()) {
        chosen = PagesMeeting(pages, found->second);
      } else {
        for (uint32_t p = 0; p < pages.size(); ++p) chosen.push_back(p);
      }
      if (chosen.size() == pages.size()) paged_all.push_back(i);
      for (uint32_t p : chosen) values.push_back({i, p, at[p]});
    }
    std::sort(values.begin(), values.end(), [](const Value& a, const Value& b) { return a.at.offset < b.at.offset; });
    std::unordered_map<size_t, std::vector<StoredPiece>> pieces;  // of the paged entries read
    for (size_t i : wanted) {
      if (!head->head.pages[i].empty()) pieces[i];
    }
    const std::string key = StepRecordKey(prefix_, save.step, save.save_id);
    // Runs of adjacent values, a GET each: fetched threads_ at once (a rank
    // loading its own rows of many paged entries reads a page of each, which
    // do not lie side by side), decoded in order on this thread.
    struct Run {
      size_t first, last;  // values [first, last)
      ByteRange at;        // their bytes in the record
    };
    std::vector<Run> runs;
    for (size_t a = 0; a < values.size();) {
      size_t b = a + 1;
      while (b < values.size() && values[b].at.offset == values[b - 1].at.offset + values[b - 1].at.size) ++b;
      const uint64_t begin = values[a].at.offset;
      runs.push_back(Run{a, b, ByteRange{begin, values[b - 1].at.offset + values[b - 1].at.size - begin}});
      a = b;
    }
    auto fetch = [&](size_t r, std::string* bytes) -> Status {
      const Run& run = runs[r];
      ASSIGN_OR_RETURN(*bytes, GetRecord(save.step, key, run.at.offset, run.at.size));
      if (bytes->size() != run.at.size) {
        return Status::DataLoss("step record s3://" + bucket_ + "/" + key + " of step " + std::to_string(save.step) +
                                " ends before the pieces of entry '" +
                                metadata->entries[values[run.last - 1].entry].fqn + "'");
      }
      return Status::OK();
    };
    auto decode = [&](size_t r, std::string& fetched) -> Status {
      const Run& run = runs[r];
      for (size_t k = run.first; k < run.last; ++k) {
        const Value& v = values[k];
        const std::string_view bytes = std::string_view(fetched).substr(v.at.offset - run.at.offset, v.at.size);
        if (!v.page.has_value()) {
          RETURN_IF_ERROR(DecodeEntryPiecesValue(bytes, *metadata, &metadata->entries[v.entry]));
        } else {
          RETURN_IF_ERROR(DecodeEntryPiecesPage(bytes, *metadata, metadata->entries[v.entry], *v.page,
                                                &head->head.pages[v.entry][*v.page], &pieces[v.entry]));
        }
      }
      return Status::OK();
    };
    const int threads = static_cast<int>(std::min<size_t>(runs.size(), static_cast<size_t>(threads_)));
    RETURN_IF_ERROR(RunOrdered(runs.size(), threads, static_cast<size_t>(std::max(threads, 1)) * 2, fetch, decode));
    for (auto& [i, got] : pieces) {
      const bool all = std::find(paged_all.begin(), paged_all.end(), i) != paged_all.end();
      RETURN_IF_ERROR(all ? AdoptEntryPieces(std::move(got), *metadata, &metadata->entries[i])
                          : AdoptPartialEntryPieces(std::move(got), *metadata, &metadata->entries[i]));
    }
    return Status::OK();
  }

  static std::map<SaveRef, uint64_t> RewriteIds(const BucketIndex& index) {
    std::map<SaveRef, uint64_t> ids;
    for (const auto& [save, r] : index.rewritten) ids[save] = r.rewrite_id;
    return ids;
  }

  // What a reader keeps of a step's record after its first read: the head
  // of a version-2 record, or a version-1 record whole.
  struct RecordHead {
    StepRecordHead head;
    std::optional<StepMetadata> whole;
  };

  StatusOr<SaveRef> CommittedSave(int64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.steps.find(step);
    if (it == index_.steps.end()) return Status::NotFound(StepNotFound(step, path_));
    return SaveRef{step, it->second.summary.save_id};
  }

  // Bytes [offset, offset + length) of a step's record (length 0: all).
  StatusOr<std::string> GetRecord(int64_t step, const std::string& key, uint64_t offset, uint64_t length) {
    StatusOr<std::string> value = length == 0 && offset == 0 ? client_->GetObject(bucket_, key)
                                                             : client_->GetObjectRange(bucket_, key, offset, length);
    if (value.status().code() == StatusCode::kNotFound) {
      return Status::DataLoss("the record of step " + std::to_string(step) + " of store '" + path_ +
                              "' is missing (s3://" + bucket_ + "/" + key + ")");
    }
    if (value.status().code() == StatusCode::kInvalidArgument) {  // a range past its end
      return Status::DataLoss("step record s3://" + bucket_ + "/" + key + " of step " + std::to_string(step) +
                              " is shorter than its head says: " + value.status().message());
    }
    return value;
  }

  Status Damaged(int64_t step, const std::string& key, const Status& why) const {
    return Status::DataLoss("step record s3://" + bucket_ + "/" + key + " of step " + std::to_string(step) +
                            " is damaged: " + why.message());
  }

  Status CheckHolds(const StepMetadata& md, const SaveRef& save, const std::string& key) const {
    if (md.step != save.step || md.save_id != save.save_id) {
      return Status::DataLoss("step record s3://" + bucket_ + "/" + key + " holds the metadata of step " +
                              std::to_string(md.step) + " (save " + Hex16(md.save_id) + ")");
    }
    return Status::OK();
  }

  // The record's head, read once per save (and its objects noted).
  StatusOr<std::shared_ptr<const RecordHead>> HeadOf(const SaveRef& save) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = heads_.find(save);
      if (it != heads_.end()) return it->second;
    }
    const std::string key = StepRecordKey(prefix_, save.step, save.save_id);
    ASSIGN_OR_RETURN(std::string bytes, GetRecord(save.step, key, 0, kStepRecordFirstRead));
    StatusOr<uint64_t> end = StepRecordHeadEnd(bytes);
    if (!end.ok()) return Damaged(save.step, key, end.status());
    auto head = std::make_shared<RecordHead>();
    std::vector<SstObject> objects;
    if (*end == 0) {  // version 1: the whole record
      if (bytes.size() == kStepRecordFirstRead) {
        ASSIGN_OR_RETURN(bytes, GetRecord(save.step, key, 0, 0));
      }
      StatusOr<WholeStepRecord> whole = DecodeWholeStepRecord(bytes);
      if (!whole.ok()) return Damaged(save.step, key, whole.status());
      RETURN_IF_ERROR(CheckHolds(whole->metadata, save, key));
      head->whole = std::move(whole->metadata);
      objects = std::move(whole->objects);
    } else {
      if (bytes.size() < *end) {
        ASSIGN_OR_RETURN(std::string rest, GetRecord(save.step, key, bytes.size(), *end - bytes.size()));
        bytes += rest;
      }
      StatusOr<StepRecordHead> decoded = DecodeStepRecordHead(bytes);
      if (!decoded.ok()) return Damaged(save.step, key, decoded.status());
      RETURN_IF_ERROR(CheckHolds(decoded->summary, save, key));
      objects = std::move(decoded->objects);  // kept in objects_ alone
      head->head = std::move(*decoded);
    }
    std::lock_guard<std::mutex> lock(mu_);
    objects_.emplace(save, ObjectsNow(index_, prefix_, std::move(objects)));
    return heads_.emplace(save, std::move(head)).first->second;
  }

  // The objects of a step's record, opened once per save this reader reads.
  StatusOr<const SstObjectSource*> SourceOf(const SaveRef& save) {
    bool known = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto open = sources_.find(save);
      if (open != sources_.end()) return open->second.get();
      known = objects_.count(save) != 0;
    }
    if (!known) RETURN_IF_ERROR(HeadOf(save).status());
    std::lock_guard<std::mutex> lock(mu_);
    auto open = sources_.find(save);
    if (open != sources_.end()) return open->second.get();
    // Objects open as their keys are first looked up: a rank's load GETs
    // the tails of the objects holding its pieces, not of every rank's.
    std::unique_ptr<SstObjectSource> source =
        SstObjectSource::OpenLazily(client_.get(), bucket_, objects_[save], ObjectReadOptions());
    const SstObjectSource* raw = source.get();
    sources_[save] = std::move(source);
    return raw;
  }

  const std::shared_ptr<s3::S3Client> client_;
  const std::string bucket_;
  const std::string prefix_;
  const std::string path_;
  const int threads_;
  std::mutex mu_;
  BucketIndex index_;                                             // guarded by mu_
  std::map<SaveRef, std::vector<SstObject>> objects_;             // guarded by mu_
  std::map<SaveRef, std::shared_ptr<const RecordHead>> heads_;    // guarded by mu_
  std::map<SaveRef, std::unique_ptr<SstObjectSource>> sources_;  // guarded by mu_
  std::vector<std::unique_ptr<SstObjectSource>> retired_sources_;  // guarded by mu_
};

}  // namespace

std::string StorePrefix(const std::string& prefix) {
  if (prefix.empty() || prefix.back() == '/') return prefix;
  return prefix + "/";
}



StatusOr<std::unique_ptr<StoreWriter>> OpenBucketStoreWriter(std::shared_ptr<s3::S3Client> client,
                                                             const std::string& bucket, const std::string& prefix,
                                                             const StoreOptions& options,
                                                             const BucketWriteOptions& write_options) {
  RETURN_IF_ERROR(ValidateOptions(options, write_options));
  if (bucket.empty()) return Status::InvalidArgument("bucket store: the bucket name is empty");
  return std::unique_ptr<StoreWriter>(
      new BucketStoreWriter(std::move(client), bucket, StorePrefix(prefix), options, write_options));
}

StatusOr<std::unique_ptr<StoreReader>> OpenBucketStoreReader(std::shared_ptr<s3::S3Client> client,
                                                             const std::string& bucket, const std::string& prefix,
                                                             int read_threads) {
  if (bucket.empty()) return Status::InvalidArgument("bucket store: the bucket name is empty");
  if (read_threads < 1) return Status::InvalidArgument("bucket store: read_threads must be positive");
  auto reader = std::make_unique<BucketReader>(std::move(client), bucket, StorePrefix(prefix), read_threads);
  RETURN_IF_ERROR(reader->Refresh());
  return std::unique_ptr<StoreReader>(std::move(reader));
}

int ReadThreads(const ReaderOptions& options) {
  return options.threads > 0 ? options.threads : std::max(8, DefaultParallelism());
}

StatusOr<std::shared_ptr<s3::S3Client>> ClientFromEnvironment(int64_t stall_timeout_seconds) {
  ASSIGN_OR_RETURN(s3::S3Settings settings, s3::S3Settings::FromEnvironment());
  ASSIGN_OR_RETURN(s3::S3ClientOptions options, s3::S3ClientOptionsFromEnvironment());
  if (stall_timeout_seconds > 0) options.http.stall_timeout_s = static_cast<long>(stall_timeout_seconds);
  ASSIGN_OR_RETURN(std::unique_ptr<s3::S3Client> client, s3::S3Client::Create(std::move(settings), options));
  return std::shared_ptr<s3::S3Client>(std::move(client));
}

StatusOr<std::unique_ptr<StoreWriter>> OpenBucketStoreWriterAt(const std::string& url, const StoreOptions& options) {
  ASSIGN_OR_RETURN(s3::S3Url u, s3::S3Url::Parse(url));
  ASSIGN_OR_RETURN(std::shared_ptr<s3::S3Client> client, ClientFromEnvironment(options.s3_stall_timeout_seconds));
  return OpenBucketStoreWriter(std::move(client), u.bucket, u.prefix, options);
}

StatusOr<std::unique_ptr<StoreReader>> OpenBucketStoreReaderAt(const std::string& url, const ReaderOptions& options) {
  ASSIGN_OR_RETURN(s3::S3Url u, s3::S3Url::Parse(url));
  RETURN_IF_ERROR(ValidateReaderOptions(options));
  ASSIGN_OR_RETURN(std::shared_ptr<s3::S3Client> client, ClientFromEnvironment(options.s3_stall_timeout_seconds));
  return OpenBucketStoreReader(std::move(client), u.bucket, u.prefix,
                               ReadThreads(options));
}

}  // namespace bucket
}  // namespace ckptdb
