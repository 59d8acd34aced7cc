// ckptdb-bench: how fast ckptdb saves and loads, as ratios to this
// machine's raw limit measured in the same run.
//
//   ckptdb-bench [--size 1GiB] [--world 2] [--data fp32|bf16|adam|optim|bytes|all]
//                [--compression none|zstd|auto] [--repeat 3] [--dir DIR] [--json]
//                [--chunk-bytes 4MiB] [--invalidate-page-cache] [--cols 1024]
//                [--chunk-layout boxes|rows]
//   ckptdb-bench --scenario finetune [--size 1GiB] [--world 2] [--repeat 3] ...
//   ckptdb-bench --scenario hosts [--size 1GiB] [--world 2] [--repeat 3] [--local-dir DIR] ...
//   ckptdb-bench --scenario control [--world 8,64,512] [--entries 20] ...  (ckptdb-scale-bench)
//
// With --world N it starts N ranks for real (ckptdb-launch, next to this
// binary) and rank 0 reports. Every rank holds size/N bytes: tensors of
// 64 MiB cut into row shards. Phases, each timed on every rank from a
// barrier to a barrier (the job's time), repeated and reported as medians:
//   raw write   each rank writes its bytes to one file and fsyncs it
//   raw read    each rank reads its file back
//   save        Save of a new step; also its CPU seconds, all ranks' processes
//               summed ("save CPU": steadier than time on a shared machine)
//   load        Load of that step into the same sharding
//   reshard     Load of that step into column shards (every rank reads a
//               slice of every saved piece)
//   async       SaveAsync: how long the caller is blocked, against save
// Page caches are left as they are for every phase alike (warm reads).
//
// --scenario finetune measures deduplication across steps instead (see
// FinetuneWorker below and --help); --scenario hosts a store every rank sees
// against one on the coordinator's host only (HostsWorker; on several hosts
// through tools/bench-hosts.sh).
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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
#include "bench_util.h"
#include "cpu_time.h"

using namespace ckptdb;
using ckptdb::bench::Median;
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

constexpr int64_t kTensorBytes = 64ll << 20;

struct Args {
  uint64_t size = 1ull << 30;
  int64_t tensor_bytes = kTensorBytes;  // --tensor-bytes: the most bytes of one entry
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
  bool finetune = false;            // --scenario finetune
  bool hosts = false;               // --scenario hosts
  std::string local_dir;            // --local-dir (--scenario hosts)
  std::string store;                // --store (the default scenario): where the store is
  bool data_given = false;          // --data was given
  int64_t cols = 1024;              // --cols: columns of every tensor
  ChunkLayout chunk_layout = ChunkLayout::kBoxes;  // --chunk-layout
  std::string chunk_layout_name = "boxes";
};

