// Loads from a store on the coordinator's host only (OpenRemoteStoreReader in
// include/ckptdb/rocksdb_store.h): the coordinator reads for itself and
// serves every other rank the chunk values it asks for, over the
// communicator's point-to-point messages (comm/transfer.h frames).
//
//   ReadMetadata: the coordinator reads the step's metadata and broadcasts it
//                 (or its error) with the step it read.
//   ReadMetadataFor (what Load calls): each rank sends the coordinator the
//                 step, the entries and the regions it loads (Gather); the
//                 coordinator reads those entries' metadata once and answers
//                 each rank (Scatter) with the step's entries without their
//                 pieces and, of each entry it loads, only the pieces that
//                 meet its regions: what a rank receives does not grow with
//                 the world size.
//   Read:         each other rank sends the keys of the chunks it needs
//                 (request frames, then a done frame; an error frame when it
//                 could not plan); the coordinator answers the keys in
//                 order, in batches: a batch frame (each value's kind,
//                 value or missing, and length), then each value as a
//                 message of its own, all in flight at once; or an error
//                 frame, after which it sends no more. Each rank verifies
//                 and decodes the values as its own reads would.
//
// The same reader serves a store every rank sees (OpenSharedStoreReader,
// ChunkPath::kPlaces): ReadMetadata and ReadMetadataFor also name each rank
// the places its chunks lie in (store/chunk_places.h: a directory's table
// files, a bucket step's objects), and Read on a rank other than the
// coordinator reads them from those places, with no message to the
// coordinator and no store opened.
//
// A rank receives on a thread of its own (ValueStream) while its reader
// threads verify, decode and place the values that arrived before; the
// coordinator serves each rank on a thread of its own (ServeValues).
#include <rocksdb/slice.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <optional>
#include <tuple>
#include <unordered_set>
#include <unordered_map>
#include <vector>

#include "ckptdb/checkpoint.h"
#include "ckptdb/rocksdb_store.h"
#include "comm/transfer.h"
#include "format/chunk_codec.h"
#include "format/keys.h"
#include "format/metadata_codec.h"
#include "format/status_codec.h"
#include "model/box_index.h"
#include "model/region.h"
#include "store/chunk_reader.h"
#include "store/chunk_places.h"
#include "store/rocksdb_store_internal.h"
#include "util/le_bytes.h"
#include "util/ordered_parallel.h"
#include "util/thread_fanout.h"
#include "util/status_macros.h"

namespace ckptdb {

namespace {

// The largest value frame a loading rank accepts: one chunk of the largest
// size, stored uncompressible, with its header.
constexpr uint64_t kMaxValueFrame = kMaxChunkRawBytes + (kMaxChunkRawBytes >> 7) + (1u << 20);
// Chunk keys per request frame.
constexpr size_t kKeysPerFrame = 65536;
// Values a loading rank holds received but not yet taken by a reader
// thread: it receives no further batch while they would add up to more
// than this many bytes (one batch at least, whatever its size). With the values the reader
// threads are decoding and as many kept for reuse, this bounds a rank's
// memory for a remote read.
constexpr uint64_t kReceiveWindowBytes = 64u << 20;
// The coordinator sends values in batches: a table of their kinds and
// lengths, then the values, all in flight at once (Communicator::SendParts),
// so that a value does not wait out a round trip (and, on a busy host, the
// wake-ups of the threads on both ends) behind the one before it. A batch
// holds values until they reach kBatchBytes, and at most kBatchValues.
constexpr uint64_t kBatchBytes = 16u << 20;
constexpr size_t kBatchValues = 256;

// The coordinator's answers to one rank's requests, received in order on a
// thread of its own; reader threads take them by key, in any order, as they
// arrive. Thread safety: Take from any thread; Finish once, from the owner.
class ValueStream {
 public:
  ValueStream(Communicator& comm, int from, const std::vector<DataKey>& keys)
      : comm_(comm), from_(from), total_(keys.size()) {
    for (size_t i = 0; i < keys.size(); ++i) index_.emplace(EncodeDataKey(keys[i]), i);
    thread_ = std::thread([this] { Run(); });
  }
  ~ValueStream() { Finish(); }

  // Waits for the answer to `key`: its value, pinned in *value; NotFound
  // when the store lacks it; the coordinator's error after it stopped, or
  // the stream's failure.
  Status Take(const DataKey& key, rocksdb::PinnableSlice* value) {
    std::unique_lock<std::mutex> lock(mu_);
    auto at = index_.find(EncodeDataKey(key));
    if (at == index_.end()) return Status::Internal("a remote read fetched a chunk it did not ask for");
    const size_t i = at->second;
    index_.erase(at);
    cv_.wait(lock, [&] { return waiting_.count(i) > 0 || (ended_ && i >= received_); });
    auto got = waiting_.find(i);
    if (got == waiting_.end()) return end_;
    Frame frame = std::move(got->second);
    waiting_.erase(got);
    waiting_bytes_ -= frame.payload->size();
    lock.unlock();
    cv_.notify_all();
    if (frame.kind == FrameKind::kMissing) {
      Recycle(std::move(frame.payload));
      return Status::NotFound("missing");
    }
    // The buffer comes back to the stream when the reader is done with it.
    std::string* buffer = frame.payload.release();
    value->PinSlice(rocksdb::Slice(*buffer), &ValueStream::Release, this, buffer);
    return Status::OK();
  }

