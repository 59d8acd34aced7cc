// ckptdb-bench: how fast ckptdb saves and loads, as ratios to this
// machine's raw limit measured in the same run.
//
//   ckptdb-bench [--size 1GiB] [--world 2] [--data fp32|bf16|adam|bytes|all]
//                [--compression none|zstd|auto] [--repeat 3] [--dir DIR] [--json]
//                [--chunk-bytes 4MiB] [--invalidate-page-cache]
//
// With --world N it starts N ranks for real (ckptdb-launch, next to this
// binary) and rank 0 reports. Every rank holds size/N bytes: tensors of
// 64 MiB cut into row shards. Phases, each timed on every rank from a
// barrier to a barrier (the job's time), repeated and reported as medians:
//   raw write   each rank writes its bytes to one file and fsyncs it
//   raw read    each rank reads its file back
//   save        Save of a new step
//   load        Load of that step into the same sharding
//   reshard     Load of that step into column shards (every rank reads a
//               slice of every saved piece)
//   async       SaveAsync: how long the caller is blocked, against save
// Page caches are left as they are for every phase alike (warm reads).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ckptdb/ckptdb.h"

using namespace ckptdb;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::cerr << "ckptdb-bench: " << what << "\n";
  std::exit(1);
}
void Check(const Status& st, const std::string& what) {
  if (!st.ok()) Die(what + ": " + st.ToString());
}
template <typename T>
T Must(StatusOr<T> v, const std::string& what) {
  if (!v.ok()) Die(what + ": " + v.status().ToString());
  return std::move(v).value();
}

struct Args {
  uint64_t size = 1ull << 30;
  int world = 2;
  std::vector<std::string> data = {"fp32"};
  Compression compression = Compression::kNone;
  std::string compression_name = "none";
  int repeat = 3;
  std::string dir;
  bool json = false;
  uint64_t chunk_bytes = 0;         // 0: StoreOptions' default
  bool invalidate_page_cache = false;
  bool mmap_reads = true;           // ReaderOptions.mmap_reads
  bool cold = true;                 // also time loads from a dropped page cache
};

uint64_t ParseSize(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string unit(end);
  double mult = 1;
  if (unit == "K" || unit == "KiB") mult = 1024;
  else if (unit == "M" || unit == "MiB") mult = 1 << 20;
  else if (unit == "G" || unit == "GiB") mult = 1 << 30;
  else if (!unit.empty()) Die("bad size '" + s + "' (e.g. 1GiB, 256MiB)");
  if (v <= 0) Die("size must be positive");
  return static_cast<uint64_t>(v * mult);
}

