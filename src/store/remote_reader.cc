// Loads from a store on the coordinator's host only (OpenRemoteStoreReader in
// include/ckptdb/rocksdb_store.h): the coordinator reads for itself and
// serves every other rank the chunk values it asks for, over the
// communicator's point-to-point messages (comm/transfer.h frames).
//
//   ReadMetadata: the coordinator reads the step's metadata and broadcasts it
//                 (or its error) with the step it read.
//   Read:         each other rank sends the keys of the chunks it needs
//                 (request frames, then a done frame; an error frame when it
//                 could not plan); the coordinator answers each key in order
//                 with a value frame, a missing frame, or an error frame
//                 after which it sends no more. Each rank verifies and
//                 decodes the values as its own reads would.
#include <rocksdb/slice.h>

#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ckptdb/checkpoint.h"
#include "ckptdb/rocksdb_store.h"
#include "comm/transfer.h"
#include "format/chunk_codec.h"
#include "format/keys.h"
#include "format/metadata_codec.h"
#include "format/status_codec.h"
#include "store/chunk_reader.h"
#include "store/rocksdb_store_internal.h"
#include "util/le_bytes.h"
#include "util/status_macros.h"

namespace ckptdb {

namespace {

// The largest value frame a loading rank accepts: one chunk of the largest
// size, stored uncompressible, with its header.
constexpr uint64_t kMaxValueFrame = kMaxChunkRawBytes + (kMaxChunkRawBytes >> 7) + (1u << 20);
// Chunk keys per request frame.
constexpr size_t kKeysPerFrame = 65536;


class RemoteStoreReader final : public StorageReader {
 public:
  RemoteStoreReader(std::string path, Communicator* comm, int coordinator, ReaderOptions options)
      : path_(std::move(path)), comm_(comm), coordinator_(coordinator), options_(options) {}

  StatusOr<StepMetadata> ReadMetadata(int64_t step) override {
    std::string message;
    if (IsCoordinator()) {
      Status opened = Local();
      StatusOr<StepMetadata> md = opened.ok() ? local_->ReadMetadata(step) : StatusOr<StepMetadata>(opened);
      std::string status = EncodeStatus(md.status());
      AppendLE64(&message, static_cast<uint64_t>(step));
      AppendLE64(&message, status.size());
      message += status;
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
    return DecodeMetadataValue(in);
  }

  StatusOr<ReadStats> Read(const StepMetadata& md, const std::vector<ReadItem>& items) override {
    if (IsCoordinator()) return Serve(md, items);
    return Fetch(md, items);
  }

 private:
  bool IsCoordinator() const { return comm_->rank() == coordinator_; }

  // The coordinator's own reader, opened on first use.
  Status Local() {
    if (local_) return Status::OK();
    StatusOr<std::unique_ptr<StoreReader>> r = OpenStoreReader(path_, options_);
    if (!r.ok()) return r.status();
    source_ = dynamic_cast<ChunkValueSource*>(r->get());
    if (source_ == nullptr) return Status::Internal("the store reader cannot serve chunks");
    local_ = std::move(r).value();
    return Status::OK();
  }

  // Coordinator: reads its own items while a thread per other rank serves it.
  StatusOr<ReadStats> Serve(const StepMetadata& md, const std::vector<ReadItem>& items) {
    RETURN_IF_ERROR(Local());
    std::vector<std::thread> servers;
    for (int peer = 0; peer < comm_->world_size(); ++peer) {
      if (peer == coordinator_) continue;
      servers.emplace_back([this, peer] { (void)ServeRank(peer); });
    }
    StatusOr<ReadStats> mine = local_->Read(md, items);
    for (std::thread& t : servers) t.join();
    // (A rank that was not served reports its own error, which Load shares.)
    return mine;
  }

  Status ServeRank(int peer) {
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
      rocksdb::PinnableSlice value;
      Status st = source_->GetChunkValue(k, &value);
      if (st.ok()) {
        RETURN_IF_ERROR(SendFrame(*comm_, peer, FrameKind::kValue, value.ToStringView()));
      } else if (st.code() == StatusCode::kNotFound) {
        RETURN_IF_ERROR(SendFrame(*comm_, peer, FrameKind::kMissing, {}));
      } else {
        SendErrorFrame(*comm_, peer, st.WithContext("on the coordinator's host"));
        return st;
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

    size_t next = 0;        // frames received
    bool stopped = false;   // the coordinator sent an error: no more frames come
    bool broken = false;    // the stream failed: nothing more can be received
    std::string payload;
    auto get = [&](const DataKey& key, rocksdb::PinnableSlice* value) -> Status {
      if (next >= keys.size() || EncodeDataKey(key) != EncodeDataKey(keys[next])) {
        return Status::Internal("a remote read fetched a chunk it did not ask for");
      }
      FrameKind kind;
      Status st = RecvFrame(*comm_, coordinator_, &kind, value->GetSelf(), kMaxValueFrame);
      if (!st.ok()) {
        broken = true;
        return st.WithContext("receiving a chunk from the coordinator");
      }
      ++next;
      switch (kind) {
        case FrameKind::kValue:
          value->PinSelf();
          return Status::OK();
        case FrameKind::kMissing:
          return Status::NotFound("missing");
        case FrameKind::kError:
          stopped = true;
          return DecodeErrorFrame(*value->GetSelf());
        default:
          broken = true;
          return Status::DataLoss("the coordinator sent a frame of kind " +
                                  std::to_string(static_cast<uint32_t>(kind)) + " for a chunk");
      }
    };
    StatusOr<ReadStats> read = ReadChunksFrom(get, md, items, 1);
    // A read that stopped early still takes what the coordinator sends, so
    // that it is not left waiting on this rank.
    while (!read.ok() && !stopped && !broken && next < keys.size()) {
      FrameKind kind;
      if (!RecvFrame(*comm_, coordinator_, &kind, &payload, kMaxValueFrame).ok()) break;
      ++next;
      if (kind == FrameKind::kError) break;
    }
    return read;
  }

  const std::string path_;
  Communicator* const comm_;
  const int coordinator_;
  const ReaderOptions options_;
  std::unique_ptr<StoreReader> local_;  // the coordinator's
  ChunkValueSource* source_ = nullptr;  // local_, as a server of chunks
};

}  // namespace

StatusOr<std::unique_ptr<StorageReader>> OpenRemoteStoreReader(const std::string& path, Communicator* comm,
                                                               int coordinator_rank, const ReaderOptions& options) {
  if (comm == nullptr) return Status::InvalidArgument("OpenRemoteStoreReader needs the job's communicator");
  if (coordinator_rank < 0 || coordinator_rank >= comm->world_size()) {
    return Status::InvalidArgument("coordinator rank " + std::to_string(coordinator_rank) +
                                   " is not in the world of size " + std::to_string(comm->world_size()));
  }
  return std::unique_ptr<StorageReader>(new RemoteStoreReader(path, comm, coordinator_rank, options));
}

}  // namespace ckptdb