  // Receives and drops what the coordinator still sends, so that it is not
  // left waiting on this rank, and ends the receiving thread.
  void Finish() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      draining_ = true;
      waiting_.clear();
      waiting_bytes_ = 0;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Frame {
    FrameKind kind;
    std::unique_ptr<std::string> payload;
  };

  // Receive buffers are reused, not freed and allocated anew: a fresh one
  // costs a page fault (and zeroing) per page, which was as much time as
  // the transfer itself.
  static void Release(void* stream, void* buffer) {
    static_cast<ValueStream*>(stream)->Recycle(std::unique_ptr<std::string>(static_cast<std::string*>(buffer)));
  }
  void Recycle(std::unique_ptr<std::string> buffer) {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_bytes_ + buffer->capacity() > kReceiveWindowBytes) return;
    free_bytes_ += buffer->capacity();
    free_.push_back(std::move(buffer));
  }
  std::unique_ptr<std::string> Buffer() {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) return std::make_unique<std::string>();
    std::unique_ptr<std::string> b = std::move(free_.back());
    free_.pop_back();
    free_bytes_ -= b->capacity();
    return b;
  }

  // Receives the answers batch by batch: a batch's table, then its values,
  // every receive posted at once.
  void Run() {
    std::string table;
    std::vector<Entry> entries;
    std::vector<Frame> batch;
    std::vector<Communicator::MutablePart> parts;
    Status end;
    for (size_t i = 0; i < total_ && end.ok();) {
      FrameKind kind;
      end = RecvFrame(comm_, from_, &kind, &table);
      if (!end.ok()) {
        end = end.WithContext("receiving chunks from the coordinator");
        break;
      }
      if (kind == FrameKind::kError) {
        end = DecodeErrorFrame(table);  // the coordinator sends no more
        break;
      }
      uint64_t bytes = 0;
      end = ParseBatch(kind, table, total_ - i, &entries, &bytes);
      if (!end.ok()) break;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return draining_ || waiting_.empty() || waiting_bytes_ + bytes <= kReceiveWindowBytes; });
      }
      batch.clear();
      parts.clear();
      for (const Entry& e : entries) {
        batch.push_back(Frame{e.kind, Buffer()});
        batch.back().payload->resize(e.n);
        parts.push_back({batch.back().payload->data(), e.n});
      }
      end = comm_.RecvParts(from_, parts);
      if (!end.ok()) {
        end = end.WithContext("receiving chunks from the coordinator");
        break;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!draining_) {
          for (Frame& f : batch) {
            waiting_bytes_ += f.payload->size();
            waiting_.emplace(i++, std::move(f));
          }
        } else {
          i += batch.size();
        }
        received_ = i;
      }
      cv_.notify_all();
      for (Frame& f : batch) {
        if (f.payload) Recycle(std::move(f.payload));
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ended_ = true;
      end_ = end.ok() ? Status::Internal("the coordinator answered fewer chunks than asked for") : end;
    }
    cv_.notify_all();
  }

  // A batch's table: per value its kind and length. Never more values than
  // are still owed, none larger than a chunk can be, and values only until
  // they reach kBatchBytes, so that what a rank receives at once stays
  // bounded.
  struct Entry {
    FrameKind kind;
    uint64_t n;
  };
  static Status ParseBatch(FrameKind kind, std::string_view table, size_t owed, std::vector<Entry>* batch,
                           uint64_t* bytes) {
    if (kind != FrameKind::kBatch) {
      return Status::DataLoss("the coordinator sent a frame of kind " + std::to_string(static_cast<uint32_t>(kind)) +
                              " for chunks");
    }
    batch->clear();
    *bytes = 0;
    if (table.empty() || table.size() % 9 != 0 || table.size() / 9 > owed) {
      return Status::DataLoss("the coordinator sent a malformed batch of chunks (" + std::to_string(table.size()) +
                              " bytes of table, " + std::to_string(owed) + " chunks owed)");
    }
    for (size_t at = 0; at < table.size(); at += 9) {
      const auto k = static_cast<FrameKind>(static_cast<uint8_t>(table[at]));
      const uint64_t n = GetLE64(table.data() + at + 1);
      if ((k != FrameKind::kValue && k != FrameKind::kMissing) || (k == FrameKind::kMissing && n != 0) ||
          n > kMaxValueFrame || *bytes >= kBatchBytes) {
        return Status::DataLoss("the coordinator sent a malformed batch of chunks (value " + std::to_string(at / 9) +
                                ": kind " + std::to_string(static_cast<uint32_t>(k)) + ", " + std::to_string(n) +
                                " bytes)");
      }
      *bytes += n;
      batch->push_back(Entry{k, n});
    }
    return Status::OK();
  }

  Communicator& comm_;
  const int from_;
  const size_t total_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Under mu_:
  std::unordered_multimap<std::string, size_t> index_;  // encoded key -> its answer's place, until taken
  std::map<size_t, Frame> waiting_;                     // answers received and not taken, by place
  uint64_t waiting_bytes_ = 0;
  size_t received_ = 0;  // answers received
  bool ended_ = false;   // no answer comes any more: end_ says why
  Status end_;
  bool draining_ = false;                           // nobody takes answers any more
  std::vector<std::unique_ptr<std::string>> free_;  // buffers to receive into, at most
  uint64_t free_bytes_ = 0;                         // kReceiveWindowBytes of them
  std::thread thread_;
};

