// ckptdb-export-bench: how fast `ckptdb export` and `ckptdb cat --raw`
// stream a tensor out of a store, against a Load of the same tensor and
// against writing the same bytes (issue 35 item 4).
//
//   ckptdb-export-bench [--size 1GiB] [--repeat 5] [--dir DIR] [--out-dir DIR] [--cli PATH]
//
// One process saves a [1, size/4] fp32 tensor as step 1 of a store in --dir
// (default: a temporary directory under the current one, removed at the
// end), then runs --repeat rounds, each of these in turn (the order rotates
// from round to round so that the machine's noise falls on all alike):
//   load        Load of the tensor into freshly allocated memory (this
//               process; wall and CPU seconds)
//   export      `ckptdb export STORE 1 --format safetensors OUT` (a child
//               process: its wall and CPU seconds; OUT is written and
//               synced, then renamed into place)
//   cat --raw   `ckptdb cat STORE 1 big --raw > OUT` (a child; not synced)
//   raw write   the same bytes written to a file in --out-dir and fsync'd:
//               the least an export there must do
//   raw write nosync  the same, without the fsync: the least cat must do
// OUT lies in --out-dir (default --dir); /dev/shm measures the CLI without
// a disk's write speed in the way. --cli times another build's `ckptdb`
// (default: the one next to this binary). Printed: each phase's median, min-max
// and GB/s, export and cat as ratios to the load's throughput (the aim:
// >= 0.5) and to the raw writes'.
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ckptdb/ckptdb.h"
#include "bench_util.h"
#include "cpu_time.h"

extern char** environ;

using namespace ckptdb;
using ckptdb::bench::Median;
namespace fs = std::filesystem;

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "ckptdb-export-bench: %s\n", what.c_str());
  std::exit(1);
}


using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Sample {
  double seconds = 0;
  double cpu_seconds = 0;
};

// Runs argv with stdout to `out_path` (/dev/null when not given) and returns
// its wall and CPU seconds; dies when it fails.
Sample RunChild(const std::vector<std::string>& argv, const std::string& out_path = "") {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.empty() ? "/dev/null" : out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const auto t0 = Clock::now();
  pid_t pid = 0;
  if (posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ) != 0) Die("cannot start " + argv[0]);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  rusage u{};
  if (wait4(pid, &status, 0, &u) != pid) Die("wait4 failed");
  Sample s;
  s.seconds = Seconds(t0);
  s.cpu_seconds = u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) Die(argv[0] + " " + argv[1] + " failed");
  return s;
}

