// ckptdb-scale-bench: what a save and a load cost in control traffic as the
// world grows, with the ranks of one job as threads of this process
// (src/comm/thread_communicator.h) over one directory store, so that
// thousands of ranks fit on one machine.
//
//   ckptdb-scale-bench [--world 8,64,512] [--entries 20] [--saves 3] [--dir DIR]
//                      [--baseline-up-to 1024]
//
// Every rank holds one row of each of --entries tensors of shape [W, 64]
// (f32: what a Shard(0) of W ranks holds), saves it --saves times (steps 1,
// 2, ...) and loads the last step back into the same sharding. For each
// world size it runs the protocol twice, interleaved:
//   rooted      the protocol as it is: plans, write reports and statuses go
//               to the coordinator, which answers each rank (Gather,
//               Scatter, Broadcast);
//   all-gather  the baseline, the protocol before: every rank's plan,
//               report and status reach every rank (a communicator whose
//               Gather is an all-gather and whose Scatter broadcasts every
//               rank's part to every rank, as the gloo communicator did).
// It prints, per world size and mode, what the coordinator and the busiest
// other rank received and sent (bytes and messages, counted message by
// message as a direct implementation moves them), the peers each exchanged
// messages with, the step's metadata size, the wall time and the process's
// CPU seconds of the whole run (every rank's thread); and the ratio of the
// busiest other rank's received bytes, baseline over rooted. And, for the
// rooted protocol, the first save against the second (plan caching: the
// second sends a fingerprint per unchanged plan): bytes the coordinator
// received, bytes rank 1 sent, the coordinator thread's CPU seconds. And
// the most pieces one rank's load read of the step's pieces records (store
// format 8 grids: a rank's own cells; --load-whole 1 reads every piece of
// the entries, as loads did before format 7, for the comparison). And each
// phase's wall time, one reader's open of the finished store (what a rank
// of a real job pays once: the thread-ranks pay it W times), and the
// process's peak anonymous memory. Loads go through OpenSharedStoreReader
// (only the coordinator opens the store's database; --loads own: every
// thread-rank opens its own reader, as each rank did before). With --dir
// s3://BUCKET/PREFIX the stores go into a bucket (AWS's variables say
// where), and each load also prints the requests and response bytes the
// whole job asked of the server, and their share per rank.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <thread>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "ckptdb/ckptdb.h"
#include "cpu_time.h"
#include "comm/thread_communicator.h"
#include "format/metadata_codec.h"
#include "s3/s3_client.h"

using namespace ckptdb;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::cerr << "ckptdb-scale-bench: " << what << "\n";
  std::exit(1);
}

using bench::ThreadCpuSeconds;
constexpr auto CpuSeconds = bench::ProcessCpuSeconds;

// The baseline: the rooted calls as the protocol made them before, every
// rank receiving every rank's part.
class AllToAll final : public Communicator {
 public:
  explicit AllToAll(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  std::chrono::milliseconds timeout() const override { return inner_.timeout(); }
  CollectiveStats stats() const override { return inner_.stats(); }
  Status Broadcast(std::string* data, int root) override { return inner_.Broadcast(data, root); }
  Status Gather(const std::string& mine, int root, std::vector<std::string>* out,
                std::map<int, Status>* missing) override {
    Status st = inner_.AllGather(mine, out);
    if (rank() != root) out->clear();
    if (missing) missing->clear();
    return st;
  }
  // (Communicator's default Scatter: a broadcast of every part.)
  Status AllGather(const std::string& mine, std::vector<std::string>* out) override {
    return inner_.AllGather(mine, out);
  }
  Status Barrier() override { return inner_.Barrier(); }

 private:
  Communicator& inner_;
};

// Forwards to a reader, counting the pieces (and their encoded bytes) in the
// metadata a load got: what its rank read and decoded of the step's pieces
// records. With `whole`, a load's regions are ignored (ReadMetadataOf: every
// piece of the entries it loads), as loads read before store format 7.
class CountingReader final : public StorageReader {
 public:
  CountingReader(StorageReader& inner, bool whole) : inner_(inner), whole_(whole) {}
  StatusOr<StepMetadata> ReadMetadata(int64_t step) override { return Count(inner_.ReadMetadata(step)); }
  StatusOr<StepMetadata> ReadMetadataOf(int64_t step, const std::vector<std::string>& fqns) override {
    return Count(inner_.ReadMetadataOf(step, fqns));
  }
  StatusOr<StepMetadata> ReadMetadataFor(int64_t step, const std::vector<std::string>& fqns,
                                         const std::vector<EntryRegion>& regions) override {
    return Count(whole_ ? inner_.ReadMetadataOf(step, fqns) : inner_.ReadMetadataFor(step, fqns, regions));
  }
  StatusOr<ReadStats> Read(const StepMetadata& md, const std::vector<ReadItem>& items) override {
    return inner_.Read(md, items);
  }
  uint64_t pieces = 0, piece_bytes = 0;

