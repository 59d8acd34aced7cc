// ckptdb-metadata-bench: what a load of one small entry costs in a step of
// many pieces (issue 33 item 4). One process saves a step of --entries
// sharded tensors of --pieces one-row shards each (every rank's pieces of a
// world of --pieces ranks, as local shards of this one) and a 16-byte
// tensor "step_count"; another process loads "step_count" alone and prints
// its CPU seconds and peak RSS.
//
//   ckptdb-metadata-bench save DIR [--entries 300] [--pieces 2048] [--step 1]
//   ckptdb-metadata-bench load DIR [--step 1] [--whole 1] [--row R [--pages 0]] [--all 1]
//
// --all 1 loads every entry whole as well (one process gathering every
// rank's pieces: a read per piece of the step), and checks every row.
// --row R loads row R of entry layer.0.weight as well (one rank's shard of
// it): a store of format 7 reads the one page of 64 pieces that holds it;
// --pages 0 makes the load read every piece of the entry instead (a reader
// that ignores the load's regions, as loads read before pages).
//
// DIR may be an s3:// URL (a bucket store, AWS_* settings from the
// environment). --whole 1 reads the step's whole metadata first
// (ReadMetadata), as every load did before loads read only the entries they
// need: the baseline, in the same process kind and the same store.
//
// Run under ckptdb-launch (CKPTDB_WORLD_SIZE set), the save is one job's:
// each of the W ranks saves its share of every entry's pieces (--pieces / W
// consecutive rows; step_count is the coordinator's, rank 0) and prints its
// peak RSS; the coordinator merges and commits every rank's pieces, the
// others hold their own only. Each rank then loads its rows back (through
// OpenSharedStoreReader, as ckptdb.load does) and prints the control bytes
// and messages it received saving and loading, and its peers. E.g.
// `ckptdb-launch -n 8 -- ckptdb-metadata-bench save DIR`.
//
// Public API only, so that the same file builds against an older ckptdb.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ckptdb/ckptdb.h"
#include "cpu_time.h"

using namespace ckptdb;

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "ckptdb-metadata-bench: %s\n", what.c_str());
  std::exit(1);
}

using bench::PeakRssMiB;

std::string EntryName(int64_t e) { return "layer." + std::to_string(e) + ".weight"; }

// Rows [first, last) of entry e, a [pieces, 4] f32 tensor, as one-row
// shards: row r holds {e, r, 0, 1} (or zeros, to load into).
ShardedTensor RowsOf(int64_t e, int64_t first, int64_t last, int64_t pieces, bool zeros) {
  std::vector<Shard> shards;
  shards.reserve(static_cast<size_t>(last - first));
  for (int64_t r = first; r < last; ++r) {
    const float values[4] = {float(e), float(r), 0, 1};
    shards.push_back(Shard{{r, 0}, zeros ? Tensor::Zeros(DType::kF32, {1, 4}).value()
                                         : Tensor::Copy(DType::kF32, {1, 4}, values, sizeof(values)).value()});
  }
  auto t = ShardedTensor::Create(DType::kF32, {pieces, 4}, std::move(shards));
  if (!t.ok()) Die(t.status().ToString());
  return std::move(t).value();
}

// Whether row r of entry e holds what RowsOf saved.
bool RowIsRight(const void* row, int64_t e, int64_t r) {
  const float want[4] = {float(e), float(r), 0, 1};
  return std::memcmp(row, want, sizeof(want)) == 0;
}

// A reader whose loads read every piece of the entries they load, whatever
// their regions (ReadMetadataOf): the baseline for --pages 0.
class IgnoringRegions final : public StorageReader {
 public:
  explicit IgnoringRegions(StorageReader& inner) : inner_(inner) {}
  StatusOr<StepMetadata> ReadMetadata(int64_t step) override { return inner_.ReadMetadata(step); }
  StatusOr<StepMetadata> ReadMetadataOf(int64_t step, const std::vector<std::string>& fqns) override {
    return inner_.ReadMetadataOf(step, fqns);
  }
  StatusOr<ReadStats> Read(const StepMetadata& md, const std::vector<ReadItem>& items) override {
    return inner_.Read(md, items);
  }

