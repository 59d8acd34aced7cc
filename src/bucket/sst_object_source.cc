#include "bucket/sst_object_source.h"

#include <rocksdb/iterator.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "bucket/block_landing.h"
#include "bucket/block_starts.h"
#include "bucket/sst_object_options.h"
#include "format/chunk_codec.h"
#include "store/rocksdb_status.h"
#include "util/ordered_parallel.h"
#include "util/status_macros.h"

namespace ckptdb {
namespace bucket {

struct SstObjectSource::Table {
  SstObject object;
  std::string path;  // s3://BUCKET/KEY
  std::unique_ptr<rocksdb::SstFileReader> reader;
  std::mutex open_mu;
  bool open_tried = false;  // guarded by open_mu; reader usable once tried and open_status is OK
  Status open_status;       // guarded by open_mu
  // Where its blocks lie, when the object says (set with a successful open).
  std::optional<BlockStarts> blocks;

  bool MayHold(const std::string& key) const {
    if (object.smallest_key.empty() && object.largest_key.empty()) return true;
    return key >= object.smallest_key && key <= object.largest_key;  // bytewise, as DatabaseOptions() orders keys
  }
};

namespace {

// An object of the step that cannot be opened or read (deleted since it was
// listed or opened) is damage, named: never NotFound, which the load reads
// as a chunk missing from every object.
Status AsDamage(Status s) { return s.code() == StatusCode::kNotFound ? Status::DataLoss(s.message()) : s; }

std::string DescribeChunk(const DataKey& k) {
  return "chunk " + std::to_string(k.chunk) + " of step " + std::to_string(k.step) + " rank " + std::to_string(k.rank) +
         " item " + std::to_string(k.item);
}

// A run's bytes (one GET): at most kMaxRunBytes (SeaweedFS spent 0.80x the
// CPU on a 256 MiB load in 16 MiB GETs that it did in 4 MiB ones, 0.90x in
// 8 MiB ones), at least kMinRunBytes, and otherwise a quarter of a thread's
// share of the read, so that the windows in flight at once (one a thread,
// each faulting in fresh pages once: WindowPool) stay within a quarter of
// the bytes the read lands in its own memory. Either give or take
// kRunFraming, the blocks' keys and trailers (four 4 MiB chunks are one run).
constexpr uint64_t kMaxRunBytes = 16u << 20;
constexpr uint64_t kMinRunBytes = 2u << 20;
constexpr int kRunsPerThread = 4;
// Runs whose chunks all land need no window: larger, still two a thread.
constexpr uint64_t kMaxLandedRunBytes = 32u << 20;
constexpr int kLandedRunsPerThread = 2;
constexpr uint64_t kRunFraming = 64u << 10;

rocksdb::ReadOptions ChunkReadOptions() {
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;  // a damaged block is DataLoss, never parsed
  ro.fill_cache = false;
  ro.pin_data = true;  // values stay where the block holds them while the iterator lives
  ro.readahead_size = 0;
  ro.adaptive_readahead = false;
  return ro;
}

}  // namespace

SstObjectSource::~SstObjectSource() = default;

std::unique_ptr<SstObjectSource> SstObjectSource::Make(s3::S3Client* client, const std::string& bucket,
                                                       std::vector<SstObject> objects,
                                                       const ObjectReadOptions& options) {
  std::unique_ptr<SstObjectSource> source(new SstObjectSource());
  source->bucket_ = bucket;
  source->fs_ = std::make_shared<ObjectFileSystem>(client, options);
  source->env_ = rocksdb::NewCompositeEnv(source->fs_);
  const rocksdb::Options ro = SstObjectReadOptions(source->env_.get());
  for (SstObject& object : objects) {
    auto table = std::make_unique<Table>();
    table->path = ObjectPath(bucket, object.key);
    if (object.size > 0) source->fs_->SetObjectSize(table->path, object.size);
    table->object = std::move(object);
    table->reader = std::make_unique<rocksdb::SstFileReader>(ro);
    source->tables_.push_back(std::move(table));
  }
  return source;
}

Status SstObjectSource::EnsureOpen(Table& table) {
  std::lock_guard<std::mutex> lock(table.open_mu);
  if (!table.open_tried) {
    table.open_status = FromRocks(table.reader->Open(table.path), "opening the SST object " + table.path);
    if (table.open_status.ok()) {
      std::shared_ptr<const rocksdb::TableProperties> props = table.reader->GetTableProperties();
      if (props != nullptr) {
        auto p = props->user_collected_properties.find(kBlockStartsProperty);
        if (p != props->user_collected_properties.end()) table.blocks = BlockStarts::Parse(p->second, props->data_size);
      }
    }
    table.open_tried = true;
  }
  return table.open_status;
}

StatusOr<std::unique_ptr<SstObjectSource>> SstObjectSource::Open(s3::S3Client* client, const std::string& bucket,
                                                                 std::vector<SstObject> objects,
                                                                 const ObjectReadOptions& options, int open_threads) {
  std::unique_ptr<SstObjectSource> source = Make(client, bucket, std::move(objects), options);
  // Each open waits on its own GETs: many at once.
  auto& tables = source->tables_;
  RETURN_IF_ERROR(RunOrdered(
      tables.size(), std::max(1, open_threads), 2 * static_cast<size_t>(std::max(1, open_threads)),
      [&tables](size_t i, std::string*) { return EnsureOpen(*tables[i]); },
      [](size_t, std::string&) { return Status::OK(); }));
  return source;
}

std::unique_ptr<SstObjectSource> SstObjectSource::OpenLazily(s3::S3Client* client, const std::string& bucket,
                                                             std::vector<SstObject> objects,
                                                             const ObjectReadOptions& options) {
  return Make(client, bucket, std::move(objects), options);
}

StatusOr<std::optional<std::vector<SstObjectSource::KeyBlock>>> SstObjectSource::KeyBlocksOf(size_t i) const {
  Table& table = *tables_.at(i);
  RETURN_IF_ERROR(EnsureOpen(table));
  if (!table.blocks.has_value()) return std::optional<std::vector<KeyBlock>>();
  std::vector<KeyBlock> out(table.blocks->size());
  for (size_t k = 0; k < out.size(); ++k) {
    out[k].key = table.blocks->Key(k);
    out[k].block_bytes = table.blocks->End(k) - table.blocks->Begin(k);
  }
  return std::optional<std::vector<KeyBlock>>(std::move(out));
}

Status SstObjectSource::Get(const DataKey& key, rocksdb::PinnableSlice* value) const {
  return Lookup(key, value, nullptr);
}

Status SstObjectSource::Lookup(const DataKey& key, rocksdb::PinnableSlice* value, std::string* path,
                              std::shared_ptr<const ObjectWindow> window) const {
  const std::string k = EncodeDataKey(key);
  for (const auto& table : tables_) {
    if (!table->MayHold(k)) continue;
    RETURN_IF_ERROR(AsDamage(EnsureOpen(*table)));
    std::unique_ptr<rocksdb::Iterator> it(table->reader->NewIterator(ChunkReadOptions()));
    {
      const bool here = window != nullptr && window->path == table->path;
      ScopedObjectWindow scope(here ? window.get() : nullptr);
      it->Seek(k);
    }
    RETURN_IF_ERROR(
        AsDamage(FromRocks(it->status(), "reading " + DescribeChunk(key) + " from the SST object " + table->path)));
    if (it->Valid() && it->key() == rocksdb::Slice(k)) {
      if (path != nullptr) *path = table->path;
      // The value lies in the iterator's block (the bytes the GET wrote, or
      // the window's): pinned by handing the iterator, and the window, to
      // the slice, not copied. The iterator goes first.
      const rocksdb::Slice v = it->value();
      value->Reset();  // a slice pinned before lets its block go first
      auto* keep = window != nullptr ? new std::shared_ptr<const ObjectWindow>(std::move(window)) : nullptr;
      value->PinSlice(
          v,
          [](void* iterator, void* w) {
            delete static_cast<rocksdb::Iterator*>(iterator);
            delete static_cast<std::shared_ptr<const ObjectWindow>*>(w);
          },
          it.release(), keep);
      return Status::OK();
    }
  }
  return Status::NotFound("missing");
}

namespace {

// The windows of one read: a window whose last holder lets go comes back
// here (up to `keep` of them, as many as runs read at once) and is filled
// again, so a read's windows fault in their pages once, not once a run.
class WindowPool : public std::enable_shared_from_this<WindowPool> {
 public:
  explicit WindowPool(size_t keep) : keep_(keep) {}