// The stored chunks a step's metadata names: its pieces' own chunks and
// those they share with earlier steps. The coordinator serves a rank only
// these, so that a rank out of step with it (or a bug in its planning) can
// never be handed another step's bytes.
class StepChunks {
 public:
  explicit StepChunks(const StepMetadata& md) {
    for (const EntryMetadata& e : md.entries) {
      for (const StoredPiece& p : e.pieces) {
        ranges_[{md.step, md.save_id, p.key.rank, p.key.item}].push_back({0, p.num_chunks});
        for (const ChunkReference& r : p.references) {
          ranges_[{r.step, r.save_id, r.key.rank, r.key.item}].push_back({r.chunk, uint64_t{r.chunk} + r.count});
        }
      }
    }
    // Sorted and merged, so that a lookup is one binary search.
    for (auto& [piece, rs] : ranges_) {
      std::sort(rs.begin(), rs.end());
      std::vector<std::pair<uint64_t, uint64_t>> merged;
      for (const auto& r : rs) {
        if (!merged.empty() && r.first <= merged.back().second) {
          merged.back().second = std::max(merged.back().second, r.second);
        } else {
          merged.push_back(r);
        }
      }
      rs = std::move(merged);
    }
  }

  bool Contains(const DataKey& k) const {
    auto it = ranges_.find({k.step, k.save_id, k.rank, k.item});
    if (it == ranges_.end()) return false;
    const auto& rs = it->second;
    auto after = std::upper_bound(rs.begin(), rs.end(), std::make_pair(uint64_t{k.chunk}, UINT64_MAX));
    return after != rs.begin() && k.chunk < std::prev(after)->second;
  }

 private:
  // (step, save id, rank, item) -> [first, end) of its chunks.
  std::map<std::tuple<int64_t, uint64_t, uint32_t, uint32_t>, std::vector<std::pair<uint64_t, uint64_t>>> ranges_;
};

