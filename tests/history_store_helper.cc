// Builds a store with many steps of many tiny entries through the real save
// path, for the `ckptdb ls` benchmark and for trying the CLI by hand:
//   ckptdb_history_store STORE STEPS ENTRIES
// Each step holds ENTRIES f32 tensors of 4 elements; the values depend on
// the step. Prints the time it took.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ckptdb/ckptdb.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s STORE STEPS ENTRIES\n", argv[0]);
    return 2;
  }
  const std::string store = argv[1];
  const int64_t steps = std::atoll(argv[2]);
  const int entries = std::atoi(argv[3]);
  auto w = ckptdb::OpenStoreWriter(store);
  if (!w.ok()) {
    std::fprintf(stderr, "%s\n", w.status().ToString().c_str());
    return 1;
  }
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    ckptdb::StateDict sd;
    for (int e = 0; e < entries; ++e) {
      float v[4] = {static_cast<float>(s), static_cast<float>(e), 0.5f, -1.0f};
      auto t = ckptdb::Tensor::Copy(ckptdb::DType::kF32, {4}, v, sizeof v);
      ckptdb::Status st = sd.Add("layers." + std::to_string(e) + ".weight", std::move(t).value());
      if (!st.ok()) return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;
    }
    ckptdb::SaveOptions so;
    so.step = s;
    so.no_dist = true;
    ckptdb::Status st = ckptdb::Save(sd, **w, so);
    if (!st.ok()) return std::fprintf(stderr, "step %lld: %s\n", static_cast<long long>(s), st.ToString().c_str()), 1;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%lld steps of %d entries in %.1f s\n", static_cast<long long>(steps), entries, secs);
  return 0;
}