  std::shared_ptr<ObjectWindow> Take() {
    std::unique_ptr<ObjectWindow> w;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        w = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (w == nullptr) w = std::make_unique<ObjectWindow>();
    return std::shared_ptr<ObjectWindow>(w.release(), [pool = shared_from_this()](ObjectWindow* x) {
      std::unique_ptr<ObjectWindow> back(x);
      std::lock_guard<std::mutex> lock(pool->mu_);
      if (pool->free_.size() < pool->keep_) pool->free_.push_back(std::move(back));
    });
  }

 private:
  const size_t keep_;
  std::mutex mu_;
  std::vector<std::unique_ptr<ObjectWindow>> free_;  // guarded by mu_
};

}  // namespace

// A read's runs (see PlanRuns): each run's blocks fetched into a window by
// the first Get of one of its keys, kept until Done or its last value goes.
class SstObjectSource::Runs : public ChunkRuns {
 public:
  struct Run {
    const Table* table = nullptr;  // null: a chunk read alone, by Get
    uint64_t begin = 0, end = 0;   // the blocks' bytes in the object
    struct Block {
      uint64_t begin, end;
      std::string key;  // encoded
    };
    std::vector<Block> blocks;  // each key's, in the run's order (the object's: PlanRuns)
    std::mutex mu;
    bool fetched = false, done = false;         // guarded by mu
    Status status;                              // guarded by mu: the fetch's
    std::shared_ptr<const ObjectWindow> window;  // guarded by mu
    std::vector<bool> landed;                    // guarded by mu: by Land, each key's (run order)
  };

