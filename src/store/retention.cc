#include "store/retention.h"

#include <string>

namespace ckptdb {

std::vector<int64_t> StepsToPrune(const std::vector<int64_t>& steps, const std::set<int64_t>& tagged,
                                  const RetentionPolicy& policy) {
  std::vector<int64_t> drop;
  if (!policy.enabled() || steps.empty()) return drop;
  const size_t n = steps.size();
  // The newest step is always kept, whatever keep_last says.
  const size_t keep_from = policy.keep_last > 0 && static_cast<uint64_t>(policy.keep_last) < n
                               ? n - static_cast<size_t>(policy.keep_last)
                               : (policy.keep_last > 0 ? 0 : n - 1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t s = steps[i];
    if (i >= keep_from) continue;
    if (policy.keep_every > 0 && s % policy.keep_every == 0) continue;
    if (policy.keep_tagged && tagged.count(s) != 0) continue;
    drop.push_back(s);
  }
  return drop;
}

Status ValidateRetentionPolicy(const RetentionPolicy& policy, const std::string& name) {
  if (policy.keep_last < 0) {
    return Status::InvalidArgument(name + ".keep_last is " + std::to_string(policy.keep_last) + "; it must be >= 0");
  }
  if (policy.keep_every < 0) {
    return Status::InvalidArgument(name + ".keep_every is " + std::to_string(policy.keep_every) + "; it must be >= 0");
  }
  return Status::OK();
}

}  // namespace ckptdb
