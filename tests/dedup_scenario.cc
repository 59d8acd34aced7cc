#include "dedup_scenario.h"

#include "store/rocksdb_store_internal.h"
#include "test_util.h"

namespace ckptdb::testing {

StateDict DedupScenarioStep(int64_t step) {
  StateDict sd;
  (void)sd.Add("frozen", PatternTensor(DType::kBF16, {64, 256}, 1));  // 32 KiB: 8 chunks
  (void)sd.Add("adapter", PatternTensor(DType::kF32, {4, 256}, 100 + static_cast<uint32_t>(step)));  // 1 chunk
  (void)sd.AddBytes("loader", "position " + std::to_string(step));
  return sd;
}

Status DedupScenario(const std::string& store, rocksdb::Env* env) {
  StoreOptions o;
  o.chunk_bytes = 4096;
  {
    auto w = OpenStoreWriterWithEnv(store, o, env);
    if (!w.ok()) return w.status();
    for (int64_t step : {1, 2}) {
      Status st = SaveNoDist(DedupScenarioStep(step), **w, step);
      if (!st.ok()) return st;
    }
    Status st = (*w)->DeleteStep(1);
    if (!st.ok()) return st;
    // Step 1's file keeps the frozen chunks step 2 shares: rewrite it
    // without its unused adapter and loader chunks.
    ReclaimOptions every;
    every.min_unused_fraction = 0;
    auto reclaimed = (*w)->ReclaimSpace(every);
    if (!reclaimed.ok()) return reclaimed.status();
    if (reclaimed->files_rewritten != 1) return Status::Internal("the scenario expected step 1's file rewritten");
  }
  o.retention.keep_last = 1;
  auto w = OpenStoreWriterWithEnv(store, o, env);
  if (!w.ok()) return w.status();
  for (int64_t step : {3, 4}) {
    Status st = SaveNoDist(DedupScenarioStep(step), **w, step);
    if (!st.ok()) return st;
  }
  RetentionPolicy newest;
  newest.keep_last = 1;
  auto pruned = (*w)->Prune(newest, /*dry_run=*/false);
  if (!pruned.ok()) return pruned.status();
  auto swept = (*w)->Sweep();
  return swept.ok() ? Status::OK() : swept.status();
}

}  // namespace ckptdb::testing