 private:
  StatusOr<StepMetadata> Count(StatusOr<StepMetadata> md) {
    if (!md.ok()) return md;
    for (const EntryMetadata& e : md->entries) {
      for (const StoredPiece& p : e.pieces) {
        proto::Piece q;
        ToProto(p, &q);
        ++pieces;
        piece_bytes += q.ByteSizeLong();
      }
    }
    return md;
  }
  StorageReader& inner_;
  const bool whole_;
};

struct Options {
  std::vector<int> worlds = {8, 64, 512};
  int entries = 20;
  int saves = 3;
  int baseline_up_to = 1024;  // the baseline's all-gathers copy W x W parts: slow past this
  bool load_whole = false;    // loads read every piece of their entries (before store format 7)
  int reader_files = 16;      // each thread-rank's ReaderOptions::max_open_files
  bool reader_mmap = true;    // each thread-rank's ReaderOptions::mmap_reads
  // The loads of the last step, in this order: "shared" (OpenSharedStoreReader:
  // the coordinator alone opens the store's database) and/or "own" (every
  // thread-rank opens a reader of its own, as each rank did before).
  std::vector<std::string> loads = {"shared"};
  std::string dir;
  bool bucket() const { return dir.rfind("s3://", 0) == 0; }
};

// One save as the coordinator and rank 1 saw it.
struct PerSave {
  uint64_t coordinator_in = 0, rank1_out = 0;
  double coordinator_cpu = 0;  // the coordinator's thread: plan merge, prepare, commit
};

struct Result {
  CollectiveStats coordinator, busiest;  // busiest: the other rank that received the most
  std::vector<PerSave> saves;
  // Wall seconds on the coordinator: each save, then each load (its open
  // included).
  std::vector<std::pair<std::string, double>> phases;
  // One reader's open of the store after the job (what each rank of a real
  // job pays once): median seconds over 9 opens, and the files in its
  // database directory.
  double open_seconds = 0;
  size_t db_files = 0;
  uint64_t metadata_bytes = 0;
  // Bucket stores: per load, what the whole job asked of the server.
  std::vector<std::pair<std::string, s3::ProcessS3Traffic>> bucket_loads;
  // The most pieces (and their encoded bytes) one rank's load read.
  uint64_t load_pieces = 0, load_piece_bytes = 0;
  double wall = 0, cpu = 0;
};

constexpr int64_t kCols = 64;

Result Run(const Options& o, int world, bool baseline) {
  const std::string name = "w" + std::to_string(world) + (baseline ? "-all" : "-rooted");
  const std::string store = o.bucket() ? o.dir + (o.dir.back() == '/' ? "" : "/") + name + "/" : o.dir + "/" + name;
  if (!o.bucket()) fs::remove_all(store);
  ThreadJob job(world, std::chrono::minutes(10));
  std::mutex mu;
  std::string failure;
  uint64_t load_pieces = 0, load_piece_bytes = 0;
  std::vector<PerSave> per_save;
  std::vector<std::pair<std::string, double>> phases;
  std::vector<std::pair<std::string, s3::ProcessS3Traffic>> bucket_loads;
  const double c0 = CpuSeconds();
  const auto t0 = Clock::now();
  RunRanksAsThreads(job, [&](int rank, Communicator& inner) {
    AllToAll all(inner);
    Communicator& comm = baseline ? static_cast<Communicator&>(all) : inner;
    auto fail = [&](const Status& st) {
      std::lock_guard<std::mutex> lock(mu);
      if (failure.empty()) failure = "rank " + std::to_string(rank) + ": " + st.ToString();
    };
    auto shard = [&](int e, bool zero) {
      Tensor t = Tensor::Zeros(DType::kF32, {1, kCols}).value();
      if (!zero) {
        float* f = static_cast<float*>(t.data());
        for (int64_t c = 0; c < kCols; ++c) f[c] = static_cast<float>(rank * 1000 + e + c);
      }
      return ShardedTensor::Create(DType::kF32, {world, kCols}, {Shard{{rank, 0}, std::move(t)}}).value();
    };
    {
      auto w = OpenStoreWriter(store);
      if (!w.ok()) return fail(w.status());
      StateDict sd;
      for (int e = 0; e < o.entries; ++e) (void)sd.Add("layer" + std::to_string(e) + ".weight", shard(e, false));
      for (int s = 1; s <= o.saves; ++s) {
        SaveOptions so;
        so.step = s;
        so.communicator = &comm;
        const CollectiveStats before = comm.stats();
        const double cpu0 = ThreadCpuSeconds();
        const auto s0 = Clock::now();
        if (Status st = Save(sd, **w, so); !st.ok()) return fail(st);
        const double cpu = ThreadCpuSeconds() - cpu0;
        if (rank == 0) {
          phases.emplace_back("save " + std::to_string(s), std::chrono::duration<double>(Clock::now() - s0).count());
        }
        const CollectiveStats after = comm.stats();
        if (rank <= 1) {
          std::lock_guard<std::mutex> lock(mu);
          per_save.resize(o.saves);
          if (rank == 0) {
            per_save[s - 1].coordinator_in = after.bytes_received - before.bytes_received;
            per_save[s - 1].coordinator_cpu = cpu;
          } else {
            per_save[s - 1].rank1_out = after.bytes_sent - before.bytes_sent;
          }
        }
      }
    }
    // A rank that loads its own shards needs few of the store's files open
    // at once; RocksDB opens up to (max_open_files - 10) / 4 of them (at
    // most 16) whenever a database opens, which at thousands of thread-ranks
    // exceeds the process's descriptor limit (--reader-files).
    for (const std::string& how : o.loads) {
      ReaderOptions ro;
      ro.max_open_files = o.reader_files;
      ro.mmap_reads = o.reader_mmap;
      // A bucket: the server's traffic of this load alone, between barriers.
      s3::ProcessS3Traffic before;
      if (o.bucket()) {
        if (Status st = inner.Barrier(); !st.ok()) return fail(st);
        before = s3::ProcessS3TrafficSoFar();
      }
      const auto l0 = Clock::now();
      StatusOr<std::unique_ptr<StorageReader>> r = Status::OK();
      if (how == "own") {
        StatusOr<std::unique_ptr<StoreReader>> own = OpenStoreReader(store, ro);
        r = own.ok() ? StatusOr<std::unique_ptr<StorageReader>>(std::move(own).value()) : own.status();
      } else {
        r = OpenSharedStoreReader(store, &comm, 0, ro);
      }
      if (!r.ok()) return fail(r.status());
      StateDict target;
      for (int e = 0; e < o.entries; ++e) (void)target.Add("layer" + std::to_string(e) + ".weight", shard(e, true));
      LoadOptions lo;
      lo.step = o.saves;
      lo.communicator = &comm;
      CountingReader counting(**r, o.load_whole);
      if (Status st = Load(target, counting, lo); !st.ok()) return fail(st);
      if (rank == 0) {
        phases.emplace_back("load (" + how + ")", std::chrono::duration<double>(Clock::now() - l0).count());
      }
      if (o.bucket()) {
        r->reset();  // (its connections closed)
        if (Status st = inner.Barrier(); !st.ok()) return fail(st);
        if (rank == 0) {
          const s3::ProcessS3Traffic after = s3::ProcessS3TrafficSoFar();
          bucket_loads.emplace_back(how, s3::ProcessS3Traffic{after.requests - before.requests,
                                                              after.gets - before.gets,
                                                              after.bytes_received - before.bytes_received});
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      load_pieces = std::max(load_pieces, counting.pieces);
      load_piece_bytes = std::max(load_piece_bytes, counting.piece_bytes);
    }
  });
  Result res;
  res.wall = std::chrono::duration<double>(Clock::now() - t0).count();
  res.cpu = CpuSeconds() - c0;
  if (!failure.empty()) Die("world " + std::to_string(world) + (baseline ? " (all-gather)" : "") + ": " + failure);
  res.coordinator = job.stats(0);
  for (int r = 1; r < world; ++r) {
    CollectiveStats s = job.stats(r);
    if (r == 1 || s.bytes_received > res.busiest.bytes_received) res.busiest = s;
  }
  res.load_pieces = load_pieces;
  res.load_piece_bytes = load_piece_bytes;
  res.saves = per_save;
  res.phases = phases;
  res.bucket_loads = bucket_loads;
  {
    auto r = OpenStoreReader(store);
    StatusOr<StepMetadata> md = r.ok() ? (*r)->ReadMetadata(o.saves) : StatusOr<StepMetadata>(r.status());
    if (md.ok()) res.metadata_bytes = EncodeMetadataValue(*md).size();
  }
  {
    std::vector<double> opens;
    for (int k = 0; k < 9; ++k) {
      ReaderOptions ro;
      ro.max_open_files = o.reader_files;
      const auto t = Clock::now();
      auto r = OpenStoreReader(store, ro);
      if (!r.ok()) Die("reopening the store: " + r.status().ToString());
      opens.push_back(std::chrono::duration<double>(Clock::now() - t).count());
    }
    std::sort(opens.begin(), opens.end());
    res.open_seconds = opens[opens.size() / 2];
    std::error_code ec;
    if (!o.bucket()) {
      for (const auto& f : fs::recursive_directory_iterator(store, ec)) res.db_files += f.is_regular_file() ? 1 : 0;
    }
  }
  if (o.bucket()) {
    // Deleting the steps deletes their objects.
    auto w = OpenStoreWriter(store);
    std::vector<int64_t> steps;
    for (int s = 1; s <= o.saves; ++s) steps.push_back(s);
    Status st = w.ok() ? (*w)->DeleteSteps(steps) : w.status();
    if (!st.ok()) std::fprintf(stderr, "ckptdb-scale-bench: deleting the steps of %s: %s\n", store.c_str(),
                                st.ToString().c_str());
  } else {
    fs::remove_all(store);
  }
  return res;
}

std::string Kb(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", b / 1024.0);
  return buf;
}

void Usage() {
  std::printf(
      "usage: ckptdb-scale-bench [--world 8,64,512] [--entries 20] [--saves 3] [--dir DIR] [--baseline-up-to 1024]\n"
      "                          [--load-whole 0|1] [--reader-files 16] [--reader-mmap 1|0] [--loads shared,own]\n"
      "Runs W ranks as threads of this process (one job per world size), each saving one row of each of\n"
      "--entries [W, 64] f32 tensors --saves times and loading the last step, with the protocol as it is\n"
      "(rooted: ranks exchange with the coordinator only) and with the all-gather baseline (every rank\n"
      "receives every rank's plan, report and status), interleaved. Prints per world size and mode the\n"
      "control bytes and messages the coordinator and the busiest other rank received and sent, their\n"
      "peers, the step's metadata bytes, wall and CPU seconds. --dir: where the stores go (default: a\n"
      "new directory under /tmp, removed after). The baseline runs only up to --baseline-up-to ranks (its\n"
      "all-gathers copy W x W parts in this one process). ld pieces, ld KiB: the most pieces (and their\n"
      "encoded KiB) one rank's load read of the step's pieces records; --load-whole 1: loads read every\n"
      "piece of the entries they load (ignoring their regions: how loads read before store format 7).\n"
      "--reader-files: each thread-rank's ReaderOptions::max_open_files (default 16, the least: RocksDB\n"
      "opens a quarter of it, up to 16 files, whenever a reader opens, and thousands of thread-ranks share\n"
      "one process's descriptor limit). --reader-mmap: each thread-rank's ReaderOptions::mmap_reads (default\n"
      "1, as a reader's default). --loads: the loads of the last step, in order: shared (OpenSharedStoreReader:\n"
      "the coordinator alone opens the store's database and names each rank its files; the default) and/or\n"
      "own (every thread-rank opens a reader of its own, as each rank did before; what each rank of a real\n"
      "job pays once, the thread-ranks pay W times). Also prints each phase's wall time on the coordinator,\n"
      "one reader's open of the finished store (what a rank of a real job pays once, here W times), and the\n"
      "process's peak anonymous memory (its peak RSS counts the store's files once per thread-rank's\n"
      "mapping). --dir s3://BUCKET/PREFIX: the stores go into that bucket (AWS_ENDPOINT_URL and the\n"
      "credentials from AWS's variables), their steps deleted after; each load also prints the requests\n"
      "(GETs) and response bytes the whole job asked of the server, and those per rank.\n");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      Usage();
      return 0;
    } else if (a == "--world") {
      o.worlds.clear();
      std::stringstream ss(next());
      for (std::string w; std::getline(ss, w, ',');) {
        const int n = std::atoi(w.c_str());
        if (n < 2 || n > 65536) Die("--world: '" + w + "' is not a world size in [2, 65536]");
        o.worlds.push_back(n);
      }
    } else if (a == "--entries") {
      o.entries = std::atoi(next().c_str());
      if (o.entries < 1) Die("--entries must be at least 1");
    } else if (a == "--saves") {
      o.saves = std::atoi(next().c_str());
      if (o.saves < 1) Die("--saves must be at least 1");
    } else if (a == "--baseline-up-to") {
      o.baseline_up_to = std::atoi(next().c_str());
    } else if (a == "--reader-files") {
      o.reader_files = std::atoi(next().c_str());
      if (o.reader_files < 16) Die("--reader-files must be at least 16 (ReaderOptions::max_open_files)");
    } else if (a == "--reader-mmap") {
      o.reader_mmap = next() == "1";
    } else if (a == "--loads") {
      o.loads.clear();
      std::stringstream ss(next());
      for (std::string l; std::getline(ss, l, ',');) {
        if (l != "shared" && l != "own") Die("--loads: '" + l + "' is not one of shared, own");
        o.loads.push_back(l);
      }
      if (o.loads.empty()) Die("--loads needs shared, own or both");
    } else if (a == "--load-whole") {
      o.load_whole = next() == "1";
    } else if (a == "--dir") {
      o.dir = next();
    } else {
      Die("unknown argument '" + a + "' (--help)");
    }
  }
  // Every thread-rank opens the store as a process of its own would (a
  // reader's files, its SST file): thousands of them need more descriptors
  // than one process is given by default. Raised as far as allowed (root:
  // up to fs.nr_open).
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    const int max_world = *std::max_element(o.worlds.begin(), o.worlds.end());
    const rlim_t want = std::max<rlim_t>(nofile.rlim_cur, static_cast<rlim_t>(max_world) * 16 + 1024);
    rlimit raised{want, std::max(want, nofile.rlim_max)};
    if (setrlimit(RLIMIT_NOFILE, &raised) != 0) {
      raised = rlimit{nofile.rlim_max, nofile.rlim_max};
      (void)setrlimit(RLIMIT_NOFILE, &raised);
    }
  }
  // The process's resident anonymous memory (RssAnon), sampled: its peak
  // RSS also counts every page of the store's files once per thread-rank's
  // mapping of them, which separate processes would not add up.
  std::atomic<bool> sampler_done{false};
  std::atomic<uint64_t> peak_anon_kib{0};
  std::thread sampler([&] {
    while (!sampler_done) {
      std::ifstream status("/proc/self/status");
      for (std::string line; std::getline(status, line);) {
        if (line.rfind("RssAnon:", 0) == 0) {
          const uint64_t kib = std::strtoull(line.c_str() + 8, nullptr, 10);
          if (kib > peak_anon_kib) peak_anon_kib = kib;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  bool own_dir = false;
  if (o.dir.empty()) {
    char tmpl[] = "/tmp/ckptdb-scale-XXXXXX";
    if (!mkdtemp(tmpl)) Die("mkdtemp failed");
    o.dir = tmpl;
    own_dir = true;
  }
  std::printf("ckptdb-scale-bench: %d entries of [W, %lld] f32, one row per rank; %d save(s) + 1 load per run;\n"
              "control traffic per rank counted message by message (KiB, messages); cpu: the whole process\n",
              o.entries, static_cast<long long>(kCols), o.saves);
  std::printf("%6s %-10s | %10s %8s %10s %6s | %10s %8s %10s %6s | %9s %9s %8s %7s %7s\n", "W", "mode",
              "coord in", "msgs in", "coord out", "peers", "rank in", "msgs in", "rank out", "peers", "md KiB",
              "ld pieces", "ld KiB", "wall s", "cpu s");
  for (int world : o.worlds) {
    Result res[2];
    const bool with_baseline = world <= o.baseline_up_to;
    for (int mode : {1, 0}) {  // the baseline first, then the protocol as it is
      if (mode == 1 && !with_baseline) continue;
      const Result& r = res[mode] = Run(o, world, mode == 1);
      std::printf("%6d %-10s | %10s %8llu %10s %6llu | %10s %8llu %10s %6llu | %9s %9llu %8s %7.2f %7.2f\n", world,
                  mode ? "all-gather" : "rooted", Kb(r.coordinator.bytes_received).c_str(),
                  static_cast<unsigned long long>(r.coordinator.messages_received),
                  Kb(r.coordinator.bytes_sent).c_str(), static_cast<unsigned long long>(r.coordinator.peers),
                  Kb(r.busiest.bytes_received).c_str(), static_cast<unsigned long long>(r.busiest.messages_received),
                  Kb(r.busiest.bytes_sent).c_str(), static_cast<unsigned long long>(r.busiest.peers),
                  Kb(r.metadata_bytes).c_str(), static_cast<unsigned long long>(r.load_pieces),
                  Kb(r.load_piece_bytes).c_str(), r.wall, r.cpu);
      std::fflush(stdout);
    }
    std::printf("%6d phases (rooted, coordinator's wall s):", world);
    for (const auto& [phase, seconds] : res[0].phases) std::printf(" %s %.2f", phase.c_str(), seconds);
    std::printf("; one reader's open %.1f ms (median of 9, the store holding %zu files)\n",
                res[0].open_seconds * 1e3, res[0].db_files);
    for (const auto& [how, t] : res[0].bucket_loads) {
      std::printf("%6d bucket load (%s): the job sent %llu requests (%llu GETs) and received %s KiB; per rank %.2f "
                  "requests, %.1f KiB\n",
                  world, how.c_str(), static_cast<unsigned long long>(t.requests),
                  static_cast<unsigned long long>(t.gets), Kb(t.bytes_received).c_str(),
                  static_cast<double>(t.requests) / world, t.bytes_received / 1024.0 / world);
    }
    const std::vector<PerSave>& ps = res[0].saves;
    if (ps.size() >= 2) {
      // Plan caching: the first save sends every plan, later ones a
      // fingerprint per rank.
      std::printf("%6d plan caching (rooted): save 1 -> save 2: coordinator received %s -> %s KiB, rank 1 sent "
                  "%s -> %s KiB, coordinator thread CPU %.3f -> %.3f s\n",
                  world, Kb(ps[0].coordinator_in).c_str(), Kb(ps[1].coordinator_in).c_str(),
                  Kb(ps[0].rank1_out).c_str(), Kb(ps[1].rank1_out).c_str(), ps[0].coordinator_cpu,
                  ps[1].coordinator_cpu);
    }
    if (!with_baseline) continue;
    std::printf("%6d busiest other rank received %.1fx less with the rooted protocol\n", world,
                static_cast<double>(res[1].busiest.bytes_received) / std::max<uint64_t>(1, res[0].busiest.bytes_received));
  }
  sampler_done = true;
  sampler.join();
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  std::printf("peak RSS of the process: %.0f MiB, of it anonymous memory (sampled every 50 ms) %.0f MiB; the rest is\n"
              "the store's files mapped by each thread-rank's reader, counted once per mapping\n",
              u.ru_maxrss / 1024.0, peak_anon_kib.load() / 1024.0);
  if (own_dir) fs::remove_all(o.dir);
  return 0;
}
