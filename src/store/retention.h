// The retention rule (RetentionPolicy in include/ckptdb/rocksdb_store.h) as a
// pure function of the committed steps and the tagged ones.
#ifndef CKPTDB_SRC_RETENTION_H_
#define CKPTDB_SRC_RETENTION_H_

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "ckptdb/rocksdb_store.h"

namespace ckptdb {

// The steps of `steps` (increasing, distinct) that `policy` drops, in
// increasing order. The newest step is never dropped; a disabled policy drops
// nothing. `best_values`: the value of policy.best_metric of each step that
// has it (steps missing from it are never among the best).
std::vector<int64_t> StepsToPrune(const std::vector<int64_t>& steps, const std::set<int64_t>& tagged,
                                  const RetentionPolicy& policy, const std::map<int64_t, double>& best_values = {});

// The steps of `values` (step -> value of one metric) ranked best first:
// by value (ascending with kMin, descending with kMax), ties newest first.
std::vector<int64_t> RankByMetric(const std::map<int64_t, double>& values, MetricMode mode);

// InvalidArgument when a field is negative, naming it as `name`.field
// ("StoreOptions.retention.keep_last is -1; it must be >= 0").
Status ValidateRetentionPolicy(const RetentionPolicy& policy, const std::string& name = "retention");

}  // namespace ckptdb

#endif  // CKPTDB_SRC_RETENTION_H_
