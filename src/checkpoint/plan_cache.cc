// Plan caching across the saves of one job (plan_cache.h).
#include "checkpoint/plan_cache.h"

#include "checkpoint/planner.h"

#include "format/chunk_codec.h"

namespace ckptdb {

namespace {

// A part is a plan ('P' + the plan) or a reference ('R' + fingerprint).
constexpr char kPlan = 'P';
constexpr char kReference = 'R';

}  // namespace

PlanCache& PlanCache::Of(Communicator& comm) {
  std::shared_ptr<Communicator::ProtocolState>& state = comm.protocol_state();
  if (auto* cache = dynamic_cast<PlanCache*>(state.get())) return *cache;
  state = std::make_shared<PlanCache>();
  return static_cast<PlanCache&>(*state);
}

PlanCache::Fingerprint PlanCache::Of(const std::string& plan) {
  Fingerprint f(kChunkHashBytes, '\0');
  ChunkContentHash(plan.data(), plan.size(), f.data());
  return f;
}

std::string PlanCache::Outgoing(const std::string& plan, int coordinator) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_sent_ = std::make_pair(coordinator, Of(plan));
  sent_reference_ = sent_ && *sent_ == *pending_sent_;
  sent_.reset();  // (back with Succeeded: after a failed save, plans go whole)
  return sent_reference_ ? kReference + pending_sent_->second : kPlan + plan;
}

std::optional<StepMetadata> PlanCache::Resolve(std::vector<std::string>* parts, int coordinator,
                                               const std::map<int, Status>& missing,
                                               std::map<int, Status>* failures) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool have = held_ && held_->coordinator == coordinator && held_->plans.size() == parts->size();
  bool all_references = have;
  Held next;
  next.coordinator = coordinator;
  next.fingerprints.resize(parts->size());
  for (size_t r = 0; r < parts->size(); ++r) {
    if (missing.count(static_cast<int>(r))) continue;
    std::string& part = (*parts)[r];
    if (!part.empty() && part[0] == kReference) {
      const Fingerprint f = part.substr(1);
      if (!have || held_->fingerprints[r] != f) {
        (*failures)[static_cast<int>(r)] = Status::Internal(
            "rank " + std::to_string(r) + " referred to its plan of an earlier save, which the coordinator does not "
            "hold (the next save sends every plan whole)");
        part.clear();
        continue;
      }
      part = held_->plans[r];
      next.fingerprints[r] = f;
    } else if (!part.empty() && part[0] == kPlan) {
      part.erase(0, 1);
      next.fingerprints[r] = Of(part);
      all_references = false;
    } else {
      (*failures)[static_cast<int>(r)] = Status::Internal("the plan of rank " + std::to_string(r) + " is malformed");
      part.clear();
    }
  }
  reused_merge_ = all_references && failures->empty() && held_->merged != nullptr;
  if (!failures->empty()) {
    // (The cache stays as it was; every plan is sent whole next time only
    // if this save fails, which it does.)
    pending_held_.reset();
    return std::nullopt;
  }
  next.plans = *parts;
  if (reused_merge_) next.merged = held_->merged;
  pending_held_ = std::move(next);
  if (reused_merge_) return *held_->merged;
  return std::nullopt;
}

void PlanCache::Succeeded(std::optional<StepMetadata> committed) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_held_ && pending_held_->merged == nullptr && committed.has_value()) {
    pending_held_->merged = std::make_shared<const StepMetadata>(PlannedPart(std::move(*committed)));
  }
  if (pending_sent_) sent_ = std::move(pending_sent_);
  pending_sent_.reset();
  if (pending_held_ && pending_held_->merged != nullptr) held_ = std::move(pending_held_);
  pending_held_.reset();
}

bool PlanCache::sent_reference() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sent_reference_;
}

bool PlanCache::reused_merge() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reused_merge_;
}

}  // namespace ckptdb
