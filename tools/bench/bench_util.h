// What the benchmark programs share besides CPU time (cpu_time.h): sizes
// given on their command lines, medians, and the programs they run.
#ifndef CKPTDB_TOOLS_BENCH_BENCH_UTIL_H_
#define CKPTDB_TOOLS_BENCH_BENCH_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "ckptdb/status.h"

namespace ckptdb::bench {

// "1GiB", "256MiB", "64KiB" (or G, M, K), or a plain number of bytes; a
// fraction is allowed ("1.5GiB"). InvalidArgument naming the text for
// another unit or a size that is not positive.
inline StatusOr<uint64_t> ParseSize(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string unit(end);
  double mult = 1;
  if (unit == "K" || unit == "KiB") mult = 1 << 10;
  else if (unit == "M" || unit == "MiB") mult = 1 << 20;
  else if (unit == "G" || unit == "GiB") mult = 1 << 30;
  else if (!unit.empty()) return Status::InvalidArgument("bad size '" + text + "' (e.g. 1GiB, 256MiB)");
  if (v <= 0) return Status::InvalidArgument("size must be positive");
  return static_cast<uint64_t>(v * mult);
}

// The median of `v` (of an even count, the upper middle one); 0 when empty.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The program `name` in the folder of this one (the build's), which the
// benchmarks start: ckptdb-launch, ckptdb, ckptdb-scale-bench.
inline std::string BesideThisProgram(const std::string& name) {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / name).string();
}

}  // namespace ckptdb::bench

#endif  // CKPTDB_TOOLS_BENCH_BENCH_UTIL_H_
