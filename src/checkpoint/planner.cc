#include "checkpoint/planner.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <string_view>

#include "ckptdb.pb.h"
#include "format/metadata_codec.h"
#include "device/device_staging.h"
#include "model/region.h"
#include "format/status_codec.h"

namespace ckptdb {

namespace {

// For a tensor on a device: its bytes are copied off the device chunk by
// chunk while the store writes (device_staging.h).
void SetDeviceSource(const Tensor& t, WriteItem* item) {
  if (t.device().is_cpu()) return;
  item->data = nullptr;  // not host memory: a writer must go through source
  item->source = [device = t.device().index, base = static_cast<const char*>(t.data())](
                     uint64_t begin, uint64_t n, const std::function<void(const char*)>& use) {
    return WithBytesFromDevice(device, base + begin, n, use);
  };
}

StoredPiece WholePiece(const Shape& shape, StorageKey key, uint64_t nbytes) {
  StoredPiece p;
  p.offsets.assign(shape.size(), 0);
  p.sizes = shape;
  p.key = key;
  p.nbytes = nbytes;
  return p;
}

// Reads an encoded LocalPlan field by field (as protobuf's parser would:
// fields in any order, repeated ones appended, unknown ones skipped), and
// hands each entry to `on_entry` as soon as it is parsed, so that only one
// entry's message is held at a time; its other fields go into *head. False
// when it does not parse.
bool ForEachPlanEntry(const std::string& encoded, proto::LocalPlan* head,
                      const std::function<void(const proto::Entry&)>& on_entry) {
  using google::protobuf::internal::WireFormatLite;
  if (encoded.size() > static_cast<size_t>(std::numeric_limits<int>::max())) return false;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(encoded.data()),
                                            static_cast<int>(encoded.size()));
  in.SetTotalBytesLimit(std::numeric_limits<int>::max());
  // A length-delimited message field into `message`.
  auto read_message = [&in](google::protobuf::MessageLite* message) {
    uint32_t length = 0;
    if (!in.ReadVarint32(&length)) return false;
    const auto limit = in.PushLimit(static_cast<int>(length));
    if (!message->MergeFromCodedStream(&in) || !in.ConsumedEntireMessage()) return false;
    in.PopLimit(limit);
    return true;
  };
  proto::Entry entry;
  for (;;) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return in.ConsumedEntireMessage();  // the end, or bytes that are no tag
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const auto wire = WireFormatLite::GetTagWireType(tag);
    if (field == proto::LocalPlan::kEntriesFieldNumber && wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      entry.Clear();
      if (!read_message(&entry)) return false;
      on_entry(entry);
    } else if (field == proto::LocalPlan::kStatusFieldNumber && wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!read_message(head->mutable_status())) return false;
    } else if (field == proto::LocalPlan::kDeliveryFieldNumber && wire == WireFormatLite::WIRETYPE_VARINT) {
      uint32_t delivery = 0;
      if (!in.ReadVarint32(&delivery)) return false;
      head->set_delivery(static_cast<int32_t>(delivery));
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return false;
    }
  }
}

}  // namespace