// Fills `t` with values of the named kind (deterministic per seed).
void FillData(const std::string& kind, Tensor& t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t n = t.numel();
  if (kind == "bytes") {
    uint64_t* p = static_cast<uint64_t*>(t.data());
    for (size_t i = 0; i < t.nbytes() / 8; ++i) p[i] = rng();
    return;
  }
  std::normal_distribution<float> g(0.f, kind == "bf16" ? 0.02f : 1.0f);
  if (kind == "bf16") {
    uint16_t* p = t.data_as<uint16_t>();
    for (int64_t i = 0; i < n; ++i) {
      float f = g(rng);
      uint32_t b;
      std::memcpy(&b, &f, 4);
      p[i] = static_cast<uint16_t>((b + 0x7fff + ((b >> 16) & 1)) >> 16);
    }
    return;
  }
  float* p = t.data_as<float>();
  if (kind == "adam") {
    // exp_avg ~ N(0, 1e-3); exp_avg_sq ~ its square: small, positive.
    for (int64_t i = 0; i < n; ++i) {
      float m = g(rng) * 1e-3f;
      p[i] = (i / 4096) % 2 ? m * m : m;
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) p[i] = g(rng);
}

DType DataDType(const std::string& kind) {
  if (kind == "bf16") return DType::kBF16;
  if (kind == "bytes") return DType::kU8;
  return DType::kF32;
}

constexpr int64_t kTensorBytes = 64ll << 20;

// This rank's state dict: tensors of 64 MiB (the last smaller), row-sharded
// over `world` ranks; `zeros` gives an empty target. With `columns`, the
// same tensors sharded by columns.
StateDict MakeState(const std::string& kind, uint64_t total, int rank, int world, bool zeros, bool columns) {
  StateDict sd;
  const DType dt = DataDType(kind);
  const int64_t es = static_cast<int64_t>(DTypeSize(dt));
  const int64_t cols = 1024;
  int64_t left = static_cast<int64_t>(total);
  for (int i = 0; left > 0; ++i) {
    int64_t bytes = std::min(left, kTensorBytes);
    int64_t rows = std::max<int64_t>(1, bytes / (cols * es));
    left -= rows * cols * es;
    auto split = [&](int64_t n, int64_t* b, int64_t* sz) {
      int64_t base = n / world, extra = n % world;
      *b = rank * base + std::min<int64_t>(rank, extra);
      *sz = base + (rank < extra ? 1 : 0);
    };
    int64_t b, sz;
    split(columns ? cols : rows, &b, &sz);
    const Shape local = columns ? Shape{rows, sz} : Shape{sz, cols};
    const std::vector<int64_t> off = columns ? std::vector<int64_t>{0, b} : std::vector<int64_t>{b, 0};
    Tensor t = Must(Tensor::Zeros(dt, local), "allocating");
    if (!zeros) FillData(kind, t, static_cast<uint64_t>(i * 7919 + rank));
    Check(sd.Add("t" + std::to_string(i), Must(ShardedTensor::Create(dt, {rows, cols}, {{off, t}}), "sharding")),
          "adding");
  }
  return sd;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The job's time for one phase: the slowest rank's.
double JobSeconds(Communicator& comm, double mine) {
  std::vector<std::string> all;
  Check(comm.AllGather(std::to_string(mine), &all), "gathering timings");
  double worst = 0;
  for (const std::string& s : all) worst = std::max(worst, std::stod(s));
  return worst;
}

template <typename F>
double Timed(Communicator& comm, F&& f) {
  Check(comm.Barrier(), "barrier");
  auto t0 = Clock::now();
  f();
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return JobSeconds(comm, s);
}

// Empties the page cache (every rank waits for rank 0 to do it), so that the
// next phase reads from the disk, as a job restarting on a fresh machine
// does. Needs root; returns false (on every rank) where it cannot.
bool DropCaches(Communicator& comm) {
  std::string ok = "1";
  if (comm.rank() == 0) {
    ::sync();
    std::FILE* f = std::fopen("/proc/sys/vm/drop_caches", "w");
    ok = f != nullptr && std::fputs("3\n", f) >= 0 && std::fclose(f) == 0 ? "1" : "0";
  }
  Check(comm.Broadcast(&ok, 0), "broadcasting the cache drop");
  return ok == "1";
}

void RawWrite(const std::string& path, const StateDict& sd) {
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  if (fd < 0) Die("cannot create " + path);
  for (const auto& [fqn, e] : sd.entries()) {
    for (const Shard& s : std::get<ShardedTensor>(e).local_shards()) {
      const char* p = static_cast<const char*>(s.tensor.data());
      size_t left = s.tensor.nbytes();
      while (left > 0) {
        ssize_t w = ::write(fd, p, left);
        if (w <= 0) Die("write failed");
        p += w;
        left -= static_cast<size_t>(w);
      }
    }
  }
  if (::fsync(fd) != 0) Die("fsync failed");
  ::close(fd);
}

void RawRead(const std::string& path, StateDict& sd) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) Die("cannot open " + path);
  for (auto& [fqn, e] : sd.mutable_entries()) {
    for (const Shard& s : std::get<ShardedTensor>(e).local_shards()) {
      char* p = static_cast<char*>(s.tensor.data());
      size_t left = s.tensor.nbytes();
      while (left > 0) {
        ssize_t r = ::read(fd, p, left);
        if (r <= 0) Die("read failed");
        p += r;
        left -= static_cast<size_t>(r);
      }
    }
  }
  ::close(fd);
}

struct PhaseResult {
  std::vector<double> seconds;
  uint64_t stored = 0;
};