  Runs(const SstObjectSource* source, int threads)
      : source_(source), pool_(std::make_shared<WindowPool>(static_cast<size_t>(std::max(1, threads)))) {}

  const std::vector<std::vector<size_t>>& runs() const override { return groups_; }

  Status Get(const DataKey& key, rocksdb::PinnableSlice* value) override {
    auto at = run_of_.find(EncodeDataKey(key));
    if (at == run_of_.end() || runs_[at->second.first]->table == nullptr) return source_->Get(key, value);
    Run& run = *runs_[at->second.first];
    std::shared_ptr<const ObjectWindow> window;
    {
      std::lock_guard<std::mutex> lock(run.mu);
      // A chunk that landed is not in the window: read again, alone.
      if (!run.landed.empty() && run.landed[at->second.second]) return source_->Get(key, value);
      if (!run.done && !run.fetched) {
        std::shared_ptr<ObjectWindow> w = pool_->Take();
        run.status = AsDamage(FromRocks(
            source_->fs_->FetchWindow(run.table->path, run.begin, run.end - run.begin, w.get()),
            "reading " + DescribeChunk(key) + " and the chunks beside it from the SST object " + run.table->path));
        run.fetched = true;
        if (run.status.ok()) run.window = std::move(w);
      }
      if (!run.done) {
        RETURN_IF_ERROR(run.status);
        window = run.window;
      }
    }
    return source_->Lookup(key, value, nullptr, std::move(window));
  }

  std::vector<bool> Land(size_t r, const std::vector<ChunkLanding>& spots) override {
    std::vector<bool> landed(spots.size(), false);
    Run& run = *runs_[r];
    if (run.table == nullptr || spots.size() != run.blocks.size()) return landed;
    // The blocks, each with its place (a chunk without one comes to the
    // spill window whole); a run whose chunks have none (or share a block)
    // is fetched by Get.
    if (std::none_of(spots.begin(), spots.end(), [](const ChunkLanding& s) { return s.place.dest != nullptr; })) {
      return landed;
    }
    std::vector<LandingBlock> blocks;
    blocks.reserve(spots.size());
    uint64_t next = run.begin;
    for (size_t i = 0; i < spots.size(); ++i) {
      const Run::Block& b = run.blocks[i];
      if (b.begin != next) return landed;
      next = b.end;
      const BoxPlace& place = spots[i].place;
      blocks.push_back({b.begin, b.end, b.key, spots[i].raw_bytes, place.dest, place.run_bytes, place.stride});
    }
    if (next != run.end) return landed;
    std::lock_guard<std::mutex> lock(run.mu);
    if (run.fetched || run.done) return landed;
    std::shared_ptr<ObjectWindow> spill;
    BlockLanding landing(std::move(blocks), [&] {
      spill = pool_->Take();
      ReserveWindow(spill.get(), run.end - run.begin);
      return spill->data.get();
    });
    run.status = AsDamage(FromRocks(source_->fs_->FetchStream(run.table->path, run.begin, run.end - run.begin, &landing),
                                    "reading " + std::to_string(spots.size()) + " chunks from the SST object " +
                                        run.table->path));
    run.fetched = true;
    if (!run.status.ok()) return landed;
    if (spill != nullptr) {
      spill->path = run.table->path;
      spill->begin = run.begin;
      spill->size = run.end - run.begin;  // the blocks that landed are not in it: nothing reads them
      run.window = std::move(spill);
    }
    for (size_t i = 0; i < spots.size(); ++i) landed[i] = landing.Landed(i);
    run.landed = landed;
    return landed;
  }