StatusOr<LocalPlan> PlanLocal(const StateDict& state_dict, int rank, int coordinator_rank) {
  LocalPlan plan;
  const bool writes_replicated = rank == coordinator_rank;
  // Sized once: a rank may save hundreds of thousands of pieces, and
  // vectors grown by doubling hold up to twice their memory.
  size_t pieces = 0;
  for (const auto& [fqn, entry] : state_dict.entries()) {
    const ShardedTensor* st = std::get_if<ShardedTensor>(&entry);
    pieces += st != nullptr ? st->local_shards().size() : writes_replicated ? 1 : 0;
  }
  plan.items.reserve(pieces);
  plan.entries.reserve(state_dict.size());
  uint32_t next_item = 0;
  auto add_item = [&](const std::string& fqn, EntryKind kind, DType dtype, const void* data, uint64_t nbytes,
                      const Shape& sizes) {
    StorageKey key{static_cast<uint32_t>(rank), next_item++};
    plan.items.push_back(WriteItem{fqn, kind, dtype, key, data, nbytes, {}});
    plan.items.back().sizes = sizes;
    return key;
  };
  for (const auto& [fqn, entry] : state_dict.entries()) {
    EntryMetadata e;
    e.fqn = fqn;
    if (const Tensor* t = std::get_if<Tensor>(&entry)) {
      e.kind = EntryKind::kTensor;
      e.dtype = t->dtype();
      e.shape = t->shape();
      if (writes_replicated) {
        StorageKey key = add_item(fqn, e.kind, e.dtype, t->data(), t->nbytes(), t->shape());
        SetDeviceSource(*t, &plan.items.back());
        e.pieces.push_back(WholePiece(t->shape(), key, t->nbytes()));
      }
    } else if (const ShardedTensor* st = std::get_if<ShardedTensor>(&entry)) {
      e.kind = EntryKind::kShardedTensor;
      e.dtype = st->dtype();
      e.shape = st->global_shape();
      e.pieces.reserve(st->local_shards().size());
      for (size_t i = 0; i < st->local_shards().size(); ++i) {
        const Shard& s = st->local_shards()[i];
        // ShardedTensor::Create checked these; a default-constructed or
        // hand-built value may not have been.
        Box box{s.offsets, s.tensor.shape()};
        Status c = CheckBoxWithin(box, e.shape);
        if (!c.ok()) return c.WithContext("entry '" + fqn + "' local shard " + std::to_string(i));
        if (s.tensor.dtype() != e.dtype) {
          return Status::InvalidArgument("entry '" + fqn + "' local shard " + std::to_string(i) + " has dtype " +
                                         DTypeName(s.tensor.dtype()) + ", the tensor " + DTypeName(e.dtype));
        }
        StorageKey key = add_item(fqn, e.kind, e.dtype, s.tensor.data(), s.tensor.nbytes(), s.tensor.shape());
        SetDeviceSource(s.tensor, &plan.items.back());
        StoredPiece p;
        p.offsets = s.offsets;
        p.sizes = s.tensor.shape();
        p.key = key;
        p.nbytes = s.tensor.nbytes();
        e.pieces.push_back(std::move(p));
      }
    } else {
      const Bytes& b = std::get<Bytes>(entry);
      e.kind = EntryKind::kBytes;
      e.dtype = DType::kU8;
      if (std::string_view(BytesEncodingName(b.encoding)) == "unknown") {
        return Status::InvalidArgument("entry '" + fqn + "' has unknown bytes encoding " +
                                       std::to_string(static_cast<int>(b.encoding)));
      }
      e.bytes_encoding = b.encoding;
      e.shape = {static_cast<int64_t>(b.data.size())};
      if (writes_replicated) {
        StorageKey key = add_item(fqn, e.kind, e.dtype, b.data.data(), b.data.size(), e.shape);
        e.pieces.push_back(WholePiece(e.shape, key, b.data.size()));
      }
    }
    plan.entries.push_back(std::move(e));
  }
  return plan;
}

std::string EncodeLocalPlan(const StatusOr<LocalPlan>& plan) {
  proto::LocalPlan p;
  if (!plan.ok()) {
    StatusToProto(plan.status(), p.mutable_status());
    return p.SerializeAsString();
  }
  // Entry by entry: serialized protobuf messages merge (repeated fields
  // append), so the plan is the concatenation of one-entry plans, and only
  // one entry's message is held at a time (a whole plan's messages took
  // about 300 bytes per piece, on top of the plan itself).
  std::string out;
  for (const EntryMetadata& e : plan->entries) {
    p.Clear();
    ToProto(e, p.add_entries());
    p.AppendToString(&out);
  }
  return out;
}