uint64_t ParseSize(const std::string& s) {
  StatusOr<uint64_t> size = bench::ParseSize(s);
  if (!size.ok()) Die(size.status().message());
  return *size;
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

// The tensors an entry holds on this rank: a sharded tensor's local shards,
// or a plain (replicated) tensor.
std::vector<const Tensor*> LocalTensors(const Entry& e) {
  std::vector<const Tensor*> out;
  if (const auto* t = std::get_if<Tensor>(&e)) out.push_back(t);
  if (const auto* st = std::get_if<ShardedTensor>(&e)) {
    for (const Shard& s : st->local_shards()) out.push_back(&s.tensor);
  }
  return out;
}

DType DataDType(const std::string& kind) {
  if (kind == "bf16") return DType::kBF16;
  if (kind == "bytes") return DType::kU8;
  return DType::kF32;
}


// Rank `rank`'s part of n rows (or columns) cut over `world` ranks: its first
// one and how many.
void Split(int64_t n, int rank, int world, int64_t* begin, int64_t* size) {
  const int64_t base = n / world, extra = n % world;
  *begin = rank * base + std::min<int64_t>(rank, extra);
  *size = base + (rank < extra ? 1 : 0);
}

// This rank's state dict: tensors of 64 MiB (the last smaller) with `cols`
// columns, row-sharded over `world` ranks; `zeros` gives an empty target. With `columns`, the
// same tensors sharded by columns.
StateDict MakeState(const std::string& kind, uint64_t total, int rank, int world, bool zeros, bool columns,
                    int64_t tensor_bytes = kTensorBytes, int64_t cols = 1024) {
  StateDict sd;
  const DType dt = DataDType(kind);
  const int64_t es = static_cast<int64_t>(DTypeSize(dt));
  int64_t left = static_cast<int64_t>(total);
  for (int i = 0; left > 0; ++i) {
    int64_t bytes = std::min(left, tensor_bytes);
    int64_t rows = std::max<int64_t>(1, bytes / (cols * es));
    left -= rows * cols * es;
    int64_t b, sz;
    Split(columns ? cols : rows, rank, world, &b, &sz);
    const Shape local = columns ? Shape{rows, sz} : Shape{sz, cols};
    const std::vector<int64_t> off = columns ? std::vector<int64_t>{0, b} : std::vector<int64_t>{b, 0};
    Tensor t = Must(Tensor::Zeros(dt, local), "allocating");
    if (!zeros) FillData(kind, t, static_cast<uint64_t>(i * 7919 + rank));
    Check(sd.Add("t" + std::to_string(i), Must(ShardedTensor::Create(dt, {rows, cols}, {{off, t}}), "sharding")),
          "adding");
    if (kind == "optim") {
      // An optimizer's state: besides each tensor, a scalar of its own
      // (Adam's "step"), held whole by every rank.
      Tensor step_count = Must(Tensor::Zeros(DType::kF32, Shape{}), "allocating");
      if (!zeros) *step_count.data_as<float>() = static_cast<float>(1000 + i);
      Check(sd.Add("t" + std::to_string(i) + ".step", std::move(step_count)), "adding");
    }
  }
  return sd;
}

// Dies with `what` naming the first entry whose local shard differs.
void ExpectSameShards(const StateDict& saved, const StateDict& loaded, const std::string& what) {
  for (const auto& [fqn, e] : saved.entries()) {
    const Tensor& want = *LocalTensors(e)[0];
    const Tensor& got = *LocalTensors(*loaded.Find(fqn))[0];
    if (!want.BitwiseEquals(got)) Die(what + " in " + fqn);
  }
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

using bench::ProcessCpuSeconds;

// Like Timed, and adds to *cpu_seconds the CPU time every rank's process
// spent in f (summed over the ranks): where all ranks share a machine's
// cores, wall time >= that sum / cores, whatever the scheduling.
template <typename F>
double TimedWithCpu(Communicator& comm, double* cpu_seconds, F&& f) {
  const double c0 = ProcessCpuSeconds();
  const double wall = Timed(comm, f);
  std::vector<std::string> all;
  Check(comm.AllGather(std::to_string(ProcessCpuSeconds() - c0), &all), "gathering CPU times");
  double sum = 0;
  for (const std::string& s : all) sum += std::stod(s);
  *cpu_seconds = sum;
  return wall;
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
    for (const Tensor* t : LocalTensors(e)) {
      const char* p = static_cast<const char*>(t->data());
      size_t left = t->nbytes();
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
    for (const Tensor* t : LocalTensors(e)) {
      char* p = static_cast<char*>(t->data());
      size_t left = t->nbytes();
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

// The StoreOptions that --compression, --chunk-bytes and
// --invalidate-page-cache ask for.
StoreOptions BaseStoreOptions(const Args& a) {
  StoreOptions so;
  // Each repetition saves the same bytes as a new step: with deduplication
  // those saves would write nothing. Every save here writes every byte, as
  // a step of full training does (--scenario finetune measures
  // deduplication, and its cost when every byte changes).
  so.deduplicate = false;
  so.compression = a.compression;
  if (a.chunk_bytes) so.chunk_bytes = a.chunk_bytes;
  so.chunk_layout = a.chunk_layout;
  so.sst_invalidate_page_cache = a.invalidate_page_cache;
  return so;
}

struct PhaseResult {
  std::vector<double> seconds;
  std::vector<double> cpu_seconds;  // save and load: CPU time of every rank, summed
  uint64_t stored = 0;
  double amplification = 0;  // reshard: bytes of the chunks read / bytes loaded
};

int Worker(const Args& a) {
  auto config = Must(DistributedConfig::FromEnvironment(), "environment");
  auto comm = Must(ConnectGloo(config), "joining the job");
  DistributedConfig bg = config;
  bg.job_id += "-async";
  auto background = Must(ConnectGloo(bg), "joining the background job");
  const int rank = comm->rank(), world = comm->world_size();
  const std::string store = a.store.empty() ? a.dir + "/store" : a.store;
  const std::string raw = a.dir + "/raw-" + std::to_string(rank) + ".bin";
  std::map<std::string, std::map<std::string, PhaseResult>> results;  // data -> phase -> result
  int64_t step = 0;

  auto writer = Must(OpenStoreWriter(store, BaseStoreOptions(a)), "opening the store");
  for (const std::string& kind : a.data) {
    StateDict state = MakeState(kind, a.size, rank, world, false, false, a.tensor_bytes, a.cols);
    StateDict target = MakeState(kind, a.size, rank, world, true, false, a.tensor_bytes, a.cols);
    StateDict columns = MakeState(kind, a.size, rank, world, true, true, a.tensor_bytes, a.cols);
    // Their pages touched once: "raw read", "load" and "reshard" all fill
    // memory already in place ("load fresh" and "load cold" measure fresh
    // tensors), also in the first run and with --repeat 1.
    for (StateDict* sd : {&target, &columns}) {
      for (auto& [fqn, e] : sd->mutable_entries()) {
        for (const Tensor* t : LocalTensors(e)) std::memset(t->data(), 0, t->nbytes());
      }
    }
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
      double save_cpu = 0;
      r["save"].seconds.push_back(TimedWithCpu(*comm, &save_cpu, [&] { Check(Save(state, *writer, o), "save"); }));
      r["save"].cpu_seconds.push_back(save_cpu);
      LoadOptions lo;
      lo.step = step;
      lo.communicator = comm.get();
      ReaderOptions ro;
      ro.mmap_reads = a.mmap_reads;
      double load_cpu = 0;
      r["load"].seconds.push_back(TimedWithCpu(*comm, &load_cpu, [&] {
        auto reader = Must(OpenStoreReader(store, ro), "reader");
        Check(Load(target, *reader, lo), "load");
      }));
      r["load"].cpu_seconds.push_back(load_cpu);
      {
        // Into freshly allocated tensors (their pages fault in on first
        // write), as a restarting job loads.
        StateDict fresh = MakeState(kind, a.size, rank, world, true, false, a.tensor_bytes, a.cols);
        r["load fresh"].seconds.push_back(Timed(*comm, [&] {
          auto reader = Must(OpenStoreReader(store, ro), "reader");
          Check(Load(fresh, *reader, lo), "load into fresh tensors");
        }));
      }
      if (a.cold && DropCaches(*comm)) {
        // From the disk, into fresh tensors: a job restarting on a fresh
        // machine.
        StateDict fresh = MakeState(kind, a.size, rank, world, true, false, a.tensor_bytes, a.cols);
        r["load cold"].seconds.push_back(Timed(*comm, [&] {
          auto reader = Must(OpenStoreReader(store, ro), "reader");
          Check(Load(fresh, *reader, lo), "cold load");
        }));
      }
      LoadStats reshard_stats;
      r["reshard"].seconds.push_back(Timed(*comm, [&] {
        auto reader = Must(OpenStoreReader(store, ro), "reader");
        Check(Load(columns, *reader, lo, &reshard_stats), "reshard");
      }));
      // Read amplification: raw bytes of the chunks read / bytes loaded (this
      // rank's; every rank reads alike).
      r["reshard"].amplification = static_cast<double>(reshard_stats.raw_bytes_read) /
                                   static_cast<double>(std::max<uint64_t>(1, reshard_stats.bytes_copied));
      if (rep == 0) {
        auto reader = Must(OpenStoreReader(store), "reader");
        auto md = Must(reader->ReadMetadata(step), "metadata");
        r["save"].stored = md.stored_bytes();
        // Correctness: the loaded state is the saved one.
        if (rank == 0) ExpectSameShards(state, target, "loaded data differs from saved data");
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
        std::string extra = r.stored ? ", \"stored_bytes\": " + std::to_string(r.stored) : "";
        if (r.amplification > 0) extra += ", \"amplification\": " + std::to_string(r.amplification);
        if (!r.cpu_seconds.empty()) extra += ", \"cpu_seconds\": " + std::to_string(Median(r.cpu_seconds));
        std::fprintf(out, "%s\n {\"data\": \"%s\", \"phase\": \"%s\", \"seconds\": %.4f, \"gb_per_s\": %.3f%s}",
                    first ? "" : ",", kind.c_str(), phase.c_str(), med, logical / med / 1e9, extra.c_str());
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
    if (!cold) {
      std::fprintf(out, "%-6s (no cold phases: %s)\n", "",
                   a.cold ? "dropping the page cache needs root" : "--warm-only");
    }
    const std::vector<double>& save_cpu = phases.at("save").cpu_seconds;
    std::fprintf(out, "%-6s %-14s %9.3f %7.3f-%-7.3f %9s %12.2f  (CPU s of all ranks; ns per logical byte)\n", "",
                 "save CPU", Median(save_cpu), *std::min_element(save_cpu.begin(), save_cpu.end()),
                 *std::max_element(save_cpu.begin(), save_cpu.end()), "", Median(save_cpu) / logical * 1e9);
    const std::vector<double>& load_cpu = phases.at("load").cpu_seconds;
    std::fprintf(out, "%-6s %-14s %9.3f %7.3f-%-7.3f %9s %12.2f  (CPU s of all ranks; ns per logical byte)\n", "",
                 "load CPU", Median(load_cpu), *std::min_element(load_cpu.begin(), load_cpu.end()),
                 *std::max_element(load_cpu.begin(), load_cpu.end()), "", Median(load_cpu) / logical * 1e9);
    std::fprintf(out, "%-6s %-14s %9s %15s %9s %12.2f\n", "", "reshard/load", "", "", "",
                Median(phases.at("load").seconds) / Median(phases.at("reshard").seconds));
    std::fprintf(out, "%-6s %-14s %9s %15s %9s %12.2f  (chunk bytes read / bytes loaded, rank 0)\n", "",
                "reshard reads", "", "", "", phases.at("reshard").amplification);
  }
  std::fclose(out);
  return 0;
}

// --scenario finetune --------------------------------------------------------
//
// Deduplication across steps (StoreOptions::deduplicate), measured as a
// fine-tuning job meets it: bf16 weights of which the first 2% of the tensors
// train and the rest stay frozen, plus f32 Adam moments (exp_avg, exp_avg_sq)
// for the trainable tensors only. kFinetuneSteps steps are saved into two
// fresh stores, one deduplicating and one not, interleaved step by step (the
// same content, so that the machine's noise falls on both alike). Then the
// same for full training, where every byte changes every step.

constexpr int64_t kFinetuneCols = 1024;
constexpr double kTrainableFraction = 0.02;
constexpr int kFinetuneSteps = 10;

// splitmix64's finaliser: cheap, deterministic and incompressible.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Fills `t` with content of its own for every (seed, step): a word counter
// XOR a key, mixed.
void FillStep(const Tensor& t, uint64_t seed, int64_t step) {
  const uint64_t key = Mix(Mix(seed) ^ static_cast<uint64_t>(step));
  char* p = static_cast<char*>(t.data());
  const size_t n = t.nbytes(), words = n / 8;
  for (size_t i = 0; i < words; ++i) {
    const uint64_t v = Mix(key ^ i);
    std::memcpy(p + 8 * i, &v, 8);
  }
  for (size_t i = words * 8; i < n; ++i) p[i] = static_cast<char>(Mix(key ^ i));
}

// This rank's shards of the fine-tuning state dict, row-sharded over `world`
// ranks: "model.layers.<i>.weight" (bf16, [rows, 1024], at most 64 MiB per
// tensor; the first ones trainable, 2% of the rows) and
// "optim.state.<i>.exp_avg" / ".exp_avg_sq" (f32, the shape of trainable
// weight i).
struct FinetuneModel {
  StateDict state;
  std::vector<Tensor> trainable;  // trainable weights and their moments: they change every step
  std::vector<Tensor> frozen;
  uint64_t weight_bytes = 0;     // the whole job's: bf16 weights
  uint64_t trainable_bytes = 0;  // the whole job's: trainable weights
  uint64_t changed_bytes = 0;    // the whole job's: trainable weights and their moments
  uint64_t logical_bytes = 0;    // the whole job's: the step
};

FinetuneModel MakeFinetuneModel(uint64_t weight_bytes, int rank, int world) {
  const int64_t row_bytes = kFinetuneCols * static_cast<int64_t>(DTypeSize(DType::kBF16));
  const int64_t rows = std::max<int64_t>(2, static_cast<int64_t>(weight_bytes) / row_bytes);
  const int64_t trainable_rows =
      std::clamp<int64_t>(std::llround(kTrainableFraction * static_cast<double>(rows)), 1, rows - 1);
  const int64_t rows_per_tensor = kTensorBytes / row_bytes;
  FinetuneModel m;
  auto add = [&](const std::string& fqn, DType dt, int64_t n, std::vector<Tensor>* group) {
    int64_t b, sz;
    Split(n, rank, world, &b, &sz);
    Tensor t = Must(Tensor::Zeros(dt, {sz, kFinetuneCols}), "allocating");
    Check(m.state.Add(fqn, Must(ShardedTensor::Create(dt, {n, kFinetuneCols}, {{{b, 0}, t}}), "sharding")),
          "adding");
    group->push_back(t);
    const uint64_t bytes = static_cast<uint64_t>(n * kFinetuneCols) * DTypeSize(dt);
    m.logical_bytes += bytes;
    return bytes;
  };
  int i = 0;
  for (int64_t left = trainable_rows; left > 0; ++i) {
    const int64_t n = std::min(left, rows_per_tensor);
    left -= n;
    const std::string id = std::to_string(i);
    const uint64_t w = add("model.layers." + id + ".weight", DType::kBF16, n, &m.trainable);
    m.weight_bytes += w;
    m.trainable_bytes += w;
    m.changed_bytes += w;
    m.changed_bytes += add("optim.state." + id + ".exp_avg", DType::kF32, n, &m.trainable);
    m.changed_bytes += add("optim.state." + id + ".exp_avg_sq", DType::kF32, n, &m.trainable);
  }
  for (int64_t left = rows - trainable_rows; left > 0; ++i) {
    const int64_t n = std::min(left, rows_per_tensor);
    left -= n;
    m.weight_bytes += add("model.layers." + std::to_string(i) + ".weight", DType::kBF16, n, &m.frozen);
  }
  return m;
}

// The same entries, zero-filled: a load target.
StateDict ZeroLike(const StateDict& sd) {
  StateDict out;
  for (const auto& [fqn, e] : sd.entries()) {
    const ShardedTensor& st = std::get<ShardedTensor>(e);
    const Shard& s = st.local_shards()[0];
    Tensor t = Must(Tensor::Zeros(s.tensor.dtype(), s.tensor.shape()), "allocating");
    Check(out.Add(fqn, Must(ShardedTensor::Create(st.dtype(), st.global_shape(), {{s.offsets, t}}), "sharding")),
          "adding");
  }
  return out;
}

// One step of a case, saved with deduplication on and off.
struct DedupStep {
  double on_s = 0, off_s = 0;          // job time of the save
  double on_added = 0, off_added = 0;  // bytes the step added / its logical bytes (ListSteps)
  uint64_t logical = 0;                // ListSteps' logical_bytes
};

// Saves kFinetuneSteps steps of `state` into two fresh stores under
// a.dir/<name>-dedup-on and -off, interleaved: on then off on even steps, off
// then on on odd ones. change(k) sets step k's content, untimed, before both
// saves of step k. Dirty pages are written back (sync) before every save,
// untimed. With `verify`, the last step of the deduplicating store
// is loaded back and must match bit for bit. The stores are removed at the
// end.
template <typename F>
std::vector<DedupStep> RunDedupCase(Communicator& comm, const Args& a, const std::string& name,
                                    const StateDict& state, F&& change, bool verify) {
  const std::string dirs[2] = {a.dir + "/" + name + "-dedup-on", a.dir + "/" + name + "-dedup-off"};
  std::unique_ptr<StoreWriter> writers[2];
  for (int d = 0; d < 2; ++d) {
    StoreOptions so = BaseStoreOptions(a);
    so.deduplicate = d == 0;
    writers[d] = Must(OpenStoreWriter(dirs[d], so), "opening the store " + dirs[d]);
  }
  std::vector<DedupStep> steps(kFinetuneSteps);
  for (int k = 0; k < kFinetuneSteps; ++k) {
    change(k);
    SaveOptions o;
    o.step = k;
    o.communicator = &comm;
    for (int i = 0; i < 2; ++i) {
      const int d = (k + i) % 2;  // 0: dedup on
      // Untimed: the write-back of earlier saves, so that no save pays for
      // the one before it (which one that is alternates).
      ::sync();
      const double s = Timed(comm, [&] { Check(Save(state, *writers[d], o), "save (" + name + ")"); });
      (d == 0 ? steps[k].on_s : steps[k].off_s) = s;
    }
  }
  for (int d = 0; d < 2; ++d) {
    auto reader = Must(OpenStoreReader(dirs[d]), "reader");
    const std::vector<StepInfo> listed = Must(reader->ListSteps(), "listing steps");
    if (listed.size() != steps.size()) Die("store " + dirs[d] + " lists " + std::to_string(listed.size()) + " steps");
    for (const StepInfo& si : listed) {
      DedupStep& s = steps.at(static_cast<size_t>(si.step));
      (d == 0 ? s.on_added : s.off_added) =
          static_cast<double>(si.stored_bytes) / static_cast<double>(std::max<uint64_t>(1, si.logical_bytes));
      s.logical = si.logical_bytes;
    }
  }
  if (verify) {
    // Correctness: the last step, most of whose chunks the deduplicating
    // store shares with earlier steps, loads back as saved.
    StateDict target = ZeroLike(state);
    LoadOptions lo;
    lo.step = kFinetuneSteps - 1;
    lo.communicator = &comm;
    auto reader = Must(OpenStoreReader(dirs[0]), "reader");
    Check(Load(target, *reader, lo), "load (" + name + ")");
    ExpectSameShards(state, target, "step loaded from the deduplicating store differs from the saved one");
  }
  writers[0].reset();
  writers[1].reset();
  Check(comm.Barrier(), "barrier");
  if (comm.rank() == 0) {
    for (const std::string& d : dirs) {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  }
  Check(comm.Barrier(), "barrier");
  return steps;
}

struct Spread {
  double median = 0, lo = 0, hi = 0;
};
Spread SpreadOf(const std::vector<double>& v) {
  if (v.empty()) return {};
  return {Median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

// A figure of every step k in [first, last] of every round.
template <typename F>
Spread Over(const std::vector<std::vector<DedupStep>>& rounds, int first, int last, F&& figure) {
  std::vector<double> v;
  for (const auto& r : rounds) {
    for (int k = first; k <= last; ++k) v.push_back(figure(r[static_cast<size_t>(k)]));
  }
  return SpreadOf(v);
}

double OnOff(const DedupStep& s) { return s.on_s / s.off_s; }
double OnSeconds(const DedupStep& s) { return s.on_s; }
double OffSeconds(const DedupStep& s) { return s.off_s; }
double OnAdded(const DedupStep& s) { return s.on_added; }
double OffAdded(const DedupStep& s) { return s.off_added; }

// "1.00 GiB", "20.5 MiB".
std::string MiB(uint64_t bytes) {
  char buf[32];
  if (bytes >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// One case's table: every step (medians over the rounds), then the figures
// over steps 1..9 of every round, against the aims.
void PrintDedupCase(std::FILE* out, const std::vector<std::vector<DedupStep>>& rounds, bool finetune,
                    double changed_fraction) {
  std::fprintf(out, "%-6s %9s %9s %9s %18s %19s\n", "step", "on s", "off s", "on/off", "added/logical on",
               "added/logical off");
  for (int k = 0; k < kFinetuneSteps; ++k) {
    std::fprintf(out, "%-6d %9.3f %9.3f %9.3f %18.4f %19.4f%s\n", k, Over(rounds, k, k, OnSeconds).median,
                 Over(rounds, k, k, OffSeconds).median, Over(rounds, k, k, OnOff).median,
                 Over(rounds, k, k, OnAdded).median, Over(rounds, k, k, OffAdded).median,
                 k == 0 ? "   (full write)" : "");
  }
  const int last = kFinetuneSteps - 1;
  char title[64];
  std::snprintf(title, sizeof title, "steps 1-%d of %zu round(s) (%zu saves each)", last, rounds.size(),
                rounds.size() * static_cast<size_t>(last));
  std::fprintf(out, "\n%-42s %9s %17s  %s\n", title, "median", "min-max", "aim");
  auto row = [&](const char* what, const Spread& s, const char* fmt, double aim, const char* note) {
    char med[32], range[48], verdict[64] = "";
    std::snprintf(med, sizeof med, fmt, s.median);
    std::string f = std::string(fmt) + "-" + fmt;
    std::snprintf(range, sizeof range, f.c_str(), s.lo, s.hi);
    if (aim > 0) std::snprintf(verdict, sizeof verdict, "  <= %.2f %s", aim, s.median <= aim ? "met" : "NOT met");
    std::fprintf(out, "%-42s %9s %17s%s%s\n", what, med, range, verdict, note);
  };
  row("save dedup on (s)", Over(rounds, 1, last, OnSeconds), "%.3f", 0, "");
  row("save dedup off (s)", Over(rounds, 1, last, OffSeconds), "%.3f", 0, "");
  row("save time dedup on / off", Over(rounds, 1, last, OnOff), "%.3f", finetune ? 0.25 : 1.03, "");
  if (finetune) {
    char note[96];
    std::snprintf(note, sizeof note, " (bytes changed: %.4f of the step)", changed_fraction);
    row("bytes added / logical step, dedup on", Over(rounds, 1, last, OnAdded), "%.4f", 0.05, note);
  } else {
    row("bytes added / logical step, dedup on", Over(rounds, 1, last, OnAdded), "%.4f", 0, "");
  }
  row("bytes added / logical step, dedup off", Over(rounds, 1, last, OffAdded), "%.4f", 0, "");
  row("step 0 (full write): save time on / off", Over(rounds, 0, 0, OnOff), "%.3f", 0, "");
}

void JsonSpread(std::FILE* out, const char* name, const Spread& s, bool comma = true) {
  std::fprintf(out, "\"%s\": {\"median\": %.6g, \"min\": %.6g, \"max\": %.6g}%s", name, s.median, s.lo, s.hi,
               comma ? ", " : "");
}

int FinetuneWorker(const Args& a) {
  auto config = Must(DistributedConfig::FromEnvironment(), "environment");
  auto comm = Must(ConnectGloo(config), "joining the job");
  const int rank = comm->rank(), world = comm->world_size();
  FinetuneModel m = MakeFinetuneModel(a.size, rank, world);
  // Tensor i of a group gets content of its own per rank and step.
  auto fill = [&](const std::vector<Tensor>& group, uint64_t group_id, int64_t step) {
    for (size_t i = 0; i < group.size(); ++i) {
      FillStep(group[i], (static_cast<uint64_t>(rank) << 32) | (group_id << 24) | i, step);
    }
  };
  std::vector<std::vector<DedupStep>> finetune, full;
  for (int round = 0; round < a.repeat; ++round) {
    // Fine-tuning: step 0 writes everything, then only the trainable
    // weights and their moments change.
    finetune.push_back(RunDedupCase(
        *comm, a, "finetune", m.state,
        [&](int k) {
          fill(m.trainable, 0, k);
          if (k == 0) fill(m.frozen, 1, 0);
        },
        round == 0));
    // Full training: every byte changes every step.
    full.push_back(RunDedupCase(
        *comm, a, "full", m.state,
        [&](int k) {
          fill(m.trainable, 0, kFinetuneSteps + k);
          fill(m.frozen, 1, kFinetuneSteps + k);
        },
        false));
  }
  if (rank != 0) return 0;
  const uint64_t logical = finetune[0][0].logical;
  if (logical != m.logical_bytes) {
    Die("the store lists " + std::to_string(logical) + " logical bytes per step, the model has " +
        std::to_string(m.logical_bytes));
  }
  const double changed = static_cast<double>(m.changed_bytes) / static_cast<double>(logical);
  const uint64_t chunk = a.chunk_bytes ? a.chunk_bytes : StoreOptions().chunk_bytes;
  const int last = kFinetuneSteps - 1;
  std::FILE* out = std::fopen((a.dir + "/report.txt").c_str(), "w");
  if (out == nullptr) Die("cannot write the report");
  if (a.json) {
    std::fprintf(out,
                 "{\"scenario\": \"finetune\", \"weight_bytes\": %llu, \"trainable_bytes\": %llu, "
                 "\"changed_bytes\": %llu, \"logical_step_bytes\": %llu, \"world\": %d, \"compression\": \"%s\", "
                 "\"chunk_bytes\": %llu, \"steps\": %d, \"rounds\": %d, \"cases\": {",
                 static_cast<unsigned long long>(m.weight_bytes), static_cast<unsigned long long>(m.trainable_bytes),
                 static_cast<unsigned long long>(m.changed_bytes), static_cast<unsigned long long>(logical), world,
                 a.compression_name.c_str(), static_cast<unsigned long long>(chunk), kFinetuneSteps, a.repeat);
    for (int c = 0; c < 2; ++c) {
      const auto& rounds = c == 0 ? finetune : full;
      std::fprintf(out, "%s\n \"%s\": {", c ? "," : "", c == 0 ? "finetune" : "full");
      JsonSpread(out, "save_on_off", Over(rounds, 1, last, OnOff));
      JsonSpread(out, "save_on_seconds", Over(rounds, 1, last, OnSeconds));
      JsonSpread(out, "save_off_seconds", Over(rounds, 1, last, OffSeconds));
      JsonSpread(out, "added_fraction_on", Over(rounds, 1, last, OnAdded));
      JsonSpread(out, "added_fraction_off", Over(rounds, 1, last, OffAdded));
      JsonSpread(out, "step0_save_on_off", Over(rounds, 0, 0, OnOff), false);
      std::fprintf(out, "}");
    }
    std::fprintf(out, "\n}}\n");
    std::fclose(out);
    return 0;
  }
  std::fprintf(out,
               "ckptdb-bench --scenario finetune: %s of bf16 weights over %d rank(s), compression %s, "
               "chunks of %s\n",
               MiB(m.weight_bytes).c_str(), world, a.compression_name.c_str(), MiB(chunk).c_str());
  std::fprintf(out,
               "%d steps per store, %d round(s); each step saved into a deduplicating store and a non-deduplicating "
               "one,\ninterleaved (on first on even steps, off first on odd ones); job time (slowest rank, barrier to "
               "barrier);\nper-step rows: medians over the rounds; added/logical: ListSteps stored_bytes / "
               "logical_bytes\n",
               kFinetuneSteps, a.repeat);
  std::fprintf(out,
               "\nfine-tuning: %.2f%% of the weights train (%s bf16) with f32 exp_avg + exp_avg_sq (%s); logical step "
               "%s,\nof which %s (%.4f) change every step\n",
               100.0 * static_cast<double>(m.trainable_bytes) / static_cast<double>(m.weight_bytes),
               MiB(m.trainable_bytes).c_str(), MiB(m.changed_bytes - m.trainable_bytes).c_str(),
               MiB(logical).c_str(), MiB(m.changed_bytes).c_str(), changed);
  PrintDedupCase(out, finetune, true, changed);
  std::fprintf(out, "\nfull training: the same %s step, every byte new every step\n", MiB(logical).c_str());
  PrintDedupCase(out, full, false, 1.0);
  std::fclose(out);
  return 0;
}

// --scenario hosts -----------------------------------------------------------
//
// A store every rank sees (StoreAccess::kShared, under --dir) against one on
// the coordinator's host only (kCoordinatorOnly, under --local-dir: on the
// test bed of tools/bench-hosts.sh each host has its own directory there).
// Each repetition saves and loads the same state in both, in alternating
// order; the ratios are per repetition, shared time / coordinator-only time
// (throughput of the coordinator-only store relative to the shared one).
int HostsWorker(const Args& a) {
  auto config = Must(DistributedConfig::FromEnvironment(), "environment");
  auto comm = Must(ConnectGloo(config), "joining the job");
  const int rank = comm->rank(), world = comm->world_size();
  const std::string local_root = a.local_dir.empty() ? a.dir + "/local" : a.local_dir;
  const std::string stores[2] = {a.dir + "/store-shared", local_root + "/store"};
  StoreOptions so[2] = {BaseStoreOptions(a), BaseStoreOptions(a)};
  so[1].access = StoreAccess::kCoordinatorOnly;
  so[1].local_staging_dir = local_root + "/staging";
  std::unique_ptr<StoreWriter> writers[2];
  for (int m = 0; m < 2; ++m) writers[m] = Must(OpenStoreWriter(stores[m], so[m]), "opening " + stores[m]);
  const std::string kind = a.data.at(0);
  StateDict state = MakeState(kind, a.size, rank, world, false, false, a.tensor_bytes);
  StateDict target = MakeState(kind, a.size, rank, world, true, false, a.tensor_bytes);
  std::vector<double> save_s[2], load_s[2], save_ratio, load_ratio, load_cpu[2];
  int64_t step = 0;
  for (int rep = 0; rep < a.repeat; ++rep) {
    double sv[2], ld[2], cpu[2];
    for (int k = 0; k < 2; ++k) {
      const int m = (rep % 2 == 0) ? k : 1 - k;
      // No save pays for the write-back of the one before it.
      ::sync();
      Check(comm->Barrier(), "barrier");
      SaveOptions o;
      o.step = step;
      o.communicator = comm.get();
      sv[m] = Timed(*comm, [&] { Check(Save(state, *writers[m], o), "save"); });
      LoadOptions lo;
      lo.step = step;
      lo.communicator = comm.get();
      ld[m] = TimedWithCpu(*comm, &cpu[m], [&] {
        if (m == 0) {
          auto reader = Must(OpenStoreReader(stores[0]), "reader");
          Check(Load(target, *reader, lo), "load");
        } else {
          auto reader = Must(OpenRemoteStoreReader(stores[1], comm.get(), 0), "remote reader");
          Check(Load(target, *reader, lo), "load");
        }
      });
      if (rep == 0) ExpectSameShards(state, target, "loaded data differs from saved data");
      if (rank == 0) Check(writers[m]->DeleteStep(step), "delete");
      Check(comm->Barrier(), "barrier");
      ++step;
    }
    for (int m = 0; m < 2; ++m) {
      save_s[m].push_back(sv[m]);
      load_s[m].push_back(ld[m]);
      load_cpu[m].push_back(cpu[m]);
    }
    save_ratio.push_back(sv[0] / sv[1]);
    load_ratio.push_back(ld[0] / ld[1]);
  }
  if (rank != 0) return 0;
  std::FILE* out = std::fopen((a.dir + "/report.txt").c_str(), "w");
  if (out == nullptr) Die("cannot write the report");
  const double logical = static_cast<double>(a.size);
  auto range = [](const std::vector<double>& v) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.3f-%.3f", *std::min_element(v.begin(), v.end()),
                  *std::max_element(v.begin(), v.end()));
    return std::string(buf);
  };
  std::fprintf(out,
               "ckptdb-bench --scenario hosts: %.2f GiB of %s over %d ranks, compression %s, median of %d runs "
               "(job time: slowest rank)\n%-26s %9s %15s %9s\n",
               logical / (1 << 30), kind.c_str(), world, a.compression_name.c_str(), a.repeat, "phase", "seconds",
               "min-max", "GB/s");
  const char* names[2] = {"shared", "coordinator-only"};
  for (int m = 0; m < 2; ++m) {
    std::fprintf(out, "save %-21s %9.3f %15s %9.3f\n", names[m], Median(save_s[m]), range(save_s[m]).c_str(),
                 logical / Median(save_s[m]) / 1e9);
  }
  for (int m = 0; m < 2; ++m) {
    std::fprintf(out, "load %-21s %9.3f %15s %9.3f\n", names[m], Median(load_s[m]), range(load_s[m]).c_str(),
                 logical / Median(load_s[m]) / 1e9);
  }
  for (int m = 0; m < 2; ++m) {
    std::fprintf(out, "load %-21s CPU seconds, all ranks: %.3f (%s)\n", names[m], Median(load_cpu[m]),
                 range(load_cpu[m]).c_str());
  }
  std::fprintf(out, "coordinator-only vs shared (throughput, per run): save %.2fx (%s, aim >= 0.7), load %.2fx (%s)\n",
               Median(save_ratio), range(save_ratio).c_str(), Median(load_ratio), range(load_ratio).c_str());
  std::fprintf(out, "result save_shared=%.4f save_local=%.4f load_shared=%.4f load_local=%.4f\n", Median(save_s[0]),
               Median(save_s[1]), Median(load_s[0]), Median(load_s[1]));
  std::fclose(out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // --scenario control: the control plane at thousands of ranks, which runs
  // the ranks as threads of one process (ckptdb-scale-bench, next to this
  // binary, given the other arguments: --world 8,64,512 --entries 20 ...).
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) != "--scenario" || std::string(argv[i + 1]) != "control") continue;
    const std::string scale = bench::BesideThisProgram("ckptdb-scale-bench");
    std::vector<char*> args{const_cast<char*>(scale.c_str())};
    for (int k = 1; k < argc; ++k) {
      if (k != i && k != i + 1) args.push_back(argv[k]);
    }
    args.push_back(nullptr);
    execv(scale.c_str(), args.data());
    Die("cannot run " + scale + ": " + std::strerror(errno));
  }
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
      std::cout << "usage: ckptdb-bench [--size 1GiB] [--world 2] [--data fp32|bf16|adam|optim|bytes|all]\n"
                   "                    [--compression none|zstd|auto] [--repeat 3] [--dir DIR] [--store STORE] [--json]\n"
                   "                    [--chunk-bytes 4MiB] [--invalidate-page-cache] [--no-mmap] [--warm-only]\n"
                   "                    [--tensor-bytes 64MiB] [--cols 1024] [--chunk-layout boxes|rows]\n\n"
                   "Saves and loads a state dict of --size logical bytes over --world ranks (started\n"
                   "for real through ckptdb-launch) and prints each phase's median job time and\n"
                   "throughput, as ratios to a raw write+fsync and a raw read of the same bytes\n"
                   "measured in the same run, with min-max over the runs. Phases: raw write, raw\n"
                   "read, raw read cold, save, load (same sharding, into tensors loaded before),\n"
                   "load fresh (into freshly allocated tensors), load cold (fresh tensors, page\n"
                   "cache dropped), reshard (load into column shards), async blocked (how long\n"
                   "SaveAsync blocks the caller) and async total; \"save CPU\" is the CPU time of all\n"
                   "ranks' processes during the save (median, min-max, ns per logical byte), \"load\n"
                   "CPU\" the same for the load. The cold phases drop the page\n"
                   "cache first (as root; skipped, and said so, otherwise; --warm-only skips them),\n"
                   "as a job restarting on a fresh machine meets it. --dir (default: a temporary directory, removed at the end) holds the\n"
                   "store and the raw files; --store STORE puts the store elsewhere, e.g. in a\n"
                   "bucket (s3://BUCKET/PREFIX, settings from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID...;\n"
                   "its steps are left there). --chunk-bytes and --invalidate-page-cache set the\n"
                   "StoreOptions of the same names, --no-mmap ReaderOptions.mmap_reads = false, to\n"
                   "compare. --tensor-bytes caps each entry (default 64 MiB): small entries make\n"
                   "many of them, to measure the control plane (plans, metadata) with many ranks.\n"
                   "--cols gives every tensor that many columns (default 1024; rows of 4 KiB of\n"
                   "fp32, which 4 MiB chunks cut as runs of whole rows either way); --chunk-layout\n"
                   "sets StoreOptions.chunk_layout (boxes, the default, or rows). \"reshard reads\"\n"
                   "is the read amplification of the reshard phase: raw bytes of the chunks read /\n"
                   "bytes loaded. --data optim: fp32 tensors, each followed by a 4-byte scalar\n"
                   "entry every rank holds whole (as Adam's \"step\" follows its moments).\n\n"
                   "usage: ckptdb-bench --scenario finetune [--size 1GiB] [--world 2] [--repeat 3]\n"
                   "                    [--compression none|zstd|auto] [--chunk-bytes 4MiB] [--dir DIR] [--json]\n\n"
                   "Deduplication across steps (StoreOptions::deduplicate), on against off. The state\n"
                   "dict: --size bytes of bf16 weights (tensors of at most 64 MiB, row-sharded over\n"
                   "--world ranks), of which the first 2% (whole tensors) train and the rest stay\n"
                   "frozen, plus f32 Adam moments exp_avg and exp_avg_sq for the trainable tensors\n"
                   "only (8 bytes per trainable element). Two cases, each saving 10 steps into two\n"
                   "fresh stores, one deduplicating and one not, interleaved step by step (on first\n"
                   "on even steps, off first on odd ones; the same content in both):\n"
                   "  fine-tuning    step 0 writes everything; before each later step the trainable\n"
                   "                 weights and their moments get new content, the rest stays\n"
                   "  full training  every byte gets new content before every step\n"
                   "Content is generated, and the page cache's dirty pages are written back (sync),\n"
                   "before each save, untimed: no save pays for the write-back of the one before it.\n"
                   "Each save is timed on every rank from a barrier (job time: the slowest rank).\n"
                   "Printed per case: every step's save time on and off and bytes added / logical\n"
                   "step bytes (ListSteps stored_bytes / logical_bytes; medians over the rounds),\n"
                   "then the median and min-max over steps 1..9 of every round of: save time on /\n"
                   "off (aims: <= 0.25 fine-tuning, <= 1.03 full training) and bytes added / logical\n"
                   "step (aim: <= 0.05 fine-tuning; the bytes that change are shown beside it: the\n"
                   "least a step can add). --repeat rounds (default 3), each in fresh stores under\n"
                   "--dir, removed when done; the last step of the first fine-tuning round is loaded\n"
                   "back from the deduplicating store and checked bit for bit.\n\n"
                   "usage: ckptdb-bench --scenario hosts [--size 1GiB] [--world 2] [--repeat 3] [--data fp32]\n"
                   "                    [--local-dir DIR] [--dir DIR]\n\n"
                   "A store every rank sees (StoreAccess::kShared, under --dir) against a store on the\n"
                   "coordinator's host only (kCoordinatorOnly, under --local-dir, default DIR/local:\n"
                   "the other ranks send their files to the coordinator, and loading ranks fetch\n"
                   "their chunks from it). Each run saves and loads the same state in both stores, in\n"
                   "alternating order, with the dirty pages written back before each save; printed:\n"
                   "medians and min-max of each, and the per-run throughput ratio coordinator-only /\n"
                   "shared (aim for saves: >= 0.7). On one host through ckptdb-launch as the other\n"
                   "modes; across network-namespace hosts, each with its own --local-dir, through\n"
                   "tools/bench-hosts.sh.\n\n"
                   "usage: ckptdb-bench --scenario control [--world 8,64,512] [--entries 20] [--saves 3] ...\n\n"
                   "The control plane at thousands of ranks (plans, write reports, metadata, connections):\n"
                   "runs ckptdb-scale-bench, next to this binary, with the other arguments; its --help\n"
                   "says what it runs and prints.\n";
      return 0;
    } else if (s == "--scenario") {
      const std::string sc = next();
      if (sc == "finetune") a.finetune = true;
      else if (sc == "hosts") a.hosts = true;
      else if (sc == "default") a.finetune = false;
      else Die("unknown --scenario '" + sc + "' (default, finetune, hosts, control)");
    } else if (s == "--size") {
      a.size = ParseSize(next());
    } else if (s == "--world") {
      a.world = std::atoi(next().c_str());
      forward.resize(forward.size() - 2);
    } else if (s == "--data") {
      std::string d = next();
      a.data_given = true;
      if (d == "all") a.data = {"fp32", "bf16", "adam", "bytes"};
      else if (d == "fp32" || d == "bf16" || d == "adam" || d == "bytes" || d == "optim") a.data = {d};
      else Die("unknown --data '" + d + "'");
    } else if (s == "--compression") {
      a.compression_name = next();
      if (a.compression_name == "none") a.compression = Compression::kNone;
      else if (a.compression_name == "zstd") a.compression = Compression::kZstd;
      else if (a.compression_name == "auto") a.compression = Compression::kAuto;
      else Die("unknown --compression '" + a.compression_name + "'");
    } else if (s == "--tensor-bytes") {
      a.tensor_bytes = static_cast<int64_t>(ParseSize(next()));
      if (a.tensor_bytes < 4096) Die("--tensor-bytes must be at least 4KiB");
    } else if (s == "--chunk-bytes") {
      a.chunk_bytes = ParseSize(next());
    } else if (s == "--cols") {
      a.cols = std::atoll(next().c_str());
      if (a.cols < 1) Die("--cols must be at least 1");
    } else if (s == "--chunk-layout") {
      a.chunk_layout_name = next();
      if (a.chunk_layout_name == "boxes") a.chunk_layout = ChunkLayout::kBoxes;
      else if (a.chunk_layout_name == "rows") a.chunk_layout = ChunkLayout::kRows;
      else Die("unknown --chunk-layout '" + a.chunk_layout_name + "' (boxes, rows)");
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
    } else if (s == "--local-dir") {
      a.local_dir = next();
    } else if (s == "--store") {
      a.store = next();
    } else if (s == "--worker") {
      worker = true;
    } else {
      Die("unknown argument '" + s + "' (see --help)");
    }
  }
  if (a.finetune && a.data_given) Die("--data does not apply to --scenario finetune (its state dict is fixed)");
  if (worker) return a.finetune ? FinetuneWorker(a) : a.hosts ? HostsWorker(a) : Worker(a);
  if (a.world < 1 || a.world > 256) Die("--world must be in [1, 256]");

  // Start the ranks through ckptdb-launch, next to this binary.
  std::string self = fs::read_symlink("/proc/self/exe").string();
  std::string launch = bench::BesideThisProgram("ckptdb-launch");
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
