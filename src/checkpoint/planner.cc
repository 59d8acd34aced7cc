#include "checkpoint/planner.h"

#include <algorithm>
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

}  // namespace

StatusOr<LocalPlan> PlanLocal(const StateDict& state_dict, int rank, int coordinator_rank) {
  LocalPlan plan;
  const bool writes_replicated = rank == coordinator_rank;
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
  } else {
    for (const EntryMetadata& e : plan->entries) ToProto(e, p.add_entries());
  }
  return p.SerializeAsString();
}

StatusOr<StepMetadata> MergePlans(const std::vector<std::string>& encoded_plans, int coordinator_rank) {
  const int world = static_cast<int>(encoded_plans.size());
  std::vector<proto::LocalPlan> plans(world);
  std::map<int, Status> failures;
  for (int r = 0; r < world; ++r) {
    if (!plans[r].ParseFromString(encoded_plans[r])) {
      failures[r] = Status::Internal("the plan of rank " + std::to_string(r) + " does not parse");
    } else if (plans[r].has_status() && plans[r].status().code() != 0) {
      failures[r] = StatusFromProto(plans[r].status());
    }
  }
  if (!failures.empty()) return Status::CheckpointError("failed to plan the save", std::move(failures));
  std::map<int, std::string> by_delivery;  // delivery -> its ranks
  for (int r = 0; r < world; ++r) {
    std::string& ranks = by_delivery[plans[r].delivery()];
    ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  if (by_delivery.size() > 1) {
    return Status::InvalidArgument(
        "the ranks disagree on where the store is: rank(s) " + by_delivery[0] +
        " write into a store every rank sees, rank(s) " + by_delivery[1] +
        " send their files to the coordinator (give every rank the same StoreOptions::access)");
  }

  StepMetadata m;
  m.format_version = kFormatVersion;
  m.world_size = world;
  m.coordinator_rank = coordinator_rank;
  const proto::LocalPlan& coord = plans[coordinator_rank];
  std::map<std::string, size_t> index;
  for (const proto::Entry& pe : coord.entries()) {
    auto e = FromProto(pe);
    if (!e.ok()) return e.status();
    index[e->fqn] = m.entries.size();
    m.entries.push_back(std::move(e).value());
  }
  for (int r = 0; r < world; ++r) {
    if (r == coordinator_rank) continue;
    const proto::LocalPlan& p = plans[r];
    if (static_cast<size_t>(p.entries_size()) != m.entries.size()) {
      return Status::InvalidArgument("invalid state dict: rank " + std::to_string(r) + " has " +
                                     std::to_string(p.entries_size()) + " entries, the coordinator (rank " +
                                     std::to_string(coordinator_rank) + ") has " + std::to_string(m.entries.size()));
    }
    for (const proto::Entry& pe : p.entries()) {
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
      if (e.kind == EntryKind::kBytes) continue;  // only the coordinator's bytes are saved
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
    }
  }
  for (EntryMetadata& e : m.entries) {
    std::sort(e.pieces.begin(), e.pieces.end(), [](const StoredPiece& a, const StoredPiece& b) {
      return a.key.rank != b.key.rank ? a.key.rank < b.key.rank : a.key.item < b.key.item;
    });
  }
  Status st = ValidateStepMetadata(m, /*check_storage=*/false);
  if (!st.ok()) return st.WithContext("invalid state dict");
  return m;
}

}  // namespace ckptdb