int Worker(const Args& a) {
  auto config = Must(DistributedConfig::FromEnvironment(), "environment");
  auto comm = Must(ConnectGloo(config), "joining the job");
  DistributedConfig bg = config;
  bg.job_id += "-async";
  auto background = Must(ConnectGloo(bg), "joining the background job");
  const int rank = comm->rank(), world = comm->world_size();
  const std::string store = a.dir + "/store";
  const std::string raw = a.dir + "/raw-" + std::to_string(rank) + ".bin";
  std::map<std::string, std::map<std::string, PhaseResult>> results;  // data -> phase -> result
  int64_t step = 0;

  StoreOptions so;
  so.compression = a.compression;
  if (a.chunk_bytes) so.chunk_bytes = a.chunk_bytes;
  so.sst_invalidate_page_cache = a.invalidate_page_cache;
  auto writer = Must(OpenStoreWriter(store, so), "opening the store");
  for (const std::string& kind : a.data) {
    StateDict state = MakeState(kind, a.size, rank, world, false, false);
    StateDict target = MakeState(kind, a.size, rank, world, true, false);
    StateDict columns = MakeState(kind, a.size, rank, world, true, true);
    auto& r = results[kind];
    // One saver per data kind: its staging memory is allocated by the first
    // save and reused by the next, as in training.
    AsyncSaveOptions ao;
    ao.communicator = background.get();
    AsyncSaver saver(*writer, ao);
    for (int rep = 0; rep < a.repeat; ++rep) {
      r["raw write"].seconds.push_back(Timed(*comm, [&] { RawWrite(raw, state); }));
      r["raw read"].seconds.push_back(Timed(*comm, [&] { RawRead(raw, target); }));
      if (a.cold && DropCaches(*comm)) {
        r["raw read cold"].seconds.push_back(Timed(*comm, [&] { RawRead(raw, target); }));
      }
      std::error_code ec;
      fs::remove(raw, ec);

      SaveOptions o;
      o.step = step;
      o.communicator = comm.get();
      r["save"].seconds.push_back(Timed(*comm, [&] { Check(Save(state, *writer, o), "save"); }));
      LoadOptions lo;
      lo.step = step;
      lo.communicator = comm.get();
      ReaderOptions ro;
      ro.mmap_reads = a.mmap_reads;
      r["load"].seconds.push_back(Timed(*comm, [&] {
        auto reader = Must(OpenStoreReader(store, ro), "reader");
        Check(Load(target, *reader, lo), "load");
      }));
      {
        // Into freshly allocated tensors (their pages fault in on first
        // write), as a restarting job loads.
        StateDict fresh = MakeState(kind, a.size, rank, world, true, false);
        r["load fresh"].seconds.push_back(Timed(*comm, [&] {
          auto reader = Must(OpenStoreReader(store, ro), "reader");
          Check(Load(fresh, *reader, lo), "load into fresh tensors");
        }));
      }
      if (a.cold && DropCaches(*comm)) {
        // From the disk, into fresh tensors: a job restarting on a fresh
        // machine.
        StateDict fresh = MakeState(kind, a.size, rank, world, true, false);
        r["load cold"].seconds.push_back(Timed(*comm, [&] {
          auto reader = Must(OpenStoreReader(store, ro), "reader");
          Check(Load(fresh, *reader, lo), "cold load");
        }));
      }
      r["reshard"].seconds.push_back(Timed(*comm, [&] {
        auto reader = Must(OpenStoreReader(store, ro), "reader");
        Check(Load(columns, *reader, lo), "reshard");
      }));
      if (rep == 0) {
        auto reader = Must(OpenStoreReader(store), "reader");
        auto md = Must(reader->ReadMetadata(step), "metadata");
        r["save"].stored = md.stored_bytes();
        // Correctness: the loaded state is the saved one.
        if (rank == 0) {
          for (const auto& [fqn, e] : state.entries()) {
            const Tensor& want = std::get<ShardedTensor>(e).local_shards()[0].tensor;
            const Tensor& got = std::get<ShardedTensor>(*target.Find(fqn)).local_shards()[0].tensor;
            if (!want.BitwiseEquals(got)) Die("loaded data differs from saved data in " + fqn);
          }
        }
      }
      ++step;
      // Async: how long the caller is blocked.
      {
        double blocked = 0;
        double total = Timed(*comm, [&] {
          auto h = Must(saver.SaveAsync(state, step), "save async");
          blocked = h->blocked_seconds();
          Check(h->Wait(), "async save");
        });
        r["async blocked"].seconds.push_back(JobSeconds(*comm, blocked));
        r["async total"].seconds.push_back(total);
        ++step;
      }
      // Keep the store small: drop what this repetition wrote.
      if (rank == 0) {
        Check(writer->DeleteStep(step - 2), "delete");
        Check(writer->DeleteStep(step - 1), "delete");
      }
      Check(comm->Barrier(), "barrier");
    }
  }
  if (rank != 0) return 0;
  std::FILE* out = std::fopen((a.dir + "/report.txt").c_str(), "w");
  if (out == nullptr) Die("cannot write the report");

  const double logical = static_cast<double>(a.size);
  if (a.json) {
    std::fprintf(out, "{\"size\": %llu, \"world\": %d, \"compression\": \"%s\", \"repeat\": %d, \"results\": [",
                static_cast<unsigned long long>(a.size), world, a.compression_name.c_str(), a.repeat);
    bool first = true;
    for (const auto& [kind, phases] : results) {
      for (const auto& [phase, r] : phases) {
        double med = Median(r.seconds);
        std::fprintf(out, "%s\n {\"data\": \"%s\", \"phase\": \"%s\", \"seconds\": %.4f, \"gb_per_s\": %.3f%s}", first ? "" : ",",
                    kind.c_str(), phase.c_str(), med, logical / med / 1e9,
                    r.stored ? (", \"stored_bytes\": " + std::to_string(r.stored)).c_str() : "");
        first = false;
      }
    }
    std::fprintf(out, "\n]}\n");
    std::fclose(out);
    return 0;
  }
  std::fprintf(out, "ckptdb-bench: %.2f GiB over %d ranks, compression %s, median of %d runs (job time: slowest rank)\n",
              logical / (1 << 30), world, a.compression_name.c_str(), a.repeat);
  for (const auto& [kind, phases] : results) {
    const double raw_w = Median(phases.at("raw write").seconds), raw_r = Median(phases.at("raw read").seconds);
    const double save = Median(phases.at("save").seconds);
    const bool cold = phases.count("load cold") > 0 && phases.count("raw read cold") > 0;
    const double raw_cold = cold ? Median(phases.at("raw read cold").seconds) : 0;
    std::fprintf(out, "\n%-6s %-14s %9s %15s %9s %12s %s\n", kind.c_str(), "phase", "seconds", "min-max", "GB/s",
                "vs raw", "stored/logical");
    for (const char* phase : {"raw write", "raw read", "raw read cold", "save", "load", "load fresh", "load cold",
                              "reshard", "async blocked", "async total"}) {
      if (phases.count(phase) == 0) continue;
      const PhaseResult& r = phases.at(phase);
      double med = Median(r.seconds);
      const double lo = *std::min_element(r.seconds.begin(), r.seconds.end());
      const double hi = *std::max_element(r.seconds.begin(), r.seconds.end());
      char range[48];
      std::snprintf(range, sizeof range, "%.3f-%.3f", lo, hi);
      std::string vs;
      char buf[64];
      if (std::string(phase) == "save" || std::string(phase) == "async total") {
        std::snprintf(buf, sizeof buf, "%.2fx write", raw_w / med);
        vs = buf;
      } else if (std::string(phase) == "load" || std::string(phase) == "load fresh" ||
                 std::string(phase) == "reshard") {
        std::snprintf(buf, sizeof buf, "%.2fx read", raw_r / med);
        vs = buf;
      } else if (std::string(phase) == "load cold") {
        std::snprintf(buf, sizeof buf, "%.2fx cold", raw_cold / med);
        vs = buf;
      } else if (std::string(phase) == "async blocked") {
        std::snprintf(buf, sizeof buf, "%.1f%% of save", 100 * med / save);
        vs = buf;
      }
      std::string ratio;
      if (r.stored) {
        std::snprintf(buf, sizeof buf, "%.3f", r.stored / logical);
        ratio = buf;
      }
      std::fprintf(out, "%-6s %-14s %9.3f %15s %9.3f %12s %s\n", "", phase, med, range, logical / med / 1e9, vs.c_str(),
                  ratio.c_str());
    }
    if (!cold) std::fprintf(out, "%-6s (no cold phases: dropping the page cache needs root)\n", "");
    std::fprintf(out, "%-6s %-14s %9s %15s %9s %12.2f\n", "", "reshard/load", "", "", "",
                Median(phases.at("load").seconds) / Median(phases.at("reshard").seconds));
  }
  std::fclose(out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  bool worker = false;
  std::vector<std::string> forward;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die(s + " needs a value");
      forward.push_back(s);
      forward.push_back(argv[i + 1]);
      return argv[++i];
    };
    if (s == "-h" || s == "--help") {
      std::cout << "usage: ckptdb-bench [--size 1GiB] [--world 2] [--data fp32|bf16|adam|bytes|all]\n"
                   "                    [--compression none|zstd|auto] [--repeat 3] [--dir DIR] [--json]\n"
                   "                    [--chunk-bytes 4MiB] [--invalidate-page-cache] [--no-mmap] [--warm-only]\n\n"
                   "Saves and loads a state dict of --size logical bytes over --world ranks (started\n"
                   "for real through ckptdb-launch) and prints each phase's median job time and\n"
                   "throughput, as ratios to a raw write+fsync and a raw read of the same bytes\n"
                   "measured in the same run, with min-max over the runs. Phases: raw write, raw\n"
                   "read, raw read cold, save, load (same sharding, into tensors loaded before),\n"
                   "load fresh (into freshly allocated tensors), load cold (fresh tensors, page\n"
                   "cache dropped), reshard (load into column shards), async blocked (how long\n"
                   "SaveAsync blocks the caller) and async total. The cold phases drop the page\n"
                   "cache first (as root; skipped, and said so, otherwise; --warm-only skips them),\n"
                   "as a job restarting on a fresh machine meets it. --dir (default: a temporary directory, removed at the end) holds the\n"
                   "store and the raw files. --chunk-bytes and --invalidate-page-cache set the\n"
                   "StoreOptions of the same names, --no-mmap ReaderOptions.mmap_reads = false, to\n"
                   "compare.\n";
      return 0;
    } else if (s == "--size") {
      a.size = ParseSize(next());
    } else if (s == "--world") {
      a.world = std::atoi(next().c_str());
      forward.resize(forward.size() - 2);
    } else if (s == "--data") {
      std::string d = next();
      if (d == "all") a.data = {"fp32", "bf16", "adam", "bytes"};
      else if (d == "fp32" || d == "bf16" || d == "adam" || d == "bytes") a.data = {d};
      else Die("unknown --data '" + d + "'");
    } else if (s == "--compression") {
      a.compression_name = next();
      if (a.compression_name == "none") a.compression = Compression::kNone;
      else if (a.compression_name == "zstd") a.compression = Compression::kZstd;
      else if (a.compression_name == "auto") a.compression = Compression::kAuto;
      else Die("unknown --compression '" + a.compression_name + "'");
    } else if (s == "--chunk-bytes") {
      a.chunk_bytes = ParseSize(next());
    } else if (s == "--invalidate-page-cache") {
      a.invalidate_page_cache = true;
      forward.push_back(s);
    } else if (s == "--no-mmap") {
      a.mmap_reads = false;
      forward.push_back(s);
    } else if (s == "--warm-only") {
      a.cold = false;
      forward.push_back(s);
    } else if (s == "--repeat") {
      a.repeat = std::max(1, std::atoi(next().c_str()));
    } else if (s == "--dir") {
      a.dir = next();
      forward.resize(forward.size() - 2);
    } else if (s == "--json") {
      a.json = true;
      forward.push_back(s);
    } else if (s == "--worker") {
      worker = true;
    } else {
      Die("unknown argument '" + s + "' (see --help)");
    }
  }
  if (worker) return Worker(a);
  if (a.world < 1 || a.world > 256) Die("--world must be in [1, 256]");

  // Start the ranks through ckptdb-launch, next to this binary.
  std::string self = fs::read_symlink("/proc/self/exe").string();
  std::string launch = (fs::path(self).parent_path() / "ckptdb-launch").string();
  std::string dir = a.dir;
  bool temp = dir.empty();
  if (temp) {
    char tmpl[] = "./ckptdb-bench-XXXXXX";
    if (!mkdtemp(tmpl)) Die("cannot create a temporary directory");
    dir = fs::absolute(tmpl).string();
  }
  std::string cmd = launch + " -n " + std::to_string(a.world) + " -- " + self + " --worker --dir " + dir;
  for (const std::string& f : forward) cmd += " '" + f + "'";
  // Rank 0 writes its report to a file, printed here without the
  // launcher's "[rank 0]" prefixes.
  int rc = std::system(cmd.c_str());
  std::FILE* report = std::fopen((dir + "/report.txt").c_str(), "r");
  if (report != nullptr) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, report)) > 0) std::fwrite(buf, 1, n, stdout);
    std::fclose(report);
  }
  if (temp) {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 1;
}
