#include "ckptdb/copy.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "ckptdb/checkpoint.h"
#include "ckptdb/state_dict.h"
#include "util/status_macros.h"

namespace ckptdb {
namespace {

// The step as LoadWhole gives it, each sharded entry made a sharded tensor
// again (one shard, the whole), so that the copy keeps every entry's kind.
StatusOr<StateDict> ReadStep(StoreReader& reader, const StepMetadata& md) {
  ASSIGN_OR_RETURN(StateDict whole, LoadWhole(reader, md.step));
  StateDict out;
  for (auto& [fqn, entry] : whole.mutable_entries()) {
    const EntryMetadata* e = md.Find(fqn);
    if (e != nullptr && e->kind == EntryKind::kShardedTensor && std::holds_alternative<Tensor>(entry)) {
      Tensor t = std::get<Tensor>(std::move(entry));
      const DType dtype = t.dtype();
      const Shape shape = t.shape();
      std::vector<Shard> shards{Shard{std::vector<int64_t>(shape.size(), 0), std::move(t)}};
      ASSIGN_OR_RETURN(ShardedTensor st, ShardedTensor::Create(dtype, shape, std::move(shards)));
      RETURN_IF_ERROR(out.Add(fqn, std::move(st)));
    } else {
      RETURN_IF_ERROR(out.AddEntry(fqn, std::move(entry)));
    }
  }
  return out;
}

const void* DataOf(const Entry& e, size_t* n) {
  if (const Tensor* t = std::get_if<Tensor>(&e)) {
    *n = t->nbytes();
    return t->data();
  }
  if (const ShardedTensor* s = std::get_if<ShardedTensor>(&e)) {
    const Tensor& t = s->local_shards().at(0).tensor;
    *n = t.nbytes();
    return t.data();
  }
  const Bytes& b = std::get<Bytes>(e);
  *n = b.data.size();
  return b.data.data();
}

// Whether two steps hold the same entries, byte for byte.
bool SameEntries(const StateDict& a, const StateDict& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [fqn, entry] : a.entries()) {
    const Entry* other = b.Find(fqn);
    if (other == nullptr || other->index() != entry.index()) return false;
    size_t na = 0, nb = 0;
    const void* pa = DataOf(entry, &na);
    const void* pb = DataOf(*other, &nb);
    if (na != nb || (na > 0 && std::memcmp(pa, pb, na) != 0)) return false;
  }
  return true;
}

}  // namespace

StatusOr<std::vector<CopiedStep>> CopySteps(const std::string& from, const std::string& to,
                                            const CopyOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<StoreReader> src, OpenStoreReader(from));
  ASSIGN_OR_RETURN(std::vector<StepInfo> listed, src->ListSteps());
  std::vector<int64_t> steps = options.steps;
  if (steps.empty()) {
    for (const StepInfo& s : listed) steps.push_back(s.step);
  }
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  std::map<int64_t, const StepInfo*> info;
  for (const StepInfo& s : listed) info[s.step] = &s;
  for (int64_t step : steps) {
    if (info.count(step) == 0) {
      return Status::NotFound("step " + std::to_string(step) + " not found in store '" + from +
                              "'; nothing was copied");
    }
  }
  std::map<int64_t, std::vector<std::string>> tags_of;
  if (options.tags) {
    ASSIGN_OR_RETURN(auto tags, src->ListTags());
    for (const auto& [name, step] : tags) tags_of[step].push_back(name);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<StoreWriter> dst, OpenStoreWriter(to, options.destination));
  std::vector<CopiedStep> out;
  for (size_t i = 0; i < steps.size(); ++i) {
    const int64_t step = steps[i];
    CopiedStep c;
    c.step = step;
    c.logical_bytes = info[step]->logical_bytes;
    // The destination as it is now (a missing one has no steps).
    std::unique_ptr<StoreReader> dst_reader;
    bool present = false;
    if (auto r = OpenStoreReader(to); r.ok()) {
      dst_reader = std::move(*r);
      ASSIGN_OR_RETURN(present, dst_reader->HasStep(step));
    } else if (r.status().code() != StatusCode::kNotFound) {
      return r.status();
    }
    ASSIGN_OR_RETURN(StepMetadata md, src->ReadMetadata(step));
    if (options.dry_run) {
      c.outcome = present ? CopiedStep::Outcome::kPresent : CopiedStep::Outcome::kWouldCopy;
    } else {
      ASSIGN_OR_RETURN(StateDict state, ReadStep(*src, md));
      if (present) {
        ASSIGN_OR_RETURN(StepMetadata there, dst_reader->ReadMetadata(step));
        ASSIGN_OR_RETURN(StateDict theirs, ReadStep(*dst_reader, there));
        if (!SameEntries(state, theirs)) {
          return Status::AlreadyExists("step " + std::to_string(step) + " is already in store '" + to +
                                       "' with other content; nothing of it was copied" +
                                       (i > 0 ? " (the steps before it were)" : ""));
        }
        c.outcome = CopiedStep::Outcome::kPresent;
      } else {
        SaveOptions so;
        so.step = step;
        so.no_dist = true;
        so.metrics = md.metrics;
        so.note = md.note;
        so.annotations = md.annotations;
        Status st = Save(state, *dst, so);
        if (!st.ok()) return st.WithContext("copying step " + std::to_string(step) + " to '" + to + "'");
        c.outcome = CopiedStep::Outcome::kCopied;
        ASSIGN_OR_RETURN(std::unique_ptr<StoreReader> after, OpenStoreReader(to));
        ASSIGN_OR_RETURN(std::vector<StepInfo> there, after->ListSteps());
        for (const StepInfo& s : there) {
          if (s.step == step) c.stored_bytes = s.stored_bytes;
        }
      }
      for (const std::string& name : tags_of[step]) {
        RETURN_IF_ERROR(dst->Tag(step, name).status());
        c.tags.push_back(name);
      }
    }
    out.push_back(c);
    if (options.progress) options.progress(c, i, steps.size());
  }
  return out;
}

}  // namespace ckptdb
