// ckptdb-metadata-bench: what a load of one small entry costs in a step of
// many pieces (issue 33 item 4). One process saves a step of --entries
// sharded tensors of --pieces one-row shards each (every rank's pieces of a
// world of --pieces ranks, as local shards of this one) and a 16-byte
// tensor "step_count"; another process loads "step_count" alone and prints
// its CPU seconds and peak RSS.
//
//   ckptdb-metadata-bench save DIR [--entries 300] [--pieces 2048] [--step 1]
//   ckptdb-metadata-bench load DIR [--step 1] [--whole 1]
//
// DIR may be an s3:// URL (a bucket store, AWS_* settings from the
// environment). --whole 1 reads the step's whole metadata first
// (ReadMetadata), as every load did before loads read only the entries they
// need: the baseline, in the same process kind and the same store.
//
// Public API only, so that the same file builds against an older ckptdb.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
constexpr auto CpuSeconds = bench::ProcessCpuSeconds;

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) Die("usage: ckptdb-metadata-bench save|load DIR [--entries N] [--pieces N] [--step N] [--whole 1]");
  const std::string mode = argv[1], dir = argv[2];
  int64_t entries = 300, pieces = 2048, step = 1, whole = 0;
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
    } else {
      Die("unknown flag " + flag);
    }
  }
  StateDict sd;
  const float counter[4] = {1, 2, 3, 4};
  if (mode == "save") {
    if (!sd.Add("step_count", Tensor::Copy(DType::kF32, {4}, counter, sizeof(counter)).value()).ok()) Die("add");
    for (int64_t e = 0; e < entries; ++e) {
      std::vector<Shard> shards;
      shards.reserve(pieces);
      for (int64_t r = 0; r < pieces; ++r) {
        const float row[4] = {float(e), float(r), 0, 1};
        shards.push_back(Shard{{r, 0}, Tensor::Copy(DType::kF32, {1, 4}, row, sizeof(row)).value()});
      }
      auto t = ShardedTensor::Create(DType::kF32, {pieces, 4}, std::move(shards));
      if (!t.ok()) Die(t.status().ToString());
      if (Status st = sd.Add("layer." + std::to_string(e) + ".weight", std::move(t).value()); !st.ok()) Die(st.ToString());
    }
    auto w = OpenStoreWriter(dir);
    if (!w.ok()) Die(w.status().ToString());
    const auto t0 = std::chrono::steady_clock::now();
    SaveOptions o;
    o.step = step;
    o.no_dist = true;
    if (Status st = Save(sd, **w, o); !st.ok()) Die(st.ToString());
    std::printf("saved step %lld: %lld entries x %lld pieces + step_count in %.2f s\n", (long long)step,
                (long long)entries, (long long)pieces,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return 0;
  }
  if (mode != "load") Die("mode is save or load");
  const double rss0 = PeakRssMiB(), cpu0 = CpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  auto r = OpenStoreReader(dir);
  if (!r.ok()) Die(r.status().ToString());
  if (!sd.Add("step_count", Tensor::Zeros(DType::kF32, {4}).value()).ok()) Die("add");
  if (whole != 0) {
    auto md = (*r)->ReadMetadata(step);
    if (!md.ok()) Die(md.status().ToString());
  }
  LoadOptions o;
  o.step = step;
  o.no_dist = true;
  if (Status st = Load(sd, **r, o); !st.ok()) Die(st.ToString());
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Tensor& got = std::get<Tensor>(*sd.Find("step_count"));
  if (std::memcmp(got.data(), counter, sizeof(counter)) != 0) Die("step_count loaded wrong");
  std::printf("load of step_count (16 bytes)%s: %.3f CPU-s, %.3f s wall, peak RSS %.1f MiB (%.1f MiB before)\n",
              whole != 0 ? " after reading the whole metadata" : "", CpuSeconds() - cpu0, wall, PeakRssMiB(), rss0);
  return 0;
}