StatusOr<StepMetadata> MergePlans(const std::vector<std::string>& encoded_plans, int coordinator_rank) {
  const int world = static_cast<int>(encoded_plans.size());
  // Each plan is read entry by entry and folded into the metadata as it is
  // read (ForEachPlanEntry): what the coordinator holds besides the merged
  // metadata is one entry's message, not every plan parsed (which took
  // about 300 bytes per piece of the step). The coordinator's plan first,
  // then the others in rank order. Planning failures are reported before
  // anything else, so every plan is read even after a disagreement.
  std::map<int, Status> failures;
  std::vector<int32_t> delivery_of(world, 0);
  Status disagreement;  // the first plan found to disagree with the coordinator's
  StepMetadata m;
  m.format_version = kFormatVersion;
  m.world_size = world;
  m.coordinator_rank = coordinator_rank;
  std::map<std::string, size_t> index;
  // A rank plans only its own pieces (keys {r, item}): the coordinator
  // completes each piece from the report of the rank in its key.
  auto owns_its_pieces = [&](int r, const proto::Entry& pe) {
    for (const proto::Piece& piece : pe.pieces()) {
      if (piece.key().rank() != static_cast<uint32_t>(r)) {
        failures[r] = Status::Internal("the plan of rank " + std::to_string(r) + " has a piece of '" + pe.fqn() +
                                       "' keyed to rank " + std::to_string(piece.key().rank()));
        return false;
      }
    }
    return true;
  };
  auto read = [&](int r, const std::function<void(const proto::Entry&)>& on_each) {
    proto::LocalPlan head;
    auto on_entry = [&](const proto::Entry& pe) {
      if (owns_its_pieces(r, pe)) on_each(pe);
    };
    if (!ForEachPlanEntry(encoded_plans[r], &head, on_entry)) {
      failures[r] = Status::Internal("the plan of rank " + std::to_string(r) + " does not parse");
      return false;
    }
    if (head.has_status() && head.status().code() != 0) {
      failures[r] = StatusFromProto(head.status());
      return false;
    }
    delivery_of[r] = head.delivery();
    return failures.count(r) == 0;
  };
  const bool have_coordinators = read(coordinator_rank, [&](const proto::Entry& pe) {
    if (!disagreement.ok()) return;
    auto e = FromProto(pe);
    if (!e.ok()) {
      disagreement = e.status();
      return;
    }
    index[e->fqn] = m.entries.size();
    m.entries.push_back(std::move(e).value());
  });
  // Entry `pe` of rank r's plan against the coordinator's: its pieces join
  // theirs.
  auto fold = [&](int r, const proto::Entry& pe) -> Status {
    auto it = index.find(pe.fqn());
    if (it == index.end()) {
      return Status::InvalidArgument("invalid state dict: rank " + std::to_string(r) + " has entry '" + pe.fqn() +
                                     "' that the coordinator (rank " + std::to_string(coordinator_rank) +
                                     ") does not have");
    }
    EntryMetadata& e = m.entries[it->second];
    auto theirs = FromProto(pe);
    if (!theirs.ok()) return theirs.status();
    const std::string who = "invalid state dict: entry '" + e.fqn + "' on rank " + std::to_string(r);
    if (theirs->kind != e.kind) {
      return Status::InvalidArgument(who + " is a " + EntryKindName(theirs->kind) + ", on the coordinator a " +
                                     EntryKindName(e.kind));
    }
    if (e.kind == EntryKind::kBytes) return Status::OK();  // only the coordinator's bytes are saved
    if (theirs->dtype != e.dtype) {
      return Status::InvalidArgument(who + " has dtype " + DTypeName(theirs->dtype) + ", on the coordinator " +
                                     DTypeName(e.dtype));
    }
    if (theirs->shape != e.shape) {
      return Status::InvalidArgument(who + " has shape " + ShapeToString(theirs->shape) + ", on the coordinator " +
                                     ShapeToString(e.shape));
    }
    if (e.kind == EntryKind::kShardedTensor) {
      for (StoredPiece& piece : theirs->pieces) e.pieces.push_back(std::move(piece));
    }
    return Status::OK();
  };
  for (int r = 0; r < world; ++r) {
    if (r == coordinator_rank) continue;
    const bool folding = have_coordinators && disagreement.ok();
    size_t entries = 0;
    Status first;  // this plan's first disagreement
    if (!read(r, [&](const proto::Entry& pe) {
          ++entries;
          if (folding && first.ok()) first = fold(r, pe);
        }) ||
        !folding) {
      continue;
    }
    // (A plan of another length: that, rather than the first entry that
    // differs.)
    if (entries != m.entries.size()) {
      disagreement = Status::InvalidArgument("invalid state dict: rank " + std::to_string(r) + " has " +
                                             std::to_string(entries) + " entries, the coordinator (rank " +
                                             std::to_string(coordinator_rank) + ") has " +
                                             std::to_string(m.entries.size()));
    } else {
      disagreement = first;
    }
  }
  if (!failures.empty()) return Status::CheckpointError("failed to plan the save", std::move(failures));
  std::map<int, std::string> by_delivery;  // delivery -> its ranks
  for (int r = 0; r < world; ++r) {
    std::string& ranks = by_delivery[delivery_of[r]];
    ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  if (by_delivery.size() > 1) {
    return Status::InvalidArgument(
        "the ranks disagree on where the store is: rank(s) " + by_delivery[0] +
        " write into a store every rank sees, rank(s) " + by_delivery[1] +
        " send their files to the coordinator (give every rank the same StoreOptions::access)");
  }
  if (!disagreement.ok()) return disagreement;
  for (EntryMetadata& e : m.entries) {
    std::sort(e.pieces.begin(), e.pieces.end(), [](const StoredPiece& a, const StoredPiece& b) {
      return a.key.rank != b.key.rank ? a.key.rank < b.key.rank : a.key.item < b.key.item;
    });
  }
  Status st = ValidateStepMetadata(m, /*check_storage=*/false);
  if (!st.ok()) return st.WithContext("invalid state dict");
  return m;
}

StepMetadata PlannedPart(StepMetadata saved) {
  StepMetadata m;
  m.format_version = saved.format_version;
  m.world_size = saved.world_size;
  m.coordinator_rank = saved.coordinator_rank;
  m.entries.reserve(saved.entries.size());
  for (EntryMetadata& e : saved.entries) {
    EntryMetadata c;
    c.fqn = std::move(e.fqn);
    c.kind = e.kind;
    c.dtype = e.dtype;
    c.shape = std::move(e.shape);
    c.bytes_encoding = e.bytes_encoding;
    c.pieces = std::move(e.pieces);
    // Each piece in place, the rest of it given back as it goes: no second
    // copy of the step's pieces is ever held.
    for (StoredPiece& p : c.pieces) {
      StoredPiece q;
      q.offsets = std::move(p.offsets);
      q.sizes = std::move(p.sizes);
      q.key = p.key;
      q.nbytes = p.nbytes;
      p = std::move(q);
    }
    m.entries.push_back(std::move(c));
  }
  return m;
}

}  // namespace ckptdb
