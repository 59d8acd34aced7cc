// The load protocol and resharding reads (include/ckptdb/checkpoint.h).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <thread>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "ckptdb/checkpoint.h"
#include "model/box_index.h"
#include "device/device_staging.h"
#include "util/guarded_call.h"
#include "model/region.h"
#include "checkpoint/verdict.h"
#include "comm/resolve_communicator.h"
#include "format/status_codec.h"
#include "util/status_macros.h"

namespace ckptdb {

namespace {

// A target on a device that cannot take chunks as they come (strided or
// converted): loaded into a host tensor first, copied over at the end.
struct DeviceCopy {
  std::string fqn;
  Tensor host;
  int device;
  void* dst;
};

// A bytes target: resized (and read) only when the load goes ahead.
struct BytesTarget {
  const std::string* fqn;
  Bytes* bytes;
  const StoredPiece* piece;
  BytesEncoding encoding;  // the step's
};

// What a rank will read and where it goes. Making one changes nothing in the
// target; only ExecuteLoad does.
struct LoadPlan {
  std::vector<ReadItem> reads;
  // Host memory every byte of which the reads overwrite (whole host target
  // regions): its pages may be faulted in ahead of the reads.
  std::vector<std::pair<char*, size_t>> prefault;
  std::vector<BytesTarget> bytes_targets;
  std::vector<DeviceCopy> device_copies;
  std::vector<std::string> missing;  // target FQNs not in the step (allow_missing)
  uint64_t bytes_copied = 0;
};

struct TargetRegion {
  Box box;
  void* data;
  DType dtype;
  Device device;
};

bool IsTensorKind(EntryKind k) { return k == EntryKind::kTensor || k == EntryKind::kShardedTensor; }

// Collects the target regions of a tensor or sharded tensor entry, checking
// them against the saved entry.
Status TargetRegions(const std::string& fqn, const Entry& target, const EntryMetadata& saved, bool convert_dtype,
                     std::vector<TargetRegion>* out) {
  const std::string where = "entry '" + fqn + "'";
  DType dtype;
  Shape shape;
  std::vector<std::pair<Box, const Tensor*>> parts;
  if (const Tensor* t = std::get_if<Tensor>(&target)) {
    dtype = t->dtype();
    shape = t->shape();
    parts.push_back({Box{std::vector<int64_t>(shape.size(), 0), shape}, t});
  } else {
    const ShardedTensor& st = std::get<ShardedTensor>(target);
    dtype = st.dtype();
    shape = st.global_shape();
    for (const Shard& s : st.local_shards()) parts.push_back({Box{s.offsets, s.tensor.shape()}, &s.tensor});
  }
  if (dtype != saved.dtype && !convert_dtype) {
    return Status::InvalidArgument(where + ": dtype mismatch: the target is " + DTypeName(dtype) +
                                   ", the step holds " + DTypeName(saved.dtype) +
                                   " (LoadOptions::convert_dtype converts)");
  }
  if (shape != saved.shape) {
    return Status::InvalidArgument(where + ": shape mismatch: the target is " + ShapeToString(shape) +
                                   ", the step holds " + ShapeToString(saved.shape));
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto& [box, tensor] = parts[i];
    if (tensor->dtype() != dtype) {
      return Status::InvalidArgument(where + ": target shard " + std::to_string(i) + " has dtype " +
                                     DTypeName(tensor->dtype()) + ", the tensor " + DTypeName(dtype));
    }
    Status st = CheckBoxWithin(box, shape);
    if (!st.ok()) return st.WithContext(where + " target shard " + std::to_string(i));
    out->push_back(TargetRegion{box, tensor->data(), dtype, tensor->device()});
  }
  return Status::OK();
}

// Where one saved piece meets one target region: the overlapping box, its
// byte span in the piece (sb, se) and in the target (db, de), and whether
// both spans are plain runs of the same dtype (no strides, no conversion).
struct Overlap {
  const StoredPiece* piece;
  Box src, ov;
  uint64_t n, sb, se, db, de;
  bool contiguous;
};

// The saved pieces of one entry as boxes, with an index over them: a target
// region finds the pieces it meets without trying each one.
std::vector<Overlap> Overlaps(const TargetRegion& t, const EntryMetadata& saved, const PieceBoxes& pieces) {
  std::vector<size_t> met;
  pieces.index->ForEachOverlap(t.box, [&](size_t i) { met.push_back(i); });
  std::sort(met.begin(), met.end());  // in the saved order, as before
  std::vector<Overlap> out;
  const size_t es = DTypeSize(saved.dtype), tes = DTypeSize(t.dtype);
  for (size_t i : met) {
    const StoredPiece& piece = saved.pieces[i];
    Overlap o{&piece, pieces.boxes[i], {}, 0, 0, 0, 0, 0, false};
    if (!Intersect(o.src, t.box, &o.ov)) continue;
    o.n = static_cast<uint64_t>(BoxNumel(o.ov));
    ByteSpan(o.src, o.ov, es, &o.sb, &o.se);
    ByteSpan(t.box, o.ov, tes, &o.db, &o.de);
    o.contiguous = t.dtype == saved.dtype && o.se - o.sb == o.n * es && o.de - o.db == o.n * es;
    out.push_back(std::move(o));
  }
  return out;
}

Status PlanTensorReads(const std::string& fqn, const Entry& target, const EntryMetadata& saved, bool convert_dtype,
                       LoadPlan* plan) {
  std::vector<TargetRegion> regions;
  RETURN_IF_ERROR(TargetRegions(fqn, target, saved, convert_dtype, &regions));
  const PieceBoxes pieces(saved);
  for (TargetRegion t : regions) {
    const std::vector<Overlap> overlaps = Overlaps(t, saved, pieces);
    // A device target takes each verified chunk as it is read (through a
    // pinned buffer) when every overlap is a plain run of 1-d chunks;
    // otherwise a host tensor stands in for it.
    const bool to_device = !t.device.is_cpu();
    const bool chunkwise = to_device && std::all_of(overlaps.begin(), overlaps.end(), [](const Overlap& o) {
                             return o.contiguous && o.piece->chunk_shape.empty();
                           });
    if (to_device && !chunkwise) {
      StatusOr<Tensor> host = Tensor::Zeros(t.dtype, t.box.sizes);
      if (!host.ok()) return host.status().WithContext("entry '" + fqn + "': a host tensor to load into");
      plan->device_copies.push_back(DeviceCopy{fqn, *host, t.device.index, t.data});
      t.data = host->data();
    }
    if (t.device.is_cpu() || !chunkwise) {
      plan->prefault.push_back({static_cast<char*>(t.data), static_cast<size_t>(BoxNumel(t.box)) * DTypeSize(t.dtype)});
    }
    int64_t covered = 0;
    for (const Overlap& o : overlaps) {
      covered += static_cast<int64_t>(o.n);
      plan->bytes_copied += o.n * DTypeSize(t.dtype);
      ReadItem item{fqn, *o.piece, o.sb, o.se - o.sb, nullptr, {}};
      if (!o.piece->chunk_shape.empty()) {
        // Chunks are boxes: each one that meets the overlap is copied (and
        // converted) into the target as it arrives.
        item.region_offsets = o.ov.offsets;
        item.region_sizes = o.ov.sizes;
        item.box_sink = [dst_box = t.box, dst = t.data, sdt = saved.dtype, ddt = t.dtype, ov = o.ov](
                            const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes, uint64_t begin,
                            const char* data, uint64_t n) {
          const Box chunk{offsets, sizes};
          Box part;
          if (Intersect(chunk, ov, &part)) CopyRegionWindow(chunk, data, begin, n, sdt, dst_box, dst, ddt, part);
          return Status::OK();
        };
        if (saved.dtype == t.dtype) {
          item.box_place = [dst_box = t.box, dst = static_cast<char*>(t.data), es = DTypeSize(t.dtype), ov = o.ov](
                               const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes) {
            const Box chunk{offsets, sizes};
            Box part;
            if (BoxNumel(chunk) == 0 || !Intersect(chunk, ov, &part) || BoxNumel(part) != BoxNumel(chunk)) {
              return BoxPlace{};
            }
            uint64_t begin = 0, run = 0, stride = 0;
            if (!RunsOfBox(dst_box, chunk, es, &begin, &run, &stride)) return BoxPlace{};
            return BoxPlace{dst + begin, run, stride};
          };
        }
      } else if (chunkwise) {
        item.sink = [device = t.device.index, dst = static_cast<char*>(t.data) + o.db, sb = o.sb](
                        uint64_t begin, const char* data, uint64_t len) {
          return StageToDevice(device, data, len, dst + (begin - sb));
        };
      } else if (o.contiguous) {
        // Contiguous on both sides: read straight into the target.
        item.dest = static_cast<char*>(t.data) + o.db;
      } else {
        // Strided (or converted): each chunk is scattered into the target
        // as it arrives, on the reader's worker threads.
        item.sink = [src = o.src, dst_box = t.box, dst = t.data, sdt = saved.dtype, ddt = t.dtype, ov = o.ov](
                        uint64_t begin, const char* data, uint64_t len) {
          CopyRegionWindow(src, data, begin, len, sdt, dst_box, dst, ddt, ov);
          return Status::OK();
        };
        item.element_bytes = static_cast<uint32_t>(DTypeSize(saved.dtype));
      }
      plan->reads.push_back(std::move(item));
    }
    if (covered != BoxNumel(t.box)) {
      return Status::InvalidArgument("entry '" + fqn + "': target region " + BoxToString(t.box) +
                                     " is not covered by the saved shards (" + std::to_string(covered) + " of " +
                                     std::to_string(BoxNumel(t.box)) + " elements)");
    }
  }
  return Status::OK();
}

// InvalidArgument when `keys` names an FQN more than once.
Status CheckDistinctKeys(const std::vector<std::string>& keys, const char* what) {
  std::unordered_set<std::string> seen;
  for (const std::string& k : keys) {
    if (!seen.insert(k).second) return Status::InvalidArgument(std::string(what) + " names '" + k + "' twice");
  }
  return Status::OK();
}

// The regions of the tensors of `fqns` that `target` loads: what a reader
// needs the pieces of (StorageReader::ReadMetadataFor). Bytes entries and
// names the target lacks are left out (read whole, or not at all).
std::vector<EntryRegion> TargetBoxes(const StateDict& target, const std::vector<std::string>& fqns) {
  std::vector<EntryRegion> out;
  for (const std::string& fqn : fqns) {
    const Entry* entry = target.Find(fqn);
    if (entry == nullptr) continue;
    if (const Tensor* t = std::get_if<Tensor>(entry)) {
      out.push_back(EntryRegion{fqn, std::vector<int64_t>(t->shape().size(), 0), t->shape()});
    } else if (const ShardedTensor* st = std::get_if<ShardedTensor>(entry)) {
      for (const Shard& s : st->local_shards()) out.push_back(EntryRegion{fqn, s.offsets, s.tensor.shape()});
    }
  }
  return out;
}

// Validates the whole target against the step and plans the reads; changes
// nothing in the target.
Status PlanLoad(StateDict& target, const StepMetadata& md, const LoadOptions& options, LoadPlan* plan) {
  std::unordered_set<std::string> only(options.keys.begin(), options.keys.end());
  for (const std::string& k : options.keys) {
    if (target.Find(k) == nullptr) {
      return Status::InvalidArgument("LoadOptions::keys names '" + k + "', which is not an entry of the target");
    }
  }
  // One index of the step's entries: a lookup per target entry, not a scan.
  std::unordered_map<std::string, const EntryMetadata*> saved_by_fqn;
  for (const EntryMetadata& e : md.entries) saved_by_fqn.emplace(e.fqn, &e);
  // Sized once, for a read per saved piece of the entries loaded (those the
  // metadata holds; more when several target regions meet one piece): a
  // process loading a step of hundreds of thousands of pieces held up to
  // twice their reads, three times while the vector moved them.
  size_t expected_reads = 0;
  for (const auto& [fqn, entry] : target.entries()) {
    if (!only.empty() && only.count(fqn) == 0) continue;
    auto found = saved_by_fqn.find(fqn);
    if (found != saved_by_fqn.end()) expected_reads += found->second->pieces.size();
  }
  plan->reads.reserve(expected_reads);
  for (auto& [fqn, entry] : target.mutable_entries()) {
    if (!only.empty() && only.count(fqn) == 0) continue;
    auto found = saved_by_fqn.find(fqn);
    if (found == saved_by_fqn.end()) {
      if (options.allow_missing) {
        plan->missing.push_back(fqn);
        continue;
      }
      return Status::NotFound("entry '" + fqn + "' is not in step " + std::to_string(md.step) +
                              " (LoadOptions::allow_missing skips such entries)");
    }
    const EntryMetadata* saved = found->second;
    const bool target_is_bytes = std::holds_alternative<Bytes>(entry);
    if (target_is_bytes != (saved->kind == EntryKind::kBytes)) {
      return Status::InvalidArgument("entry '" + fqn + "': kind mismatch: the target is " + EntryKindName(entry) +
                                     ", the step holds " + EntryKindName(saved->kind));
    }
    if (target_is_bytes) {
      plan->bytes_targets.push_back(
          BytesTarget{&fqn, &std::get<Bytes>(entry), &saved->pieces.at(0), saved->bytes_encoding});
      continue;
    }
    if (!IsTensorKind(saved->kind)) return Status::Internal("unexpected entry kind for '" + fqn + "'");
    RETURN_IF_ERROR(PlanTensorReads(fqn, entry, *saved, options.convert_dtype, plan));
  }
  for (const BytesTarget& b : plan->bytes_targets) plan->bytes_copied += b.piece->nbytes;
  return Status::OK();
}

// Faults in the pages of `ranges` for writing (whole pages inside them), in
// one call each: a fresh tensor (a restarting job's) otherwise faults in page
// by page, a trap each, as the chunks land in it. A range whose first,
// middle and last pages are in memory already (a tensor loaded or written
// before) is left alone: walking its pages would cost more than it saves.
// Best effort.
void Prefault(const std::vector<std::pair<char*, size_t>>& ranges) {
#ifdef MADV_POPULATE_WRITE
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  auto resident = [](uintptr_t at) {
    unsigned char in = 0;
    return mincore(reinterpret_cast<void*>(at), page, &in) == 0 && (in & 1) != 0;
  };
  for (const auto& [data, n] : ranges) {
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + n) / page * page;
    if (end <= begin) continue;
    const uintptr_t middle = begin + (end - begin) / 2 / page * page;
    if (resident(begin) && resident(middle) && resident(end - page)) continue;
    (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
  }
#else
  (void)ranges;
#endif
}

// Reads what `plan` says into the target: the first step that changes it.
Status ExecuteLoad(LoadPlan& plan, StorageReader& reader, const StepMetadata& md, LoadStats* stats) {
  for (const BytesTarget& b : plan.bytes_targets) {
    b.bytes->data.assign(b.piece->nbytes, '\0');
    b.bytes->encoding = b.encoding;
    plan.reads.push_back(ReadItem{*b.fqn, *b.piece, 0, b.piece->nbytes, b.bytes->data.data(), {}});
  }
  // The targets' pages faulted in beside the reads (which wait on the disk
  // in a cold load), not one trap per page under them.
  std::thread prefault;
  if (!plan.prefault.empty()) {
    prefault = std::thread([&plan] { Prefault(plan.prefault); });
  }
  StatusOr<ReadStats> rs = GuardedCall("read", [&] { return reader.Read(md, plan.reads); });
  if (prefault.joinable()) prefault.join();
  if (!rs.ok()) return rs.status();
  for (const DeviceCopy& c : plan.device_copies) {
    Status st = StageToDevice(c.device, static_cast<const char*>(c.host.data()), c.host.nbytes(), c.dst);
    if (!st.ok()) return st.WithContext("entry '" + c.fqn + "' on " + Device::CUDA(c.device).ToString());
  }
  if (stats) {
    stats->chunks_read += rs->chunks_read;
    stats->chunks_landed += rs->chunks_landed;
    stats->stored_bytes_read += rs->stored_bytes_read;
    stats->raw_bytes_read += rs->raw_bytes_read;
    stats->bytes_copied += plan.bytes_copied;
    stats->missing.insert(stats->missing.end(), plan.missing.begin(), plan.missing.end());
  }
  return Status::OK();
}

}  // namespace

Status Load(StateDict& target, StorageReader& reader, const LoadOptions& options, LoadStats* stats) {
  std::unique_ptr<Communicator> local;
  Communicator* comm = nullptr;
  RETURN_IF_ERROR(ResolveCommunicator(options.no_dist, options.communicator, options.coordinator_rank, &local, &comm));

  // 1. Every rank checks its options, reads the metadata and plans (checks)
  //    its whole target; the verdicts are shared before any rank reads, so
  //    a target that is wrong on one rank leaves every rank's target as it
  //    was. Every rank reaches both collectives, whatever fails where (an
  //    early return on one rank would leave the others waiting out the
  //    timeout).
  LoadPlan plan;
  Status planned = ValidateStep(options.step);
  // (Read first, whatever the keys and even when this rank's own checks
  // failed: a reader whose metadata comes through the coordinator
  // (OpenSharedStoreReader, OpenRemoteStoreReader) needs every rank in its
  // exchange, and a rank that skipped it would leave the others in it
  // until the timeout, each with another error.)
  // Only the pieces of the entries this rank loads are read (those PlanLoad
  // looks at: options.keys, or every entry of the target); the names,
  // kinds and shapes of the others come with them.
  std::vector<std::string> fqns = options.keys;
  if (fqns.empty()) {
    fqns.reserve(target.entries().size());
    for (const auto& [fqn, entry] : target.entries()) fqns.push_back(fqn);
  }
  StatusOr<StepMetadata> md = GuardedCall(
      "read_metadata", [&] { return reader.ReadMetadataFor(options.step, fqns, TargetBoxes(target, fqns)); });
  if (planned.ok()) planned = md.status();
  if (planned.ok()) planned = CheckDistinctKeys(options.keys, "LoadOptions::keys");
  // CUDA targets: the application's kernels are done with them first.
  if (planned.ok()) planned = GuardedCall("checking devices", [&] { return CheckAndSynchronizeDevices(target, options.keys); });
  if (planned.ok()) planned = GuardedCall("planning the load", [&] { return PlanLoad(target, *md, options, &plan); });
  const int root = options.coordinator_rank;
  RETURN_IF_ERROR(AgreeOnVerdict(*comm, root, planned, "load: exchanging plans",
                                 "Failed to load checkpoint (nothing was read: every rank's target is unchanged)"));
  // 2. Every rank reads; the outcomes are shared.
  Status read = GuardedCall("reading", [&] { return ExecuteLoad(plan, reader, *md, stats); });
  return AgreeOnVerdict(*comm, root, read, "load: exchanging statuses", "Failed to load checkpoint");
}

StatusOr<StateDict> LoadWhole(StorageReader& reader, int64_t step, const std::vector<std::string>& fqns) {
  RETURN_IF_ERROR(ValidateStep(step));
  RETURN_IF_ERROR(CheckDistinctKeys(fqns, "LoadWhole's fqns"));
  ASSIGN_OR_RETURN(StepMetadata md, fqns.empty() ? reader.ReadMetadata(step) : reader.ReadMetadataOf(step, fqns));
  std::vector<const EntryMetadata*> chosen;
  if (fqns.empty()) {
    for (const EntryMetadata& e : md.entries) chosen.push_back(&e);
  } else {
    for (const std::string& f : fqns) {
      const EntryMetadata* e = md.Find(f);
      if (e == nullptr) return Status::NotFound("entry '" + f + "' is not in step " + std::to_string(step));
      chosen.push_back(e);
    }
  }
  StateDict sd;
  for (const EntryMetadata* e : chosen) {
    if (e->kind == EntryKind::kBytes) {
      RETURN_IF_ERROR(sd.Add(e->fqn, Bytes{}));
    } else {
      ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros(e->dtype, e->shape));
      RETURN_IF_ERROR(sd.Add(e->fqn, std::move(t)));
    }
  }
  LoadPlan plan;
  RETURN_IF_ERROR(PlanLoad(sd, md, LoadOptions{}, &plan));
  RETURN_IF_ERROR(ExecuteLoad(plan, reader, md, nullptr));
  return sd;
}

}  // namespace ckptdb