// Writes `bytes` bytes of `data` to `path` (and fsyncs it when asked).
Sample RawWrite(const std::string& path, const char* data, size_t bytes, bool sync) {
  const double cpu0 = bench::ProcessCpuSeconds();
  const auto t0 = Clock::now();
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  if (fd < 0) Die("cannot create " + path);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t w = ::write(fd, data + done, std::min<size_t>(bytes - done, 64u << 20));
    if (w <= 0) Die("write failed: " + path);
    done += static_cast<size_t>(w);
  }
  if (sync && ::fsync(fd) != 0) Die("fsync failed: " + path);
  ::close(fd);
  return {Seconds(t0), bench::ProcessCpuSeconds() - cpu0};
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t size = 1ull << 30;
  int repeat = 5;
  std::string dir, out_dir, cli;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die(s + " needs a value");
      return argv[++i];
    };
    if (s == "-h" || s == "--help") {
      std::printf(
          "usage: ckptdb-export-bench [--size 1GiB] [--repeat 5] [--dir DIR] [--out-dir DIR] [--cli PATH]\n\n"
          "Saves a [1, size/4] fp32 tensor as step 1 of a store in --dir (default: a\n"
          "temporary directory, removed at the end), then times, round by round in a\n"
          "rotating order: a Load of it into fresh memory; `ckptdb export` of the step\n"
          "to a safetensors file in --out-dir (default --dir; written, synced, renamed);\n"
          "`ckptdb cat STORE 1 big --raw` into a file there; and raw writes of the same\n"
          "bytes to a file there, with and without fsync. Prints medians, min-max and\n"
          "GB/s, and export and cat as ratios to the load's throughput and to the raw\n"
          "writes'. --out-dir /dev/shm takes the disk's write speed out of the way.\n"
          "--cli PATH times that `ckptdb` (another build's, to compare) instead of the\n"
          "one next to this binary.\n");
      return 0;
    } else if (s == "--size") {
      StatusOr<uint64_t> parsed = bench::ParseSize(next());
      if (!parsed.ok()) Die(parsed.status().message());
      size = *parsed / 4 * 4;  // whole fp32 elements
    } else if (s == "--repeat") {
      repeat = std::max(1, std::atoi(next().c_str()));
    } else if (s == "--dir") {
      dir = next();
    } else if (s == "--out-dir") {
      out_dir = next();
    } else if (s == "--cli") {
      cli = fs::absolute(next()).string();
    } else {
      Die("unknown argument '" + s + "' (see --help)");
    }
  }
  const bool temp = dir.empty();
  if (temp) {
    char tmpl[] = "./ckptdb-export-bench-XXXXXX";
    if (!mkdtemp(tmpl)) Die("cannot create a temporary directory");
    dir = fs::absolute(tmpl).string();
  }
  if (out_dir.empty()) out_dir = dir;
  if (cli.empty()) cli = bench::BesideThisProgram("ckptdb");
  const std::string store = dir + "/store", out = out_dir + "/ckptdb-export-bench.out";
  const int64_t n = static_cast<int64_t>(size / 4);

  // The tensor: random fp32 (incompressible enough that `none` and the
  // default compression store alike).
  auto saved = Tensor::Zeros(DType::kF32, {1, n});
  if (!saved.ok()) Die(saved.status().ToString());
  {
    std::mt19937 rng(7);
    std::normal_distribution<float> g(0.f, 1.f);
    float* p = saved->data_as<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = g(rng);
  }
  {
    auto w = OpenStoreWriter(store);
    if (!w.ok()) Die(w.status().ToString());
    StateDict sd;
    if (Status st = sd.Add("big", *saved); !st.ok()) Die(st.ToString());
    SaveOptions o;
    o.step = 1;
    o.no_dist = true;
    if (Status st = Save(sd, **w, o); !st.ok()) Die(st.ToString());
  }

  const std::vector<std::string> phases = {"load", "export", "cat --raw", "raw write", "raw write nosync"};
  std::map<std::string, std::vector<Sample>> results;
  for (int round = 0; round < repeat; ++round) {
    for (size_t k = 0; k < phases.size(); ++k) {
      const std::string& phase = phases[(k + static_cast<size_t>(round)) % phases.size()];
      Sample s;
      if (phase == "load") {
        const double cpu0 = bench::ProcessCpuSeconds();
        const auto t0 = Clock::now();
        auto r = OpenStoreReader(store);
        if (!r.ok()) Die(r.status().ToString());
        StateDict target;
        auto fresh = Tensor::Zeros(DType::kF32, {1, n});  // fresh pages, faulted in by the load
        if (!fresh.ok()) Die(fresh.status().ToString());
        if (Status st = target.Add("big", *fresh); !st.ok()) Die(st.ToString());
        LoadOptions o;
        o.step = 1;
        o.no_dist = true;
        if (Status st = Load(target, **r, o); !st.ok()) Die(st.ToString());
        s = {Seconds(t0), bench::ProcessCpuSeconds() - cpu0};
        if (round == 0 && !fresh->BitwiseEquals(*saved)) Die("the loaded tensor differs from the saved one");
      } else if (phase == "export") {
        s = RunChild({cli, "export", store, "1", "--format", "safetensors", out});
      } else if (phase == "cat --raw") {
        s = RunChild({cli, "cat", store, "1", "big", "--raw"}, out);
        if (fs::file_size(out) != size) Die("cat --raw wrote " + std::to_string(fs::file_size(out)) + " bytes");
      } else {
        s = RawWrite(out, static_cast<const char*>(saved->data()), size, phase == "raw write");
      }
      std::error_code ec;
      fs::remove(out, ec);
      results[phase].push_back(s);
    }
  }

  std::printf("ckptdb-export-bench: a [1, %lld] fp32 tensor (%.2f GiB), store in %s, output in %s, %d rounds, %s\n\n",
              static_cast<long long>(n), size / double(1 << 30), dir.c_str(), out_dir.c_str(), repeat, cli.c_str());
  std::printf("%-17s %9s %15s %8s %9s %15s\n", "phase", "seconds", "min-max", "GB/s", "CPU s", "CPU min-max");
  std::map<std::string, double> med;
  for (const std::string& phase : phases) {
    std::vector<double> t, c;
    for (const Sample& s : results[phase]) {
      t.push_back(s.seconds);
      c.push_back(s.cpu_seconds);
    }
    med[phase] = Median(t);
    char tr[40], cr[40];
    std::snprintf(tr, sizeof tr, "%.3f-%.3f", *std::min_element(t.begin(), t.end()), *std::max_element(t.begin(), t.end()));
    std::snprintf(cr, sizeof cr, "%.3f-%.3f", *std::min_element(c.begin(), c.end()), *std::max_element(c.begin(), c.end()));
    std::printf("%-17s %9.3f %15s %8.3f %9.3f %15s\n", phase.c_str(), med[phase], tr, size / med[phase] / 1e9,
                Median(c), cr);
  }
  std::printf("\nexport:    %.2fx the load's throughput (aim >= 0.5), %.2fx a raw write+fsync's\n",
              med["load"] / med["export"], med["raw write"] / med["export"]);
  std::printf("cat --raw: %.2fx the load's throughput (aim >= 0.5), %.2fx a raw write's (no fsync)\n",
              med["load"] / med["cat --raw"], med["raw write nosync"] / med["cat --raw"]);
  if (temp) {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  return 0;
}
