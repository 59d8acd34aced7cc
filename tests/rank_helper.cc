// ckptdb_rank_helper: one rank of a multi-process test job.
//
//   ckptdb_rank_helper save|load STORE STEP OUT_DIR [--coordinator C]
//       [--layout rows|cols] [--fail OP@RANK]... [--kill-in-write RANK]...
//       [--stall-in-write RANK]...
//       [--bad-target RANK] [--tag T] [--coordinator-only] [--kill-in-send RANK]...
//       [--async] [--stop-in-write PID] [--stop-in-read PID] [--own-reader]
//       [--open-files SOFT:HARD[@RANK]] [--pids-cgroup DIR@RANK]
//
// Joins the job from the environment (DistributedConfig::FromEnvironment),
// saves or loads a state dict of fixed global contents split over however
// many ranks run (a replicated f32 tensor, an f32 [24, 4] tensor sharded by
// rows or, with --layout cols, by columns, an i16 [10, 3] tensor sharded in
// reverse rank order, a bytes entry), and writes what happened to
// OUT_DIR/rank-R.txt:
//   line 1: the status code name ("OK", "IOError", ...)
//   line 2: failed ranks of a checkpoint error, space separated ("" if none)
//   line 3: collective calls, seconds spent in them, peers connected, bytes
//           and messages received
//   rest:   Status::ToString()
// Exit code 0 on success, 3 on a ckptdb error, 2 on bad arguments.
// --bad-target R: on load, rank R's target has an entry the step lacks. A
// failed load whose target is not left as it was is reported as Internal.
// Environment, for rendezvous tests: CKPTDB_TEST_REPORT names the report
// file instead of OUT_DIR/rank-R.txt; CKPTDB_TEST_DIE_CONNECTING=1 makes the
// process exit (code 9) at its first TCP connect(2) or accept(2) to a peer:
// a rank that dies after the rendezvous, while the ranks connect.
// --coordinator-only: the store is on the coordinator's host only
// (StoreAccess::kCoordinatorOnly; loads through OpenRemoteStoreReader).
// Loads of a shared store go through OpenSharedStoreReader (only the
// coordinator opens the database); --own-reader: every rank opens its own
// (OpenStoreReader).
// --async: the save goes through an AsyncSaver (over a second connection
// of the job, as its background thread needs) and is waited for.
// --kill-in-send R: rank R dies (SIGKILL) in the middle of sending its files
// to the coordinator (at its second point-to-point message).
// --stop-in-write PID / --stop-in-read PID: rank 0 stops process PID
// (SIGSTOP) as it starts to write / to read: a server that stops answering
// in the middle of the save or load (its sockets stay open).
// --open-files SOFT:HARD[@RANK]: the process (rank RANK's only, when given)
// starts with these limits of open files (RLIMIT_NOFILE), as a cluster's
// node may start it. --pids-cgroup DIR@RANK: rank RANK moves itself into
// the cgroup at DIR (writes its pid to DIR/cgroup.procs) before it connects:
// a container's limit of tasks (pids.max) that its threads count against.
// OP is one of prepare, prepare_storage, write, async_write, write_bytes,
// finish, read_metadata, read.
#include <dlfcn.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <string>

#include "ckptdb/ckptdb.h"
#include "test_util.h"

using namespace ckptdb;
using namespace ckptdb::testing;

// --tag T: the contents of launch T (seeds 1+10T, 2+10T, 3+10T; the bytes
// say "of launch T"), so that two launches' data can be told apart.
static uint32_t g_tag = 0;

// Set while ConnectGloo runs under CKPTDB_TEST_DIE_CONNECTING=1.
static std::atomic<bool> g_die_connecting{false};

// These override libc's for the whole process (gloo's sockets included).
extern "C" int connect(int fd, const struct sockaddr* addr, socklen_t len) {
  if (g_die_connecting) _exit(9);
  using Fn = int (*)(int, const struct sockaddr*, socklen_t);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "connect"));
  return real(fd, addr, len);
}
extern "C" int accept(int fd, struct sockaddr* addr, socklen_t* len) {
  if (g_die_connecting) _exit(9);
  using Fn = int (*)(int, struct sockaddr*, socklen_t*);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "accept"));
  return real(fd, addr, len);
}