  void Done(size_t r) override {
    Run& run = *runs_[r];
    std::lock_guard<std::mutex> lock(run.mu);
    run.done = true;
    run.window.reset();
  }

  // Adds a run of the keys `indices` (of `keys`), whose blocks are
  // `blocks` (in the object's order), read after those before.
  void Add(const Table* table, uint64_t begin, uint64_t end, std::vector<size_t> indices,
           const std::vector<std::pair<uint64_t, uint64_t>>& blocks, const std::vector<std::string>& keys) {
    auto run = std::make_unique<Run>();
    run->table = table;
    run->begin = begin;
    run->end = end;
    run->blocks.reserve(indices.size());
    for (size_t k = 0; k < indices.size(); ++k) {
      run->blocks.push_back({blocks[k].first, blocks[k].second, keys[indices[k]]});
    }
    // (The map's keys point into the run's blocks, which stay put.)
    for (size_t k = 0; k < indices.size(); ++k) run_of_.emplace(run->blocks[k].key, std::make_pair(runs_.size(), k));
    runs_.push_back(std::move(run));
    groups_.push_back(std::move(indices));
  }

 private:
  const SstObjectSource* source_;
  const std::shared_ptr<WindowPool> pool_;
  std::vector<std::unique_ptr<Run>> runs_;
  std::vector<std::vector<size_t>> groups_;
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> run_of_;  // encoded key -> run, place in it
};

StatusOr<std::unique_ptr<ChunkRuns>> SstObjectSource::PlanRuns(const std::vector<DataKey>& keys, int threads,
                                                               const std::vector<bool>& lands) const {
  std::vector<std::string> encoded;
  encoded.reserve(keys.size());
  for (const DataKey& k : keys) encoded.push_back(EncodeDataKey(k));
  // The objects the keys fall in, opened (their tails fetched) in parallel.
  std::vector<Table*> to_open;
  for (const std::string& k : encoded) {
    for (const auto& table : tables_) {
      if (!table->MayHold(k)) continue;
      if (std::find(to_open.begin(), to_open.end(), table.get()) == to_open.end()) to_open.push_back(table.get());
      break;
    }
  }
  const int open_threads = std::max(1, threads);
  RETURN_IF_ERROR(RunOrdered(
      to_open.size(), open_threads, 2 * static_cast<size_t>(open_threads),
      [&to_open](size_t t, std::string*) {
        (void)EnsureOpen(*to_open[t]);  // a failed open is the run's Get's to report
        return Status::OK();
      },
      [](size_t, std::string&) { return Status::OK(); }));

  // Each key's block, where its object says (as Lookup finds the key: the
  // first object of its range that holds it).
  struct Want {
    const Table* table;
    uint64_t begin, end;
    size_t index;
    bool lands;
  };
  std::vector<Want> wants;
  // The runs as planned, before they are put in the read's order.
  struct Planned {
    const Table* table;  // null: read alone
    uint64_t begin, end;
    std::vector<size_t> indices;
    std::vector<std::pair<uint64_t, uint64_t>> blocks;  // each index's (none: {0, 0})
  };
  std::vector<Planned> planned;
  uint64_t total = 0;
  for (size_t i = 0; i < encoded.size(); ++i) {
    bool placed = false;
    for (const auto& table : tables_) {
      if (!table->MayHold(encoded[i])) continue;
      if (!EnsureOpen(*table).ok() || !table->blocks.has_value()) break;
      const int64_t b = table->blocks->Find(encoded[i]);
      if (b < 0) continue;
      const Want w{table.get(), table->blocks->Begin(b), table->blocks->End(b), i, i < lands.size() && lands[i]};
      // A block in the object's cached tail costs no GET: read alone.
      const std::optional<uint64_t> tail = fs_->TailStart(table->path);
      if (tail.has_value() && w.begin >= *tail) break;
      total += w.end - w.begin;
      wants.push_back(w);
      placed = true;
      break;
    }
    if (!placed) planned.push_back({nullptr, 0, 0, {i}, {{0, 0}}});
  }
  // Adjacent blocks of one object, up to the cap, make a run.
  const uint64_t cap = RunCap(total, open_threads), landed_cap = LandedRunCap(total, open_threads);
  std::sort(wants.begin(), wants.end(), [](const Want& a, const Want& b) {
    return std::tie(a.table, a.begin, a.index) < std::tie(b.table, b.begin, b.index);
  });
  for (size_t i = 0; i < wants.size();) {
    const Want& head = wants[i];
    uint64_t end = head.end;
    std::vector<size_t> indices{head.index};
    std::vector<std::pair<uint64_t, uint64_t>> blocks{{head.begin, head.end}};
    bool all_land = head.lands;
    size_t j = i + 1;
    for (; j < wants.size() && wants[j].table == head.table; ++j) {
      const Want& w = wants[j];
      const bool same_block = w.begin == wants[j - 1].begin;
      const uint64_t limit = all_land && w.lands ? landed_cap : cap;
      if (!same_block && (w.begin != end || w.end - head.begin > limit + kRunFraming)) break;
      all_land = all_land && w.lands;
      end = std::max(end, w.end);
      indices.push_back(w.index);
      blocks.emplace_back(w.begin, w.end);
    }
    planned.push_back({head.table, head.begin, end, std::move(indices), std::move(blocks)});
    i = j;
  }
  // Read in the order of each run's first key in the read.
  const auto first = [](const Planned& p) { return *std::min_element(p.indices.begin(), p.indices.end()); };
  std::sort(planned.begin(), planned.end(), [&](const Planned& a, const Planned& b) { return first(a) < first(b); });
  auto runs = std::make_unique<Runs>(this, open_threads);
  for (Planned& p : planned) runs->Add(p.table, p.begin, p.end, std::move(p.indices), p.blocks, encoded);
  return std::unique_ptr<ChunkRuns>(std::move(runs));
}

uint64_t SstObjectSource::RunCap(uint64_t bytes, int threads) {
  return std::clamp<uint64_t>(bytes / static_cast<uint64_t>(kRunsPerThread * std::max(1, threads)), kMinRunBytes,
                              kMaxRunBytes);
}

uint64_t SstObjectSource::LandedRunCap(uint64_t bytes, int threads) {
  return std::min(kMaxLandedRunBytes,
                  std::max(RunCap(bytes, threads),
                           bytes / static_cast<uint64_t>(kLandedRunsPerThread * std::max(1, threads))));
}

ChunkRunPlanner SstObjectSource::Planner() const {
  return [this](const std::vector<DataKey>& keys, int threads, const std::vector<bool>& lands) {
    return PlanRuns(keys, threads, lands);
  };
}

ChunkValueGetter SstObjectSource::Getter() const {
  return [this](const DataKey& key, rocksdb::PinnableSlice* value) { return Get(key, value); };
}

StatusOr<std::vector<std::string>> SstObjectSource::ReadChunks(const std::vector<DataKey>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const DataKey& key : keys) {
    rocksdb::PinnableSlice value;
    std::string path;
    Status s = Lookup(key, &value, &path);
    if (s.code() == StatusCode::kNotFound) {
      return Status::NotFound(DescribeChunk(key) + " is in none of the " + std::to_string(tables_.size()) +
                              " SST objects of bucket '" + bucket_ + "'");
    }
    RETURN_IF_ERROR(s);
    StatusOr<std::string> raw = DecodeChunkToString(std::string_view(value.data(), value.size()));
    if (!raw.ok())
      return Status::DataLoss(DescribeChunk(key) + " in the SST object " + path + ": " + raw.status().message());
    out.push_back(std::move(*raw));
  }
  return out;
}

}  // namespace bucket
}  // namespace ckptdb
