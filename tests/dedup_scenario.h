// A sequence of deduplicated saves and deletes, shared by the crash helper
// (which stops it at any file write) and the crash test (which checks what
// every committed step must hold).
#ifndef CKPTDB_TESTS_DEDUP_SCENARIO_H_
#define CKPTDB_TESTS_DEDUP_SCENARIO_H_

#include <rocksdb/env.h>

#include <string>

#include "ckptdb/ckptdb.h"

namespace ckptdb::testing {

// The state dict step `step` of the scenario saves: a frozen tensor that
// never changes (shared by every step) and an adapter that changes each step.
StateDict DedupScenarioStep(int64_t step);

// On a fresh store: saves steps 1 and 2, deletes step 1, rewrites step 1's
// file without its unused chunks (ReclaimSpace), saves step 3 with
// retention keep_last 1 in the commit (dropping step 2), saves step 4,
// prunes to the newest step and sweeps; every file write through `env`.
Status DedupScenario(const std::string& store, rocksdb::Env* env);

// The keep-best crash scenario (ckptdb_crash_helper --keep-best): the metric
// "loss" of steps 0..5, saved in turn under keep-best 2 (min), and the
// committed steps after each of those commits (the newest always kept).
inline constexpr double kKeepBestLoss[6] = {5, 3, 4, 1, 2, 6};
inline const std::vector<std::vector<int64_t>> kKeepBestHistory = {
    {}, {0}, {0, 1}, {1, 2}, {1, 3}, {3, 4}, {3, 4, 5}};

}  // namespace ckptdb::testing

#endif  // CKPTDB_TESTS_DEDUP_SCENARIO_H_
