// What the benchmarks measure of this process besides wall time: CPU
// seconds (user + system) of the whole process or of the calling thread,
// and peak resident memory.
#ifndef CKPTDB_TOOLS_BENCH_CPU_TIME_H_
#define CKPTDB_TOOLS_BENCH_CPU_TIME_H_

#include <sys/resource.h>
#include <time.h>

namespace ckptdb::bench {

// Every thread of this process, so far.
inline double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// The calling thread alone, so far.
inline double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

inline double PeakRssMiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
}

}  // namespace ckptdb::bench

#endif  // CKPTDB_TOOLS_BENCH_CPU_TIME_H_