namespace {

// This rank's [begin, begin + size) of n split over `world` ranks as evenly as
// possible.
void Split(int64_t n, int world, int rank, int64_t* begin, int64_t* size) {
  int64_t base = n / world, extra = n % world;
  *begin = rank * base + std::min<int64_t>(rank, extra);
  *size = base + (rank < extra ? 1 : 0);
}

// The global contents are fixed; each rank holds its part for the world size
// and layout it runs with, so a step saved by one world size can be loaded by
// another. "sharded" is [24, 4] split by rows (or by columns with
// --layout cols); "uneven" is [10, 3] split by rows in reverse rank order.
StateDict MakeStateDict(int rank, int world, bool zeros, bool by_columns) {
  StateDict sd;
  auto fill = [&](Tensor t) { return zeros ? ZerosLike(t) : t; };
  (void)sd.Add("replicated", fill(PatternTensor(DType::kF32, {32}, 1 + 10 * g_tag)));
  Tensor global = PatternTensor(DType::kF32, {24, 4}, 2 + 10 * g_tag);
  int64_t b, n;
  if (by_columns) {
    Split(4, world, rank, &b, &n);
    Tensor mine = Tensor::Zeros(DType::kF32, {24, n}).value();
    for (int64_t i = 0; i < 24 && !zeros; ++i) {
      for (int64_t j = 0; j < n; ++j) mine.data_as<float>()[i * n + j] = global.data_as<float>()[i * 4 + b + j];
    }
    (void)sd.Add("sharded", ShardedTensor::Create(DType::kF32, {24, 4}, {{{0, b}, mine}}).value());
  } else {
    Split(24, world, rank, &b, &n);
    Tensor mine = fill(Tensor::Copy(DType::kF32, {n, 4}, global.data_as<float>() + b * 4, n * 4 * 4).value());
    (void)sd.Add("sharded", ShardedTensor::Create(DType::kF32, {24, 4}, {{{b, 0}, mine}}).value());
  }
  Tensor g2 = PatternTensor(DType::kI16, {10, 3}, 3 + 10 * g_tag);
  Split(10, world, world - 1 - rank, &b, &n);
  Tensor part = fill(Tensor::Copy(DType::kI16, {n, 3}, g2.data_as<int16_t>() + b * 3, n * 3 * 2).value());
  (void)sd.Add("uneven", ShardedTensor::Create(DType::kI16, {10, 3}, {{{b, 0}, part}}).value());
  (void)sd.AddBytes("bytes", zeros ? "" : "hello from the coordinator" + (g_tag ? " of launch " + std::to_string(g_tag) : ""));
  return sd;
}

// Forwards to another communicator; dies at its second point-to-point send
// when `die_in_send`.
class DyingCommunicator final : public Communicator {
 public:
  DyingCommunicator(Communicator* inner, bool die_in_send) : inner_(inner), die_(die_in_send) {}
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  Status Broadcast(std::string* data, int root) override { return inner_->Broadcast(data, root); }
  Status Gather(const std::string& mine, int root, std::vector<std::string>* out,
                std::map<int, Status>* missing) override {
    return inner_->Gather(mine, root, out, missing);
  }
  Status Scatter(const std::vector<std::string>& parts, int root, std::string* mine) override {
    return inner_->Scatter(parts, root, mine);
  }
  Status AllGather(const std::string& mine, std::vector<std::string>* out) override {
    return inner_->AllGather(mine, out);
  }
  Status Barrier() override { return inner_->Barrier(); }
  Status Send(int peer, const void* data, size_t n) override {
    if (die_ && ++sends_ == 2) kill(getpid(), SIGKILL);
    return inner_->Send(peer, data, n);
  }
  Status Recv(int peer, void* data, size_t n) override { return inner_->Recv(peer, data, n); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  CollectiveStats stats() const override { return inner_->stats(); }

 private:
  Communicator* inner_;
  bool die_;
  int sends_ = 0;
};

Status Injected(const std::string& op, int rank) {
  return Status::IOError("injected " + op + " failure on rank " + std::to_string(rank));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: ckptdb_rank_helper save|load STORE STEP OUT_DIR [options]\n");
    return 2;
  }
  const std::string mode = argv[1], store = argv[2], out_dir = argv[4];
  const int64_t step = std::atoll(argv[3]);
  int coordinator = 0, bad_target = -1;
  std::set<int> kill_ranks;   // --kill-in-write, repeatable (a whole host)
  std::set<int> stall_ranks;  // --stall-in-write: sleep 3 s after writing
  std::set<int> kill_send_ranks;  // --kill-in-send
  bool coordinator_only = false;
  bool own_reader = false;
  bool async_save = false;
  bool by_columns = false;
  pid_t stop_in_write = 0, stop_in_read = 0;
  std::string open_files;  // --open-files
  std::string pids_cgroup;  // --pids-cgroup
  std::map<std::string, std::set<int>> fail;
  for (int i = 5; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--coordinator" && i + 1 < argc) {
      coordinator = std::atoi(argv[++i]);
    } else if (a == "--fail" && i + 1 < argc) {
      std::string spec = argv[++i];
      size_t at = spec.find('@');
      if (at == std::string::npos) return 2;
      fail[spec.substr(0, at)].insert(std::atoi(spec.c_str() + at + 1));
    } else if (a == "--layout" && i + 1 < argc) {
      by_columns = std::string(argv[++i]) == "cols";
    } else if (a == "--tag" && i + 1 < argc) {
      g_tag = static_cast<uint32_t>(std::atoi(argv[++i]));
    } else if (a == "--bad-target" && i + 1 < argc) {
      bad_target = std::atoi(argv[++i]);
    } else if (a == "--kill-in-write" && i + 1 < argc) {
      kill_ranks.insert(std::atoi(argv[++i]));
    } else if (a == "--async") {
      async_save = true;
    } else if (a == "--coordinator-only") {
      coordinator_only = true;
    } else if (a == "--own-reader") {
      own_reader = true;
    } else if (a == "--kill-in-send" && i + 1 < argc) {
      kill_send_ranks.insert(std::atoi(argv[++i]));
    } else if (a == "--stop-in-write" && i + 1 < argc) {
      stop_in_write = static_cast<pid_t>(std::atoi(argv[++i]));
    } else if (a == "--stop-in-read" && i + 1 < argc) {
      stop_in_read = static_cast<pid_t>(std::atoi(argv[++i]));
    } else if (a == "--pids-cgroup" && i + 1 < argc) {
      pids_cgroup = argv[++i];
    } else if (a == "--open-files" && i + 1 < argc) {
      open_files = argv[++i];
    } else if (a == "--stall-in-write" && i + 1 < argc) {
      stall_ranks.insert(std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }

  Status st;
  CollectiveStats cs;
  int rank = -1;
  auto config = DistributedConfig::FromEnvironment();
  if (!config.ok()) {
    st = config.status();
  } else {
    rank = config->rank;
    if (!open_files.empty()) {
      const size_t colon = open_files.find(':'), at = open_files.find('@');
      if (colon == std::string::npos) return 2;
      if (at == std::string::npos || std::atoi(open_files.c_str() + at + 1) == rank) {
        rlimit r{};
        r.rlim_cur = std::strtoull(open_files.c_str(), nullptr, 10);
        r.rlim_max = std::strtoull(open_files.c_str() + colon + 1, nullptr, 10);
        if (setrlimit(RLIMIT_NOFILE, &r) != 0) return 2;
      }
    }
    const size_t at = pids_cgroup.rfind('@');
    if (at != std::string::npos && std::atoi(pids_cgroup.c_str() + at + 1) == rank) {
      std::ofstream procs(pids_cgroup.substr(0, at) + "/cgroup.procs");
      procs << getpid() << std::endl;
      if (!procs) return 2;
    }
    const char* die = std::getenv("CKPTDB_TEST_DIE_CONNECTING");
    g_die_connecting = die != nullptr && std::string(die) == "1";
    auto comm = ConnectGloo(*config);
    g_die_connecting = false;
    if (!comm.ok()) {
      st = comm.status();
    } else {
      auto fails = [&](const char* op) { return fail.count(op) && fail[op].count(rank); };
      const int world = config->world_size;
      DyingCommunicator dying(comm->get(), kill_send_ranks.count(rank) > 0);
      if (mode == "save") {
        StoreOptions so;
        if (coordinator_only) so.access = StoreAccess::kCoordinatorOnly;
        auto writer = OpenStoreWriter(store, so);
        if (!writer.ok()) {
          st = writer.status();
        } else {
          FaultyWriter w(writer->get());
          if (fails("prepare")) w.on_prepare = [&] { return Injected("prepare", rank); };
          if (fails("prepare_storage")) w.on_prepare_storage = [&] { return Injected("prepare_storage", rank); };
          if (fails("finish")) w.on_finish = [&] { return Injected("finish", rank); };
          w.on_write = [&](const std::vector<WriteItem>& items) -> Status {
            if (stop_in_write > 0 && rank == 0) kill(stop_in_write, SIGSTOP);
            if (fails("write")) return Injected("write", rank);
            if (fails("async_write")) {
              // The error arises on a worker thread, as with a write future.
              return std::async(std::launch::async, [&] { return Injected("async_write", rank); }).get();
            }
            if (fails("write_bytes")) {
              for (const WriteItem& it : items) {
                if (it.kind == EntryKind::kBytes) return Injected("write_bytes", rank);
              }
            }
            return Status::OK();
          };
          // Die in the middle of the save: this rank's SST file is written to
          // staging, its report never sent.
          if (kill_ranks.count(rank) > 0) w.after_write = [] { kill(getpid(), SIGKILL); };
          // Or stall there (its host's link may be cut meanwhile).
          if (stall_ranks.count(rank) > 0) {
            w.after_write = [] { std::this_thread::sleep_for(std::chrono::seconds(3)); };
          }
          SaveOptions o;
          o.step = step;
          o.coordinator_rank = coordinator;
          o.communicator = &dying;
          if (!async_save) {
            st = Save(MakeStateDict(rank, world, false, by_columns), w, o);
          } else {
            DistributedConfig bg = *config;
            bg.job_id += "-async";
            auto background = ConnectGloo(bg);
            if (!background.ok()) {
              st = background.status();
            } else {
              AsyncSaveOptions ao;
              ao.coordinator_rank = coordinator;
              ao.communicator = background->get();
              AsyncSaver saver(w, ao);
              auto handle = saver.SaveAsync(MakeStateDict(rank, world, false, by_columns), step);
              st = handle.ok() ? (*handle)->Wait() : handle.status();
            }
          }
        }
      } else {
        auto open_reader = [&]() -> StatusOr<std::unique_ptr<StorageReader>> {
          if (coordinator_only) return OpenRemoteStoreReader(store, comm->get(), coordinator);
          if (!own_reader) return OpenSharedStoreReader(store, comm->get(), coordinator);
          auto r = OpenStoreReader(store);
          if (!r.ok()) return r.status();
          return std::unique_ptr<StorageReader>(std::move(r).value());
        };
        StatusOr<std::unique_ptr<StorageReader>> reader = open_reader();
        if (!reader.ok()) {
          st = reader.status();
        } else {
          FaultyReader r(reader->get());
          if (fails("read_metadata")) r.on_read_metadata = [&] { return Injected("read_metadata", rank); };
          if (fails("read")) r.on_read = [&] { return Injected("read", rank); };
          if (stop_in_read > 0 && rank == 0) {
            r.on_read = [&] {
              kill(stop_in_read, SIGSTOP);
              return Status::OK();
            };
          }
          StateDict target = MakeStateDict(rank, world, true, by_columns);
          if (rank == bad_target) (void)target.Add("not.saved", Tensor::Zeros(DType::kF32, {2}).value());
          LoadOptions o;
          o.step = step;
          o.coordinator_rank = coordinator;
          o.communicator = comm->get();
          st = Load(target, r, o);
          if (st.ok() && !SameContents(MakeStateDict(rank, world, false, by_columns), target)) {
            st = Status::Internal("loaded values differ from the saved ones");
          }
          if (bad_target >= 0 && !st.ok() && !SameContents(MakeStateDict(rank, world, true, by_columns), target)) {
            st = Status::Internal("the failed load changed this rank's target: " + st.ToString());
          }
        }
      }
      cs = (*comm)->stats();
    }
  }
  if (rank < 0) {
    const char* r = std::getenv("CKPTDB_RANK");
    rank = r ? std::atoi(r) : 0;
  }
  const char* report = std::getenv("CKPTDB_TEST_REPORT");
  std::ofstream out(report != nullptr ? std::string(report) : out_dir + "/rank-" + std::to_string(rank) + ".txt");
  out << StatusCodeName(st.code()) << "\n";
  std::string failed;
  for (const auto& [r, s] : st.rank_failures()) failed += (failed.empty() ? "" : " ") + std::to_string(r);
  out << failed << "\n" << cs.calls << " " << cs.seconds << " " << cs.peers << " " << cs.bytes_received << " " << cs.messages_received
      << "\n" << st.ToString() << "\n";
  return st.ok() ? 0 : 3;
}