// The pieces (indices, increasing) of an entry that meet one of `regions`
// in at least one element.
std::vector<size_t> PiecesMeeting(const PieceBoxes& pieces, const std::vector<const EntryRegion*>& regions) {
  std::vector<size_t> out;
  for (const EntryRegion* r : regions) {
    if (r->offsets.size() != r->sizes.size()) continue;
    pieces.index->ForEachOverlap(Box{r->offsets, r->sizes}, [&](size_t i) { out.push_back(i); });
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// How the other ranks get their chunks: from the coordinator (kServe: the
// store is on its host only), or from the store's files or objects, which
// every rank reaches (kPlaces: the coordinator names each rank the places its
// chunks lie in).
enum class ChunkPath { kServe, kPlaces };

class RemoteStoreReader final : public StorageReader {
 public:
  RemoteStoreReader(std::string path, Communicator* comm, int coordinator, ReaderOptions options, ChunkPath chunks)
      : path_(std::move(path)), comm_(comm), coordinator_(coordinator), options_(options), chunks_(chunks) {}

  StatusOr<StepMetadata> ReadMetadata(int64_t step) override {
    std::string message;
    if (IsCoordinator()) {
      served_.reset();  // (Serve then takes the whole metadata it is given.)
      Status opened = Local();
      StatusOr<StepMetadata> md = opened.ok() ? local_->ReadMetadata(step) : StatusOr<StepMetadata>(opened);
      std::string listed;
      if (md.ok() && chunks_ == ChunkPath::kPlaces) {
        // The places of the whole step, ahead of its metadata.
        StatusOr<std::unique_ptr<ChunkPlaceIndex>> index = places_source_->PlacesOf(md->step, md->save_id);
        if (!index.ok()) md = index.status();
        if (index.ok()) {
          std::vector<size_t> places;
          for (const EntryMetadata& e : md->entries) {
            for (const StoredPiece& p : e.pieces) (*index)->AddPlacesOf(md->step, md->save_id, p, &places);
          }
          (*index)->AppendPlaces(std::move(places), &listed);
        }
      }
      const std::string status = EncodeStatus(md.status());
      AppendLE64(&message, static_cast<uint64_t>(step));
      AppendLE64(&message, status.size());
      message += status;
      if (md.ok() && chunks_ == ChunkPath::kPlaces) {
        AppendLE64(&message, listed.size());
        message += listed;
      }
      if (md.ok()) message += EncodeMetadataValue(*md);
      RETURN_IF_ERROR(comm_->Broadcast(&message, coordinator_).WithContext("load: sending the step's metadata"));
      return md;
    }
    RETURN_IF_ERROR(
        comm_->Broadcast(&message, coordinator_).WithContext("load: receiving the step's metadata from the coordinator"));
    std::string_view in = message;
    uint64_t their_step = 0, status_len = 0;
    if (!ConsumeLE64(&in, &their_step) || !ConsumeLE64(&in, &status_len) || in.size() < status_len) {
      return Status::Internal("the coordinator's metadata message is malformed");
    }
    if (static_cast<int64_t>(their_step) != step) {
      return Status::InvalidArgument("rank " + std::to_string(comm_->rank()) + " loads step " +
                                     std::to_string(step) + ", the coordinator (rank " +
                                     std::to_string(coordinator_) + ") step " +
                                     std::to_string(static_cast<int64_t>(their_step)));
    }
    Status st = DecodeStatus(in.substr(0, status_len));
    if (!st.ok()) return st.WithContext("on the coordinator's host");
    in.remove_prefix(status_len);
    std::string places;
    if (chunks_ == ChunkPath::kPlaces) {
      uint64_t listed_len = 0;
      if (!ConsumeLE64(&in, &listed_len) || in.size() < listed_len) {
        return Status::Internal("the coordinator's metadata message is malformed");
      }
      places = in.substr(0, listed_len);
      in.remove_prefix(listed_len);
    }
    ASSIGN_OR_RETURN(StepMetadata md, DecodeMetadataValue(in));
    KeepPlaces(md, std::move(places));
    return md;
  }

  StatusOr<StepMetadata> ReadMetadataFor(int64_t step, const std::vector<std::string>& fqns,
                                         const std::vector<EntryRegion>& regions) override {
    const std::string request = EncodeRequest(step, fqns, regions);
    std::string answer;
    if (IsCoordinator()) {
      std::vector<std::string> requests;
      std::map<int, Status> missing;
      RETURN_IF_ERROR(comm_->Gather(request, coordinator_, &requests, &missing)
                          .WithContext("load: receiving what each rank loads"));
      const std::vector<std::string> parts = Answer(step, requests, missing);
      RETURN_IF_ERROR(comm_->Scatter(parts, coordinator_, &answer).WithContext("load: sending each rank its metadata"));
    } else {
      std::vector<std::string> none;
      std::map<int, Status> lost;
      RETURN_IF_ERROR(comm_->Gather(request, coordinator_, &none, &lost)
                          .WithContext("load: sending the coordinator what this rank loads"));
      RETURN_IF_ERROR(comm_->Scatter({}, coordinator_, &answer)
                          .WithContext("load: receiving the step's metadata from the coordinator"));
    }
    std::string places;
    ASSIGN_OR_RETURN(StepMetadata md, DecodeAnswer(answer, chunks_ == ChunkPath::kPlaces ? &places : nullptr));
    if (!IsCoordinator()) KeepPlaces(md, std::move(places));
    return md;
  }

  StatusOr<ReadStats> Read(const StepMetadata& md, const std::vector<ReadItem>& items) override {
    if (chunks_ == ChunkPath::kPlaces) {
      if (!IsCoordinator()) return ReadPlaces(md, items);
      RETURN_IF_ERROR(Local());
      return local_->Read(md, items);
    }
    if (IsCoordinator()) return Serve(md, items);
    return Fetch(md, items);
  }

 private:
  bool IsCoordinator() const { return comm_->rank() == coordinator_; }

  // A rank other than the coordinator (kPlaces): the places the coordinator
  // named for the metadata it sent last.
  void KeepPlaces(const StepMetadata& md, std::string places) {
    places_of_ = {md.step, md.save_id};
    places_ = std::move(places);
  }

  // A rank other than the coordinator (kPlaces): reads its chunks from the
  // places the coordinator named, opening no store.
  StatusOr<ReadStats> ReadPlaces(const StepMetadata& md, const std::vector<ReadItem>& items) {
    if (!places_of_ || *places_of_ != std::make_pair(md.step, md.save_id)) {
      return Status::FailedPrecondition("rank " + std::to_string(comm_->rank()) + " reads step " +
                                        std::to_string(md.step) +
                                        " without having read its metadata through this reader (ReadMetadataFor)");
    }
    if (!placed_) {
      ASSIGN_OR_RETURN(placed_, OpenPlacedChunkReader(path_, options_));
    }
    return placed_->Read(places_, md, items);
  }

  // The coordinator's own reader, opened on first use.
  Status Local() {
    if (local_) return Status::OK();
    StatusOr<std::unique_ptr<StoreReader>> r = OpenStoreReader(path_, options_);
    if (!r.ok()) return r.status();
    source_ = dynamic_cast<ChunkValueSource*>(r->get());
    places_source_ = dynamic_cast<ChunkPlaceSource*>(r->get());
    if (chunks_ == ChunkPath::kServe ? source_ == nullptr : places_source_ == nullptr) {
      return Status::Internal("the store reader of " + path_ + " cannot name or serve chunks");
    }
    local_ = std::move(r).value();
    return Status::OK();
  }

  // What a rank loads: u64 step | u32 n | n strings (FQNs) | u32 m | m times:
  // string FQN, u32 d, d u64 offsets, d u64 sizes.
  static std::string EncodeRequest(int64_t step, const std::vector<std::string>& fqns,
                                   const std::vector<EntryRegion>& regions) {
    std::string out;
    AppendLE64(&out, static_cast<uint64_t>(step));
    AppendLE32(&out, static_cast<uint32_t>(fqns.size()));
    for (const std::string& f : fqns) AppendLEString(&out, f);
    AppendLE32(&out, static_cast<uint32_t>(regions.size()));
    for (const EntryRegion& r : regions) {
      AppendLEString(&out, r.fqn);
      AppendLE32(&out, static_cast<uint32_t>(r.offsets.size()));
      for (int64_t o : r.offsets) AppendLE64(&out, static_cast<uint64_t>(o));
      for (size_t d = 0; d < r.offsets.size(); ++d) AppendLE64(&out, static_cast<uint64_t>(r.sizes.at(d)));
    }
    return out;
  }

  struct Request {
    int64_t step = 0;
    std::vector<std::string> fqns;
    std::vector<EntryRegion> regions;
  };

  static StatusOr<Request> DecodeRequest(std::string_view bytes) {
    LECursor c(bytes);
    Request r;
    uint64_t step = 0;
    uint32_t n = 0, m = 0;
    bool ok = c.U64(&step) && c.U32(&n);
    for (uint32_t i = 0; ok && i < n; ++i) {
      std::string f;
      ok = c.String(&f);
      r.fqns.push_back(std::move(f));
    }
    ok = ok && c.U32(&m);
    for (uint32_t i = 0; ok && i < m; ++i) {
      EntryRegion region;
      uint32_t d = 0;
      ok = c.String(&region.fqn) && c.U32(&d) && d <= 64;
      for (uint32_t k = 0; ok && k < 2 * d; ++k) {
        uint64_t v = 0;
        ok = c.U64(&v);
        (k < d ? region.offsets : region.sizes).push_back(static_cast<int64_t>(v));
      }
      r.regions.push_back(std::move(region));
    }
    if (!ok || !c.empty()) return Status::Internal("a rank's load request is malformed");
    r.step = static_cast<int64_t>(step);
    return r;
  }

  // The coordinator's answers, one per rank: string status | (when OK)
  // string: the step's metadata record without pieces | u32 n | n times:
  // u32 entry index, u8 partial, string pieces record (all the entry's
  // pieces, or, partial, those that meet the rank's regions). The step's
  // entries are read once, for every rank (the union of what they load),
  // and kept for serving their chunks (Serve).
  std::vector<std::string> Answer(int64_t step, const std::vector<std::string>& requests,
                                  const std::map<int, Status>& missing) {
    const int world = comm_->world_size();
    std::vector<StatusOr<Request>> asked;
    std::vector<std::string> all_fqns;
    std::unordered_set<std::string> seen;
    for (int r = 0; r < world; ++r) {
      if (missing.count(r) > 0) {
        asked.push_back(Status::Unavailable("lost"));
        continue;
      }
      asked.push_back(DecodeRequest(requests.at(r)));
      if (!asked.back().ok()) continue;
      for (const std::string& f : asked.back()->fqns) {
        if (seen.insert(f).second) all_fqns.push_back(f);
      }
    }
    Status opened = Local();
    StatusOr<StepMetadata> md = opened.ok() ? local_->ReadMetadataOf(step, all_fqns) : StatusOr<StepMetadata>(opened);
    std::string header;
    // Per entry, built once for every rank that needs it: the pieces'
    // index, and the record of all its pieces.
    std::vector<std::unique_ptr<PieceBoxes>> indexes;
    std::vector<std::optional<std::string>> whole;
    // kPlaces: the step's places, to name each rank those it reads.
    std::unique_ptr<ChunkPlaceIndex> places;
    if (md.ok() && chunks_ == ChunkPath::kPlaces) {
      StatusOr<std::unique_ptr<ChunkPlaceIndex>> index = places_source_->PlacesOf(md->step, md->save_id);
      if (index.ok()) {
        places = std::move(index).value();
      } else {
        md = index.status();
      }
    }
    if (md.ok()) {
      header = EncodeMetadataRecord(*md);
      indexes.resize(md->entries.size());
      whole.resize(md->entries.size());
    }
    // Each entry's index and whole record are built once, by the first rank
    // that needs them.
    const size_t entries = md.ok() ? md->entries.size() : 0;
    std::unique_ptr<std::once_flag[]> index_built(new std::once_flag[entries]);
    std::unique_ptr<std::once_flag[]> whole_built(new std::once_flag[entries]);
    std::vector<std::string> parts(world);
    auto answer_rank = [&](size_t r64, std::string*) -> Status {
      const int r = static_cast<int>(r64);
      if (missing.count(r) > 0) return Status::OK();
      Status st = md.status();
      if (st.ok()) st = asked[r].status();
      if (st.ok() && asked[r]->step != step) {
        st = Status::InvalidArgument("rank " + std::to_string(r) + " loads step " + std::to_string(asked[r]->step) +
                                     ", the coordinator (rank " + std::to_string(coordinator_) + ") step " +
                                     std::to_string(step));
      }
      std::string out;
      const std::string status = EncodeStatus(st.ok() ? st : st.WithContext("on the coordinator's host"));
      AppendLEString(&out, status);
      if (st.ok()) {
        AppendLEString(&out, header);
        const Request& q = *asked[r];
        const std::unordered_set<std::string> wanted(q.fqns.begin(), q.fqns.end());
        std::unordered_map<std::string, std::vector<const EntryRegion*>> by_entry;
        for (const EntryRegion& region : q.regions) by_entry[region.fqn].push_back(&region);
        std::string items;
        uint32_t n = 0;
        std::vector<size_t> rank_places;
        for (size_t i = 0; i < md->entries.size(); ++i) {
          const EntryMetadata& e = md->entries[i];
          if (wanted.count(e.fqn) == 0 || e.pieces_omitted) continue;
          auto found = by_entry.find(e.fqn);
          AppendLE32(&items, static_cast<uint32_t>(i));
          ++n;
          if (found == by_entry.end()) {
            std::call_once(whole_built[i], [&] { whole[i] = EncodeEntryPiecesValue(*md, i); });
            items.push_back(0);
            AppendLEString(&items, *whole[i]);
            if (places) {
              for (const StoredPiece& p : e.pieces) places->AddPlacesOf(md->step, md->save_id, p, &rank_places);
            }
            continue;
          }
          std::call_once(index_built[i], [&] { indexes[i] = std::make_unique<PieceBoxes>(e); });
          items.push_back(1);
          const std::vector<size_t> meeting = PiecesMeeting(*indexes[i], found->second);
          AppendLEString(&items, EncodePiecesSubset(*md, i, meeting));
          if (places) {
            for (size_t j : meeting) places->AddPlacesOf(md->step, md->save_id, e.pieces[j], &rank_places);
          }
        }
        AppendLE32(&out, n);
        out += items;
        if (places) {
          std::string listed;
          places->AppendPlaces(std::move(rank_places), &listed);
          AppendLEString(&out, listed);
        }
      }
      parts[r] = std::move(out);
      return Status::OK();
    };
    // The ranks' answers are independent: on the coordinator's cores at once
    // (at thousands of ranks they are its one serial part of a load).
    const int threads = world >= 64 ? std::min(DefaultParallelism(), 16) : 1;
    const auto none = [](size_t, std::string&) { return Status::OK(); };
    (void)RunOrdered(static_cast<size_t>(world), threads, static_cast<size_t>(threads) * 4, answer_rank, none);
    if (md.ok()) served_ = std::move(md).value();
    return parts;
  }

  // `places`: with kPlaces, where the places the coordinator named go.
  static StatusOr<StepMetadata> DecodeAnswer(std::string_view in, std::string* places) {
    LECursor c(in);
    std::string status, header;
    if (!c.String(&status)) return Status::Internal("the coordinator's metadata message is malformed");
    Status st = DecodeStatus(status);
    if (!st.ok()) return st;
    uint32_t n = 0;
    if (!c.String(&header) || !c.U32(&n)) return Status::Internal("the coordinator's metadata message is malformed");
    ASSIGN_OR_RETURN(MetadataRecord rec, DecodeMetadataRecord(header));
    for (uint32_t k = 0; k < n; ++k) {
      uint32_t i = 0;
      std::string_view partial;
      std::string pieces;
      if (!c.U32(&i) || !c.Bytes(1, &partial) || !c.String(&pieces) || i >= rec.metadata.entries.size()) {
        return Status::Internal("the coordinator's metadata message is malformed");
      }
      EntryMetadata& e = rec.metadata.entries[i];
      RETURN_IF_ERROR(partial[0] != 0 ? DecodePiecesSubset(pieces, rec.metadata, &e)
                                      : DecodeEntryPiecesValue(pieces, rec.metadata, &e));
    }
    if (places != nullptr && !c.String(places)) {
      return Status::Internal("the coordinator's list of the step's places is malformed");
    }
    if (!c.empty()) return Status::Internal("the coordinator's metadata message is malformed");
    return std::move(rec.metadata);
  }

  // Coordinator: reads its own items while a thread per other rank serves it.
  StatusOr<ReadStats> Serve(const StepMetadata& md, const std::vector<ReadItem>& items) {
    RETURN_IF_ERROR(Local());
    // The chunks any rank may ask for: of what every rank loads (served_,
    // read by ReadMetadataFor), or of `md` when that is whole.
    const bool whole = served_.has_value() && served_->step == md.step && served_->save_id == md.save_id;
    const StepChunks chunks(whole ? *served_ : md);
    // A thread per other rank, as many as can be started (util/thread_fanout.h).
    const size_t others = static_cast<size_t>(comm_->world_size() - 1);
    ThreadFanout servers(others, others, [&](size_t i) {
      const int peer = static_cast<int>(i) < coordinator_ ? static_cast<int>(i) : static_cast<int>(i) + 1;
      (void)ServeRank(peer, md, chunks);
    });
    StatusOr<ReadStats> mine = local_->Read(md, items);
    servers.Join();
    // (A rank that was not served reports its own error, which Load shares.)
    return mine;
  }

  Status ServeRank(int peer, const StepMetadata& md, const StepChunks& chunks) {
    std::vector<DataKey> keys;
    std::string payload;
    for (bool more = true; more;) {
      FrameKind kind;
      RETURN_IF_ERROR(RecvFrame(*comm_, peer, &kind, &payload));
      switch (kind) {
        case FrameKind::kRequest:
          for (std::string_view in = payload; !in.empty();) {
            uint64_t n = 0;
            DataKey k;
            if (!ConsumeLE64(&in, &n) || in.size() < n || !ParseDataKey(in.substr(0, n), &k)) {
              return Status::DataLoss("a malformed chunk request from rank " + std::to_string(peer));
            }
            in.remove_prefix(n);
            keys.push_back(k);
          }
          break;
        case FrameKind::kDone:
          more = false;
          break;
        case FrameKind::kError:
          return Status::OK();  // the rank could not plan its read: nothing to serve
        default:
          return Status::DataLoss("rank " + std::to_string(peer) + " sent a frame of kind " +
                                  std::to_string(static_cast<uint32_t>(kind)) + " in its chunk request");
      }
    }
    for (const DataKey& k : keys) {
      if (chunks.Contains(k)) continue;
      Status refused =
          Status::InvalidArgument("rank " + std::to_string(peer) + " asked the coordinator for a chunk that step " +
                                  std::to_string(md.step) + " does not hold (step " + std::to_string(k.step) +
                                  ", rank " + std::to_string(k.rank) + " item " + std::to_string(k.item) + " chunk " +
                                  std::to_string(k.chunk) + "): its load is out of step with the coordinator's");
      SendErrorFrame(*comm_, peer, refused);
      return refused;
    }
    return ServeValues(peer, keys);
  }

  // Sends `peer` the values of `keys` in batches (kBatch frames), each value
  // pinned where it lies (no copy); stops with an error frame at the first
  // value it cannot read.
  Status ServeValues(int peer, const std::vector<DataKey>& keys) {
    std::vector<rocksdb::PinnableSlice> values(kBatchValues);
    std::vector<Communicator::Part> parts;
    std::string table;
    for (size_t i = 0; i < keys.size();) {
      table.clear();
      parts.clear();
      uint64_t bytes = 0;
      Status failed;
      for (size_t j = 0; i < keys.size() && j < kBatchValues && bytes < kBatchBytes; ++i, ++j) {
        rocksdb::PinnableSlice& v = values[j];
        v.Reset();
        Status st = source_->GetChunkValue(keys[i], &v);
        if (!st.ok() && st.code() != StatusCode::kNotFound) {
          failed = st.WithContext("on the coordinator's host");
          break;
        }
        const bool found = st.ok();
        table.push_back(static_cast<char>(found ? FrameKind::kValue : FrameKind::kMissing));
        AppendLE64(&table, found ? v.size() : 0);
        if (found) parts.push_back({v.data(), v.size()});
        bytes += found ? v.size() : 0;
      }
      if (!table.empty()) {
        RETURN_IF_ERROR(SendFrame(*comm_, peer, FrameKind::kBatch, table));
        RETURN_IF_ERROR(comm_->SendParts(peer, parts));
      }
      if (!failed.ok()) {
        SendErrorFrame(*comm_, peer, failed);
        return failed;
      }
    }
    return Status::OK();
  }

  // Every other rank: asks the coordinator for its chunks and reads them as
  // they arrive.
  StatusOr<ReadStats> Fetch(const StepMetadata& md, const std::vector<ReadItem>& items) {
    StatusOr<std::vector<DataKey>> planned = ChunksToRead(md, items);
    Status can = planned.status();
    for (const ReadItem& item : items) {
      const uint64_t es = std::max<uint32_t>(item.element_bytes, 1);
      if (can.ok() && item.sink && item.length > 0 && item.piece.chunk_bytes % es != 0) {
        can = Status::FailedPrecondition(
            "entry '" + item.fqn +
            "' was saved with chunks that split its elements (a store written before format 2): a rank on another "
            "host than the store cannot load it into a strided or converted target; load it on the coordinator's "
            "host");
      }
    }
    if (!can.ok()) {
      SendErrorFrame(*comm_, coordinator_, can);
      return can;
    }
    const std::vector<DataKey>& keys = *planned;
    std::string frame;
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::string k = EncodeDataKey(keys[i]);
      AppendLE64(&frame, k.size());
      frame += k;
      if ((i + 1) % kKeysPerFrame == 0 || i + 1 == keys.size()) {
        RETURN_IF_ERROR(SendFrame(*comm_, coordinator_, FrameKind::kRequest, frame));
        frame.clear();
      }
    }
    RETURN_IF_ERROR(SendFrame(*comm_, coordinator_, FrameKind::kDone, {}));

    ValueStream stream(*comm_, coordinator_, keys);
    StatusOr<ReadStats> read =
        ReadChunksFrom([&](const DataKey& key, rocksdb::PinnableSlice* value) { return stream.Take(key, value); }, md,
                       items, options_.threads > 0 ? options_.threads : DefaultParallelism());
    stream.Finish();
    return read;
  }

  const std::string path_;
  Communicator* const comm_;
  const int coordinator_;
  const ReaderOptions options_;
  const ChunkPath chunks_;
  std::unique_ptr<StoreReader> local_;  // the coordinator's
  // The coordinator: what its last ReadMetadataFor read for every rank.
  std::optional<StepMetadata> served_;
  ChunkValueSource* source_ = nullptr;         // local_, as a server of chunks (kServe)
  ChunkPlaceSource* places_source_ = nullptr;  // local_, as a namer of chunk places (kPlaces)
  // The other ranks with kPlaces: the places the coordinator named, the step
  // (number, save id) they are of, and the reader of places (made at the
  // first Read).
  std::optional<std::pair<int64_t, uint64_t>> places_of_;
  std::string places_;
  std::unique_ptr<PlacedChunkReader> placed_;
};

}  // namespace

