#include "store/chunk_reader.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <tuple>

#include "format/chunk_codec.h"
#include "format/keys.h"
#include "model/chunk_grid.h"
#include "util/ordered_parallel.h"
#include "store/rocksdb_status.h"
#include "util/status_macros.h"

namespace ckptdb {

namespace {

// Below this many raw bytes a read runs on one thread.
constexpr uint64_t kSmallReadBytes = 4u << 20;
// The most bytes and chunks a worker is handed at once (ReadChunksFrom).
constexpr uint64_t kBatchBytes = 256u << 10;
constexpr size_t kBatchChunks = 4096;

// One job per chunk, with every item that wants part of it: several target
// shards on one rank that overlap one chunk read (and verify) it once.
struct Job {
  const StoredPiece* piece;
  uint32_t chunk;
  std::vector<const ReadItem*> items;
  Box box;  // the chunk's box, for a piece cut into boxes
};

// The jobs of a read of a region of a piece cut into boxes.
Status PlanBoxJobs(const ReadItem& item, std::map<std::tuple<uint32_t, uint32_t, uint32_t>, size_t>* job_of,
                   std::vector<Job>* jobs) {
  const StoredPiece& p = item.piece;
  const Box piece{p.offsets, p.sizes};
  const Box region{item.region_offsets, item.region_sizes};
  Box inside;
  if (!item.box_sink || region.offsets.size() != p.sizes.size() || region.sizes.size() != p.sizes.size() ||
      p.chunk_shape.size() != p.sizes.size()) {
    return Status::Internal("read of '" + item.fqn + "': its piece is cut into boxes, so a read names a region " +
                            "of it and a box_sink");
  }
  if (BoxNumel(region) == 0) return Status::OK();
  if (!Intersect(region, piece, &inside) || BoxNumel(inside) != BoxNumel(region)) {
    return Status::Internal("read of region " + BoxToString(region) + " of '" + item.fqn + "' is outside its piece " +
                            BoxToString(piece));
  }
  const ChunkGrid grid(piece, p.chunk_shape);
  grid.ForEachChunkMeeting(region, [&](uint64_t c64) {
    const uint32_t c = static_cast<uint32_t>(c64);
    auto [it, fresh] = job_of->emplace(std::make_tuple(p.key.rank, p.key.item, c), jobs->size());
    if (fresh) jobs->push_back(Job{&p, c, {}, grid.ChunkBox(c)});
    (*jobs)[it->second].items.push_back(&item);
  });
  return Status::OK();
}

Status PlanJobs(const std::vector<ReadItem>& items, std::vector<Job>* jobs) {
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, size_t> job_of;  // (rank, item, chunk) -> job
  for (const ReadItem& item : items) {
    const StoredPiece& p = item.piece;
    if (!p.chunk_shape.empty()) {
      RETURN_IF_ERROR(PlanBoxJobs(item, &job_of, jobs));
      continue;
    }
    if (item.box_sink) {
      return Status::Internal("read of '" + item.fqn + "' names a region, but its piece is not cut into boxes");
    }
    if (item.length == 0) continue;
    if (item.offset + item.length > p.nbytes || p.chunk_bytes == 0) {
      return Status::Internal("read of bytes [" + std::to_string(item.offset) + ", " +
                              std::to_string(item.offset + item.length) + ") of '" + item.fqn + "' is outside its " +
                              std::to_string(p.nbytes) + " bytes");
    }
    const uint32_t first = static_cast<uint32_t>(item.offset / p.chunk_bytes);
    const uint32_t last = static_cast<uint32_t>((item.offset + item.length - 1) / p.chunk_bytes);
    for (uint32_t c = first; c <= last; ++c) {
      auto [it, fresh] = job_of.emplace(std::make_tuple(p.key.rank, p.key.item, c), jobs->size());
      if (fresh) jobs->push_back(Job{&p, c, {}, {}});
      (*jobs)[it->second].items.push_back(&item);
    }
  }
  return Status::OK();
}

// Whether a chunk's bytes [cbegin, cbegin + clen) of its piece all lie in
// the item's range.
bool LiesWhollyIn(const ReadItem& item, uint64_t cbegin, uint64_t clen) {
  return item.offset <= cbegin && cbegin + clen <= item.offset + item.length;
}

// Where a job's chunk may land whole, unconverted (ChunkRuns::Land): one
// item that copies it as it is, into one contiguous place.
ChunkLanding LandingOf(const Job& job) {
  ChunkLanding spot;
  if (job.items.size() != 1) return spot;
  const ReadItem& item = *job.items.front();
  const StoredPiece& p = *job.piece;
  spot.raw_bytes = p.chunk_raw_bytes(job.chunk);
  if (!p.chunk_shape.empty()) {
    if (item.box_place) spot.place = item.box_place(job.box.offsets, job.box.sizes);
    return spot;
  }
  const uint64_t cbegin = uint64_t{job.chunk} * p.chunk_bytes;
  if (!LiesWhollyIn(item, cbegin, spot.raw_bytes)) return spot;
  char* dest = nullptr;
  if (!item.sink) {
    if (item.dest != nullptr) dest = static_cast<char*>(item.dest) + (cbegin - item.offset);
  } else if (item.range_place) {
    dest = item.range_place(cbegin, spot.raw_bytes);
  }
  if (dest != nullptr) spot.place = BoxPlace{dest, spot.raw_bytes, spot.raw_bytes};
  return spot;
}

DataKey KeyOf(const StepMetadata& md, const StoredPiece& p, uint32_t c) {
  const ChunkLocation at = p.LocateChunk(md.step, md.save_id, c);
  return DataKey{at.step, at.save_id, at.key.rank, at.key.item, at.chunk};
}

}  // namespace

StatusOr<std::vector<DataKey>> ChunksToRead(const StepMetadata& md, const std::vector<ReadItem>& items) {
  std::vector<Job> jobs;
  RETURN_IF_ERROR(PlanJobs(items, &jobs));
  std::vector<DataKey> keys;
  keys.reserve(jobs.size());
  for (const Job& j : jobs) keys.push_back(KeyOf(md, *j.piece, j.chunk));
  return keys;
}

Status GetChunkValue(rocksdb::DB* db, const DataKey& key, rocksdb::PinnableSlice* value) {
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;  // chunks are read once; keep the cache for index blocks
  // RocksDB's block checksums too, although every chunk carries its own:
  // a damaged block must not reach RocksDB's parser (Debian's build asserts
  // on a damaged key and aborts the process); it becomes DataLoss instead.
  ro.verify_checksums = true;
  rocksdb::Status s = db->Get(ro, db->DefaultColumnFamily(), EncodeDataKey(key), value);
  if (s.IsNotFound()) return Status::NotFound("missing");
  return FromRocks(s, "reading the chunk");
}

StatusOr<ReadStats> ReadChunks(rocksdb::DB* db, const StepMetadata& md, const std::vector<ReadItem>& items,
                               int threads) {
  return ReadChunksFrom([db](const DataKey& key, rocksdb::PinnableSlice* value) { return GetChunkValue(db, key, value); },
                        md, items, threads);
}

StatusOr<ReadStats> ReadChunksFrom(const ChunkValueGetter& get_chunk, const StepMetadata& md,
                                   const std::vector<ReadItem>& items, int threads, const ChunkRunPlanner& plan) {
  std::vector<Job> jobs;
  RETURN_IF_ERROR(PlanJobs(items, &jobs));
  // A read of less than kSmallReadBytes runs on the calling thread:
  // handing each small chunk to a worker (a wake-up and a handoff each)
  // costs more than reading it. (Loads of small entries: optimizer scalars,
  // biases, a rank's row of each of many tensors.)
  uint64_t raw_bytes = 0;
  for (const Job& j : jobs) raw_bytes += std::min(j.piece->chunk_bytes, j.piece->nbytes);
  if (raw_bytes < kSmallReadBytes) threads = 1;
  std::unique_ptr<ChunkRuns> runs;
  if (plan && !jobs.empty()) {
    std::vector<DataKey> keys;
    keys.reserve(jobs.size());
    std::vector<bool> lands(jobs.size());
    const uint32_t raw_encoding = PieceEncoding(Compression::kNone, 0);
    for (size_t j = 0; j < jobs.size(); ++j) {
      keys.push_back(KeyOf(md, *jobs[j].piece, jobs[j].chunk));
      lands[j] = jobs[j].piece->encoding == raw_encoding && LandingOf(jobs[j]).place.dest != nullptr;
    }
    ASSIGN_OR_RETURN(runs, plan(keys, threads, lands));
    std::vector<bool> seen(jobs.size());
    size_t planned = 0;
    for (const std::vector<size_t>& run : runs->runs()) {
      for (size_t j : run) {
        if (j >= jobs.size() || seen[j]) return Status::Internal("a read's runs name a chunk twice or one it lacks");
        seen[j] = true;
        ++planned;
      }
    }
    if (planned != jobs.size()) return Status::Internal("a read's runs leave chunks out");
  }
  const ChunkValueGetter get_value =
      runs ? ChunkValueGetter([&runs](const DataKey& key, rocksdb::PinnableSlice* value) {
        return runs->Get(key, value);
      })
           : get_chunk;

  std::atomic<uint64_t> stored{0}, raw{0}, landed_chunks{0};
  auto where = [&](const ReadItem& item, uint32_t c) {
    const StoredPiece& p = item.piece;
    const ChunkLocation at = p.LocateChunk(md.step, md.save_id, c);
    std::string out = "entry '" + item.fqn + "' (step " + std::to_string(md.step) + ", rank " +
                      std::to_string(p.key.rank) + " item " + std::to_string(p.key.item) + ") chunk " +
                      std::to_string(c) + " of " + std::to_string(p.num_chunks);
    if (at.step != md.step || at.save_id != md.save_id) {
      out += " (shared: stored with step " + std::to_string(at.step) + ", rank " + std::to_string(at.key.rank) +
             " item " + std::to_string(at.key.item) + " chunk " + std::to_string(at.chunk) + ")";
    }
    return out;
  };
  // Fetches chunk c of the item's piece into `value`, from wherever it is
  // stored (its own key, or the chunk it shares).
  auto get = [&](const ReadItem& item, uint32_t c, rocksdb::PinnableSlice* value) -> Status {
    Status s = get_value(KeyOf(md, item.piece, c), value);
    if (s.code() == StatusCode::kNotFound) return Status::DataLoss(where(item, c) + " is missing from the store");
    return s.WithContext(where(item, c));
  };
  // Hands one item its part of a verified chunk.
  auto deliver = [&](const ReadItem& item, uint32_t c, std::string_view chunk, uint64_t cbegin) -> Status {
    const StoredPiece& p = item.piece;
    const uint64_t cend = cbegin + chunk.size();
    uint64_t want_begin = std::max<uint64_t>(cbegin, item.offset);
    uint64_t want_end = std::min<uint64_t>(cend, item.offset + item.length);
    if (!item.sink) {
      std::memcpy(static_cast<char*>(item.dest) + (want_begin - item.offset), chunk.data() + (want_begin - cbegin),
                  want_end - want_begin);
      return Status::OK();
    }
    const char* data = chunk.data() + (want_begin - cbegin);
    std::string joined;  // an element cut by the chunk's end, made whole
    const uint64_t es = std::max<uint32_t>(item.element_bytes, 1);
    if (p.chunk_bytes % es != 0) {
      // Chunks split elements: this chunk hands over the elements that start
      // in it; the tail of the last one comes from the next chunk.
      const uint64_t range_end = item.offset + item.length;
      want_begin = std::min(range_end, (want_begin + es - 1) / es * es);
      want_end = std::min(range_end, (want_end + es - 1) / es * es);
      if (want_begin >= want_end) return Status::OK();
      data = chunk.data() + (want_begin - cbegin);
      if (want_end > cend) {
        rocksdb::PinnableSlice next_value;
        RETURN_IF_ERROR(get(item, c + 1, &next_value));
        const uint64_t nlen = std::min<uint64_t>(p.chunk_bytes, p.nbytes - cend);
        std::string next_scratch;
        std::string_view next;
        Status ns = DecodeChunkView(next_value.ToStringView(), nlen, &next_scratch, &next);
        if (!ns.ok()) return Status::DataLoss(where(item, c + 1) + ": " + ns.message());
        joined.assign(data, cend - want_begin);
        joined.append(next.data(), want_end - cend);
        data = joined.data();
      }
    }
    // Not DataLoss: the chunk was verified; the sink's own error stands.
    Status sunk = item.sink(want_begin, data, want_end - want_begin);
    if (!sunk.ok()) return sunk.WithContext(where(item, c));
    return Status::OK();
  };
  auto fetch = [&](size_t j, std::string* scratch) -> Status {
    const Job& job = jobs[j];
    const ReadItem& first = *job.items.front();
    const StoredPiece& p = *job.piece;
    const uint32_t c = job.chunk;
    rocksdb::PinnableSlice value;
    RETURN_IF_ERROR(get(first, c, &value));
    const uint64_t cbegin = uint64_t{c} * p.chunk_bytes;
    const uint64_t clen = p.chunk_raw_bytes(c);
    stored += value.size();
    raw += clen;
    if (!p.chunk_shape.empty()) {
      // A box: handed to each item window by window, as it is verified.
      Status sunk;
      Status st = VisitChunk(value.ToStringView(), clen, scratch,
                             [&](uint64_t begin, const char* data, uint64_t n) -> Status {
                               for (const ReadItem* item : job.items) {
                                 sunk = item->box_sink(job.box.offsets, job.box.sizes, begin, data, n);
                                 if (!sunk.ok()) return sunk.WithContext(where(*item, c));
                               }
                               return Status::OK();
                             });
      if (!sunk.ok()) return sunk;  // not DataLoss: the sink's own error stands
      if (!st.ok()) return Status::DataLoss(where(first, c) + ": " + st.message());
      return Status::OK();
    }
    if (job.items.size() == 1 && !first.sink && LiesWhollyIn(first, cbegin, clen)) {
      // The whole chunk lands in the destination: decode straight into it.
      Status st = DecodeChunk(value.ToStringView(), clen, static_cast<char*>(first.dest) + (cbegin - first.offset));
      if (!st.ok()) return Status::DataLoss(where(first, c) + ": " + st.message());
      return Status::OK();
    }
    // Part of a chunk, scattered, or for several items: verify the chunk
    // whole (the checksum covers it all) where it lies, then hand each item
    // its part.
    std::string_view chunk;
    Status st = DecodeChunkView(value.ToStringView(), clen, scratch, &chunk);
    if (!st.ok()) return Status::DataLoss(where(first, c) + ": " + st.message());
    for (const ReadItem* item : job.items) RETURN_IF_ERROR(deliver(*item, c, chunk, cbegin));
    return Status::OK();
  };
  // The chunks land in disjoint places, so "consume" has nothing to do; the
  // ordered runner just gives bounded parallelism and first-error semantics.
  const auto none = [](size_t, std::string&) { return Status::OK(); };
  if (runs) {
    const std::vector<std::vector<size_t>>& groups = runs->runs();
    const auto read_run = [&](size_t r, std::string* scratch) -> Status {
      const std::vector<size_t>& group = groups[r];
      std::vector<ChunkLanding> spots(group.size());
      bool any = false;
      for (size_t i = 0; i < group.size(); ++i) {
        // Asked again (not kept from planning): a place may be withdrawn
      // since (Python's reader gives none once interrupted).
      spots[i] = LandingOf(jobs[group[i]]);
        any = any || spots[i].place.dest != nullptr;
      }
      const std::vector<bool> landed = any ? runs->Land(r, spots) : std::vector<bool>(group.size(), false);
      for (size_t i = 0; i < group.size(); ++i) {
        if (landed[i]) {
          stored += kChunkHeaderSize + spots[i].raw_bytes;
          raw += spots[i].raw_bytes;
          ++landed_chunks;
          continue;
        }
        RETURN_IF_ERROR(fetch(group[i], scratch));
      }
      runs->Done(r);
      return Status::OK();
    };
    RETURN_IF_ERROR(RunOrdered(groups.size(), threads, static_cast<size_t>(std::max(1, threads)) * 2, read_run, none));
  } else {
    // Small chunks go to the workers in batches of consecutive chunks of up
    // to kBatchBytes: a hand-off per chunk of a few bytes (a job of
    // thousands of ranks' rows, loaded in one process) cost two wake-ups,
    // far more than the chunk. A chunk of kBatchBytes or more is a batch of
    // its own.
    std::vector<size_t> batch_starts;  // the first job of each batch
    uint64_t batch_bytes = 0;
    for (size_t j = 0; j < jobs.size(); ++j) {
      const uint64_t bytes = jobs[j].piece->chunk_raw_bytes(jobs[j].chunk);
      if (batch_starts.empty() || batch_bytes + bytes > kBatchBytes || j - batch_starts.back() >= kBatchChunks) {
        batch_starts.push_back(j);
        batch_bytes = 0;
      }
      batch_bytes += bytes;
    }
    const auto fetch_batch = [&](size_t b, std::string* scratch) -> Status {
      const size_t end = b + 1 < batch_starts.size() ? batch_starts[b + 1] : jobs.size();
      for (size_t j = batch_starts[b]; j < end; ++j) RETURN_IF_ERROR(fetch(j, scratch));
      return Status::OK();
    };
    RETURN_IF_ERROR(RunOrdered(batch_starts.size(), threads, static_cast<size_t>(std::max(1, threads)) * 4,
                               fetch_batch, none));
  }
  ReadStats stats;
  stats.chunks_read = jobs.size();
  stats.chunks_landed = landed_chunks.load();
  stats.stored_bytes_read = stored.load();
  stats.raw_bytes_read = raw.load();
  return stats;
}

}  // namespace ckptdb
