#include "store/retention.h"

#include <algorithm>
#include <string>

namespace ckptdb {

std::vector<int64_t> RankByMetric(const std::map<int64_t, double>& values, MetricMode mode) {
  std::vector<std::pair<int64_t, double>> v(values.begin(), values.end());
  std::sort(v.begin(), v.end(), [mode](const auto& a, const auto& b) {
    if (a.second != b.second) return mode == MetricMode::kMin ? a.second < b.second : a.second > b.second;
    return a.first > b.first;  // ties: the newer step first
  });
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (const auto& [step, value] : v) out.push_back(step);
  return out;
}

std::vector<int64_t> StepsToPrune(const std::vector<int64_t>& steps, const std::set<int64_t>& tagged,
                                  const RetentionPolicy& policy, const std::map<int64_t, double>& best_values) {
  std::vector<int64_t> drop;
  if (!policy.enabled() || steps.empty()) return drop;
  std::set<int64_t> best;
  if (policy.keep_best > 0) {
    std::map<int64_t, double> candidates;
    for (int64_t s : steps) {
      auto it = best_values.find(s);
      if (it != best_values.end()) candidates.insert(*it);
    }
    const std::vector<int64_t> ranked = RankByMetric(candidates, policy.best_mode);
    const size_t k = std::min(ranked.size(), static_cast<size_t>(policy.keep_best));
    best.insert(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(k));
  }
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
    if (best.count(s) != 0) continue;
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
  if (policy.keep_best < 0) {
    return Status::InvalidArgument(name + ".keep_best is " + std::to_string(policy.keep_best) + "; it must be >= 0");
  }
  if (policy.best_mode != MetricMode::kMin && policy.best_mode != MetricMode::kMax) {
    return Status::InvalidArgument(name + ".best_mode " + std::to_string(static_cast<int>(policy.best_mode)) +
                                   " is not a MetricMode (kMin 0, kMax 1)");
  }
  if (policy.keep_best > 0 && policy.best_metric.empty()) {
    return Status::InvalidArgument(name + ".keep_best is " + std::to_string(policy.keep_best) +
                                   " but no best_metric names the metric to rank steps by");
  }
  if (!policy.best_metric.empty()) {
    if (Status st = ValidateMetricName(policy.best_metric); !st.ok()) return st.WithContext(name + ".best_metric");
  }
  return Status::OK();
}

}  // namespace ckptdb
