// ckptdb_crash_helper STORE STEP: saves a small state dict as STEP and
// "crashes" (exits with code 42, no cleanup) after the step's SST files were
// ingested and before its metadata reaches the write-ahead log. The crash
// test runs it as a separate process and then inspects the store.
//
// ckptdb_crash_helper --dedup STORE N: runs DedupScenario (deduplicated
// saves, a delete, the rewrite of a file without its unused chunks, a commit
// with retention, a prune and a sweep) and crashes
// at its N-th file write (exit 42); exits 0 when the scenario ends first.
//
// ckptdb_crash_helper --keep-best STORE N: saves steps 0..5 with metric
// "loss" (kKeepBestLoss) under keep-best 2 (min), each commit pruning in its
// own batch, and crashes at its N-th file write likewise.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dedup_scenario.h"

#include "fault_injection_fs.h"
#include "store/rocksdb_store_internal.h"
#include "test_util.h"

using namespace ckptdb;
using namespace ckptdb::testing;

namespace {

// Arms the crash right before the real Finish: ingestion then runs, and the
// metadata commit's WAL append ends the process.
class CrashBeforeCommit : public FaultyWriter {
 public:
  CrashBeforeCommit(StorageWriter* inner, FaultInjectionFS* fs) : FaultyWriter(inner) {
    on_finish = [fs] {
      fs->wal_append = FaultInjectionFS::Action::kCrash;
      return Status::OK();
    };
  }
};

}  // namespace

int RunDedupScenario(const char* store, int64_t crash_at) {
  auto fs = std::make_shared<FaultInjectionFS>();
  auto env = FaultInjectionFS::MakeEnv(fs);
  fs->writes_before_crash = crash_at;
  Status st = DedupScenario(store, env.get());
  if (!st.ok()) {
    std::fprintf(stderr, "dedup scenario failed: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}

int RunKeepBestScenario(const char* store, int64_t crash_at) {
  auto fs = std::make_shared<FaultInjectionFS>();
  auto env = FaultInjectionFS::MakeEnv(fs);
  fs->writes_before_crash = crash_at;
  StoreOptions o;
  o.chunk_bytes = 4096;
  o.retention.keep_best = 2;
  o.retention.best_metric = "loss";
  auto w = OpenStoreWriterWithEnv(store, o, env.get());
  Status st = w.status();
  for (int64_t step = 0; st.ok() && step < 6; ++step) {
    SaveOptions so;
    so.step = step;
    so.no_dist = true;
    so.metrics = {{"loss", kKeepBestLoss[step]}};
    st = Save(DedupScenarioStep(step), **w, so);
  }
  if (!st.ok()) {
    std::fprintf(stderr, "keep-best scenario failed: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--dedup") return RunDedupScenario(argv[2], std::atoll(argv[3]));
  if (argc == 4 && std::string(argv[1]) == "--keep-best") return RunKeepBestScenario(argv[2], std::atoll(argv[3]));
  if (argc != 3) {
    std::fprintf(stderr, "usage: ckptdb_crash_helper STORE STEP\n");
    return 2;
  }
  auto fs = std::make_shared<FaultInjectionFS>();
  auto env = FaultInjectionFS::MakeEnv(fs);
  StoreOptions opts;
  opts.chunk_bytes = 4096;
  auto writer = OpenStoreWriterWithEnv(argv[1], opts, env.get());
  if (!writer.ok()) {
    std::fprintf(stderr, "%s\n", writer.status().ToString().c_str());
    return 1;
  }
  StateDict sd;
  (void)sd.Add("w", PatternTensor(DType::kF32, {64, 64}, 7));
  (void)sd.AddBytes("b", "crash me");
  CrashBeforeCommit crashing(writer->get(), fs.get());
  Status st = SaveNoDist(sd, crashing, std::atoll(argv[2]));
  std::fprintf(stderr, "save returned without crashing: %s\n", st.ToString().c_str());
  return 1;
}