namespace {

Status CheckCoordinator(const Communicator& comm, int coordinator_rank) {
  if (coordinator_rank < 0 || coordinator_rank >= comm.world_size()) {
    return Status::InvalidArgument("coordinator rank " + std::to_string(coordinator_rank) +
                                   " is not in the world of size " + std::to_string(comm.world_size()));
  }
  return Status::OK();
}

}  // namespace

StatusOr<std::unique_ptr<StorageReader>> OpenSharedStoreReader(const std::string& path, Communicator* comm,
                                                               int coordinator_rank, const ReaderOptions& options) {
  if (comm == nullptr) return Status::InvalidArgument("OpenSharedStoreReader needs the job's communicator");
  RETURN_IF_ERROR(CheckCoordinator(*comm, coordinator_rank));
  RETURN_IF_ERROR(ValidateReaderOptions(options));
  return std::unique_ptr<StorageReader>(
      new RemoteStoreReader(path, comm, coordinator_rank, options, ChunkPath::kPlaces));
}

StatusOr<std::unique_ptr<StorageReader>> OpenRemoteStoreReader(const std::string& path, Communicator* comm,
                                                               int coordinator_rank, const ReaderOptions& options) {
  if (comm == nullptr) return Status::InvalidArgument("OpenRemoteStoreReader needs the job's communicator");
  if (path.rfind("s3://", 0) == 0) {
    return Status::InvalidArgument("store " + path +
                                   " is a bucket, which every rank reaches: open it with OpenStoreReader on every "
                                   "rank (no coordinator-only load)");
  }
  RETURN_IF_ERROR(CheckCoordinator(*comm, coordinator_rank));
  return std::unique_ptr<StorageReader>(
      new RemoteStoreReader(path, comm, coordinator_rank, options, ChunkPath::kServe));
}

}  // namespace ckptdb