 private:
  StorageReader& inner_;
};
constexpr auto CpuSeconds = bench::ProcessCpuSeconds;

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    Die("usage: ckptdb-metadata-bench save|load DIR [--entries N] [--pieces N] [--step N] [--whole 1] "
        "[--row R [--pages 0]] [--all 1]");
  }
  const std::string mode = argv[1], dir = argv[2];
  int64_t entries = 300, pieces = 2048, step = 1, whole = 0, row = -1, pages = 1, every = 0;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int64_t v = std::atoll(argv[i + 1]);
    if (flag == "--entries") {
      entries = v;
    } else if (flag == "--pieces") {
      pieces = v;
    } else if (flag == "--step") {
      step = v;
    } else if (flag == "--whole") {
      whole = v;
    } else if (flag == "--row") {
      row = v;
    } else if (flag == "--pages") {
      pages = v;
    } else if (flag == "--all") {
      every = v;
    } else {
      Die("unknown flag " + flag);
    }
  }
  StateDict sd;
  const float counter[4] = {1, 2, 3, 4};
  if (mode == "save") {
    // A rank of a job (ckptdb-launch), or the whole job in this process.
    std::unique_ptr<Communicator> comm;
    int rank = 0, world = 1;
    if (std::getenv("CKPTDB_WORLD_SIZE") != nullptr) {
      auto config = DistributedConfig::FromEnvironment();
      if (!config.ok()) Die(config.status().ToString());
      auto c = ConnectGloo(*config);
      if (!c.ok()) Die(c.status().ToString());
      comm = std::move(c).value();
      rank = comm->rank();
      world = comm->world_size();
    }
    const int64_t first = pieces * rank / world, last = pieces * (rank + 1) / world;
    // (Every rank's; the coordinator's is saved.)
    if (!sd.Add("step_count", Tensor::Copy(DType::kF32, {4}, counter, sizeof(counter)).value()).ok()) Die("add");
    for (int64_t e = 0; e < entries; ++e) {
      if (Status st = sd.Add(EntryName(e), RowsOf(e, first, last, pieces, false)); !st.ok()) Die(st.ToString());
    }
    const double built_rss = PeakRssMiB();
    auto w = OpenStoreWriter(dir);
    if (!w.ok()) Die(w.status().ToString());
    const auto t0 = std::chrono::steady_clock::now();
    SaveOptions o;
    o.step = step;
    o.no_dist = comm == nullptr;
    o.communicator = comm.get();
    if (Status st = Save(sd, **w, o); !st.ok()) Die(st.ToString());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (comm == nullptr) {
      std::printf("saved step %lld: %lld entries x %lld pieces + step_count in %.2f s, peak RSS %.1f MiB (%.1f MiB "
                  "with the state dict built, before the save)\n",
                  (long long)step, (long long)entries, (long long)pieces, seconds, PeakRssMiB(), built_rss);
      return 0;
    }
    const CollectiveStats saved = comm->stats();
    const double save_rss = PeakRssMiB();
    // Then the job loads its rows back, each rank its own, through a reader
    // shared the way ckptdb.load shares one (the coordinator opens the store).
    StateDict back;
    for (int64_t e = 0; e < entries; ++e) {
      if (!back.Add(EntryName(e), RowsOf(e, first, last, pieces, true)).ok()) Die("add");
    }
    auto reader = OpenSharedStoreReader(dir, comm.get());
    if (!reader.ok()) Die(reader.status().ToString());
    LoadOptions lo;
    lo.step = step;
    lo.communicator = comm.get();
    if (Status st = Load(back, **reader, lo); !st.ok()) Die(st.ToString());
    for (int64_t e = 0; e < entries; ++e) {
      for (const Shard& s : std::get<ShardedTensor>(*back.Find(EntryName(e))).local_shards()) {
        if (!RowIsRight(s.tensor.data(), e, s.offsets[0])) Die("a row loaded wrong");
      }
    }
    const CollectiveStats all = comm->stats();
    std::printf("rank %d of %d (%s) saved step %lld: its %lld of %lld pieces of each of %lld entries in %.2f s, "
                "peak RSS %.1f MiB (%.1f MiB with its state dict built, before the save); received %llu bytes in "
                "%llu messages saving, %llu in %llu loading its rows back; peers %llu\n",
                rank, world, rank == 0 ? "the coordinator" : "not the coordinator", (long long)step,
                (long long)(last - first), (long long)pieces, (long long)entries, seconds, save_rss, built_rss,
                (unsigned long long)saved.bytes_received, (unsigned long long)saved.messages_received,
                (unsigned long long)(all.bytes_received - saved.bytes_received),
                (unsigned long long)(all.messages_received - saved.messages_received), (unsigned long long)all.peers);
    return 0;
  }
  if (mode != "load") Die("mode is save or load");
  const double rss0 = PeakRssMiB(), cpu0 = CpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  auto r = OpenStoreReader(dir);
  if (!r.ok()) Die(r.status().ToString());
  if (!sd.Add("step_count", Tensor::Zeros(DType::kF32, {4}).value()).ok()) Die("add");
  if (every != 0 && row >= 0) Die("--all 1 loads every row already: no --row with it");
  for (int64_t e = 0; every != 0 && e < entries; ++e) {
    if (!sd.Add(EntryName(e), Tensor::Zeros(DType::kF32, {pieces, 4}).value()).ok()) Die("add");
  }
  if (row >= 0) {
    if (!sd.Add(EntryName(0), RowsOf(0, row, row + 1, pieces, true)).ok()) Die("add");
  }
  if (whole != 0) {
    auto md = (*r)->ReadMetadata(step);
    if (!md.ok()) Die(md.status().ToString());
  }
  LoadOptions o;
  o.step = step;
  o.no_dist = true;
  IgnoringRegions ignoring(**r);
  StorageReader& reader = pages != 0 ? static_cast<StorageReader&>(**r) : ignoring;
  if (Status st = Load(sd, reader, o); !st.ok()) Die(st.ToString());
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Tensor& got = std::get<Tensor>(*sd.Find("step_count"));
  if (std::memcmp(got.data(), counter, sizeof(counter)) != 0) Die("step_count loaded wrong");
  for (int64_t e = 0; every != 0 && e < entries; ++e) {
    const float* rows = static_cast<const float*>(std::get<Tensor>(*sd.Find(EntryName(e))).data());
    for (int64_t k = 0; k < pieces; ++k) {
      if (!RowIsRight(rows + 4 * k, e, k)) Die("an entry loaded wrong");
    }
  }
  if (row >= 0) {
    const Tensor& r0 = std::get<ShardedTensor>(*sd.Find(EntryName(0))).local_shards()[0].tensor;
    if (!RowIsRight(r0.data(), 0, row)) Die("row loaded wrong");
  }
  std::printf("load of step_count (16 bytes)%s%s%s%s: %.3f CPU-s, %.3f s wall, peak RSS %.1f MiB (%.1f MiB before)\n",
              every != 0 ? " and every entry whole" : "", row >= 0 ? " and one row of layer.0.weight" : "",
              pages == 0 ? " (every piece of it read)" : "",
              whole != 0 ? " after reading the whole metadata" : "", CpuSeconds() - cpu0, wall, PeakRssMiB(), rss0);
  return 0;
}
