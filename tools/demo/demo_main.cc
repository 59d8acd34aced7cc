// ckptdb-demo: a small training loop that checkpoints into a ckptdb store,
// as one process or as every rank of a job started by ckptdb-launch.
//
// The state dict looks like a small transformer and its optimizer (about
// 250 MiB): bf16 embeddings and MLP weights sharded across the ranks (rows,
// and columns for the down projection), replicated f32 attention weights,
// f16 norms, an fp8 weight, Adam-style moments (sharded), a bool mask, an
// i64 step counter and a JSON bytes entry. Every value is a pure function of
// the entry, its global index and the number of training steps taken, so any
// rank, at any world size, can say what a step must hold.
//
// Run: trains --steps steps (resuming after the store's latest step when it
// has one), saving each, then loads the latest back and checks every byte.
// --verify-only: just loads the latest step, in this job's sharding, and
// checks it (e.g. saved by 4 ranks, verified by 3).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "ckptdb/ckptdb.h"

using namespace ckptdb;

namespace {

[[noreturn]] void Die(const std::string& what, const Status& st) {
  std::cerr << "ckptdb-demo: " << what << ": " << st.ToString() << "\n";
  std::exit(1);
}
#define CHECK_OK(expr)                              \
  do {                                              \
    ::ckptdb::Status _s = (expr);                   \
    if (!_s.ok()) Die(#expr, _s);                   \
  } while (0)
template <typename T>
T Must(StatusOr<T> v, const char* what) {
  if (!v.ok()) Die(what, v.status());
  return std::move(v).value();
}

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// A N(0, sigma) value for (seed, index), by Box-Muller.
float Gauss(uint64_t seed, uint64_t i, float sigma) {
  uint64_t h = Mix(seed ^ Mix(i));
  double u1 = ((h >> 11) + 1.0) / 9007199254740993.0;
  double u2 = (Mix(h) >> 11) / 9007199254740992.0;
  return static_cast<float>(sigma * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}
uint16_t ToBF16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return static_cast<uint16_t>((b + 0x7fff + ((b >> 16) & 1)) >> 16);
}
uint64_t Seed(const std::string& name) { return Mix(std::hash<std::string>{}(name)); }

// How an entry is laid out across the ranks.
struct Spec {
  std::string fqn;
  DType dtype;
  Shape shape;
  int shard_dim;  // -1: replicated (a plain tensor)
};

std::vector<Spec> ModelSpecs(int layers, int64_t dim, int64_t vocab) {
  std::vector<Spec> s = {{"model.embed.weight", DType::kBF16, {vocab, dim}, 0}};
  for (int l = 0; l < layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* w : {"attn.wq", "attn.wk", "attn.wv", "attn.wo"}) s.push_back({p + w + ".weight", DType::kF32, {dim, dim}, -1});
    s.push_back({p + "mlp.up.weight", DType::kBF16, {4 * dim, dim}, 0});
    s.push_back({p + "mlp.down.weight", DType::kBF16, {dim, 4 * dim}, 1});
    s.push_back({p + "norm.weight", DType::kF16, {dim}, -1});
    s.push_back({"optim." + std::to_string(l) + ".exp_avg.wq", DType::kF32, {dim, dim}, 0});
    s.push_back({"optim." + std::to_string(l) + ".exp_avg_sq.wq", DType::kF32, {dim, dim}, 0});
  }
  s.push_back({"model.head.weight_fp8", DType::kF8E4M3, {dim, dim}, -1});
  s.push_back({"model.vocab_mask", DType::kBool, {vocab}, -1});
  s.push_back({"trainer.step", DType::kI64, {}, -1});
  return s;
}

// This rank's [begin, end) of a dimension of size n split across `world`
// ranks as evenly as possible (the first n % world ranks get one more).
void Split(int64_t n, int world, int rank, int64_t* begin, int64_t* size) {
  int64_t base = n / world, extra = n % world;
  *begin = rank * base + std::min<int64_t>(rank, extra);
  *size = base + (rank < extra ? 1 : 0);
}

// The value of every element of `t` (a region of `spec` at `offsets`) after
// `steps` training steps.
void Fill(const Spec& spec, const std::vector<int64_t>& offsets, Tensor& t, int64_t steps) {
  const uint64_t seed = Seed(spec.fqn);
  const Shape& ls = t.shape();
  const Shape& gs = spec.shape;
  // Iterate local elements, computing the global linear index.
  std::vector<int64_t> idx(ls.size(), 0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint64_t g = 0;
    for (size_t d = 0; d < ls.size(); ++d) g = g * gs[d] + (offsets[d] + idx[d]);
    switch (spec.dtype) {
      case DType::kBF16: t.data_as<uint16_t>()[i] = ToBF16(Gauss(seed, g, 0.02f)); break;
      case DType::kF32: {
        float v = Gauss(seed, g, 1.0f);
        for (int64_t s = 0; s < steps; ++s) v *= 0.999f;  // the "training"
        t.data_as<float>()[i] = v;
        break;
      }
      case DType::kF16: t.data_as<uint16_t>()[i] = 0x3c00; break;  // 1.0
      case DType::kF8E4M3: t.data_as<uint8_t>()[i] = static_cast<uint8_t>(Mix(seed ^ g) & 0x7e); break;
      case DType::kBool: t.data_as<uint8_t>()[i] = (g % 7) != 0; break;
      case DType::kI64: t.data_as<int64_t>()[i] = steps - 1; break;
      default: break;
    }
    for (size_t d = ls.size(); d-- > 0;) {
      if (++idx[d] < ls[d]) break;
      idx[d] = 0;
    }
  }
}

std::string TrainerState(int64_t steps) {
  return "{\"step\": " + std::to_string(steps - 1) + ", \"lr\": 0.0003, \"data_loader\": {\"epoch\": 0, \"offset\": " +
         std::to_string(steps * 4096) + "}}";
}

// The state dict of this rank after `steps` steps (zeros when `zeros`).
StateDict Build(const std::vector<Spec>& specs, int rank, int world, int64_t steps, bool zeros) {
  StateDict sd;
  for (const Spec& s : specs) {
    std::vector<int64_t> offsets(s.shape.size(), 0);
    Shape local = s.shape;
    if (s.shard_dim >= 0) Split(s.shape[s.shard_dim], world, rank, &offsets[s.shard_dim], &local[s.shard_dim]);
    Tensor t = Must(Tensor::Zeros(s.dtype, local), "allocating");
    if (!zeros) Fill(s, offsets, t, steps);
    if (s.shard_dim < 0) {
      CHECK_OK(sd.Add(s.fqn, t));
    } else {
      CHECK_OK(sd.Add(s.fqn, Must(ShardedTensor::Create(s.dtype, s.shape, {{offsets, t}}), "sharding")));
    }
  }
  CHECK_OK(sd.AddBytes("trainer.state", zeros ? "" : TrainerState(steps)));
  return sd;
}

// One training step, in place: the f32 weights decay, the counters move.
void TrainStep(StateDict& sd, int64_t steps_done) {
  auto decay = [](Tensor& t) {
    if (t.dtype() != DType::kF32) return;
    float* p = t.data_as<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] *= 0.999f;
  };
  for (auto& [fqn, e] : sd.mutable_entries()) {
    if (Tensor* t = std::get_if<Tensor>(&e)) {
      decay(*t);
      if (t->dtype() == DType::kI64) *t->data_as<int64_t>() = steps_done;
    } else if (ShardedTensor* st = std::get_if<ShardedTensor>(&e)) {
      for (const Shard& s : st->local_shards()) {
        Tensor local = s.tensor;
        decay(local);
      }
    } else {
      std::get<Bytes>(e).data = TrainerState(steps_done + 1);
    }
  }
}

bool Same(const StateDict& a, const StateDict& b, std::string* bad) {
  for (const auto& [fqn, e] : a.entries()) {
    const Entry* o = b.Find(fqn);
    bool same = o != nullptr;
    if (same && std::holds_alternative<Tensor>(e)) {
      same = std::get<Tensor>(*o).BitwiseEquals(std::get<Tensor>(e));
    } else if (same && std::holds_alternative<ShardedTensor>(e)) {
      const auto& x = std::get<ShardedTensor>(e).local_shards();
      const auto& y = std::get<ShardedTensor>(*o).local_shards();
      for (size_t i = 0; same && i < x.size(); ++i) same = x[i].tensor.BitwiseEquals(y[i].tensor);
    } else if (same) {
      same = std::get<Bytes>(e).data == std::get<Bytes>(*o).data;
    }
    if (!same) {
      *bad = fqn;
      return false;
    }
  }
  return true;
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string store = "demo.ckptdb";
  int steps = 3;
  bool verify_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << "usage: ckptdb-demo [STORE] [--steps N] [--verify-only]\n\n"
                   "Trains a model-like state dict (~250 MiB, mixed dtypes, bf16 weights sharded\n"
                   "across ranks) for N steps (default 3), saving each step into STORE (default\n"
                   "demo.ckptdb) and resuming after the store's latest step when it has one; then\n"
                   "loads the latest step back and checks it bit for bit.\n"
                   "  --verify-only  only load and check the latest step, in this job's sharding\n"
                   "Runs as one process, or as every rank under ckptdb-launch -n N.\n"
                   "Exit code 0 when every byte matched.\n";
      return 0;
    } else if (a == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
      if (steps < 1) {
        std::cerr << "ckptdb-demo: --steps must be at least 1\n";
        return 2;
      }
    } else if (a == "--verify-only") {
      verify_only = true;
    } else if (!a.empty() && a[0] == '-') {
      std::cerr << "ckptdb-demo: unknown option " << a << " (see --help)\n";
      return 2;
    } else {
      store = a;
    }
  }

  // One process, or a rank of a launched job.
  std::unique_ptr<Communicator> comm;
  int rank = 0, world = 1;
  if (std::getenv("CKPTDB_WORLD_SIZE") || std::getenv("WORLD_SIZE")) {
    auto config = Must(DistributedConfig::FromEnvironment(), "reading the job's environment");
    comm = Must(ConnectGloo(config), "joining the job");
    rank = comm->rank();
    world = comm->world_size();
  }
  auto say = [&](const std::string& s) {
    if (rank == 0) std::printf("%s\n", s.c_str());
    std::fflush(stdout);
  };
  char line[256];
  const std::vector<Spec> specs = ModelSpecs(/*layers=*/4, /*dim=*/1024, /*vocab=*/32000);

  auto reader = OpenStoreReader(store);
  int64_t latest = -1;
  if (reader.ok()) {
    if (auto l = (*reader)->LatestStep(); l.ok()) latest = *l;
  } else if (reader.status().code() != StatusCode::kNotFound || verify_only) {
    Die("opening " + store, reader.status());
  }
  LoadOptions lo;
  lo.no_dist = comm == nullptr;
  lo.communicator = comm.get();
  // A job's loads: only the coordinator opens the store's database, and
  // names each rank the files its chunks lie in (OpenSharedStoreReader).
  auto job_reader = [&]() -> std::unique_ptr<StorageReader> {
    if (!comm) return Must(OpenStoreReader(store), "opening the store");
    return Must(OpenSharedStoreReader(store, comm.get()), "opening the store");
  };

  int64_t last = latest;
  StateDict model = Build(specs, rank, world, /*steps=*/latest + 1, /*zeros=*/latest >= 0);
  uint64_t local_bytes = 0;
  for (const auto& [fqn, e] : model.entries()) {
    if (const Tensor* t = std::get_if<Tensor>(&e)) local_bytes += t->nbytes();
    if (const ShardedTensor* t = std::get_if<ShardedTensor>(&e)) local_bytes += t->local_shards()[0].tensor.nbytes();
  }
  std::snprintf(line, sizeof line, "model: %zu entries, %d rank(s), %.1f MiB on rank 0", model.size(), world,
                local_bytes / 1048576.0);
  say(line);

  if (!verify_only) {
    if (latest >= 0) {
      lo.step = latest;
      CHECK_OK(Load(model, *job_reader(), lo));
      say("resumed from step " + std::to_string(latest));
    }
    auto writer = Must(OpenStoreWriter(store, [] {
      StoreOptions o;
      o.compression = Compression::kAuto;  // bf16 weights shrink; random f32 stays raw
      return o;
    }()), "opening the store for writing");
    for (int64_t step = latest + 1; step <= latest + steps; ++step) {
      TrainStep(model, step);
      SaveOptions so;
      so.step = step;
      so.no_dist = comm == nullptr;
      so.communicator = comm.get();
      auto t0 = std::chrono::steady_clock::now();
      CHECK_OK(Save(model, *writer, so));
      double s = Since(t0);
      std::snprintf(line, sizeof line, "step %lld saved in %.2f s", static_cast<long long>(step), s);
      say(line);
    }
    last = latest + steps;
  } else if (latest < 0) {
    Die("verifying", Status::NotFound("store '" + store + "' has no step to verify"));
  }

  // Load the latest step into fresh tensors and check it against what it
  // must hold.
  StateDict loaded = Build(specs, rank, world, last + 1, /*zeros=*/true);
  lo.step = last;
  LoadStats stats;
  auto t0 = std::chrono::steady_clock::now();
  CHECK_OK(Load(loaded, *job_reader(), lo, &stats));
  double s = Since(t0);
  std::string bad;
  bool ok = Same(Build(specs, rank, world, last + 1, false), loaded, &bad);
  if (!ok) {
    std::fprintf(stderr, "ckptdb-demo: rank %d: MISMATCH in '%s' after loading step %lld\n", rank, bad.c_str(),
                 static_cast<long long>(last));
  }
  // Every rank must agree before we claim success.
  std::string verdict = ok ? "1" : "0";
  if (comm) {
    std::vector<std::string> all;
    CHECK_OK(comm->AllGather(verdict, &all));
    for (const std::string& v : all) ok = ok && v == "1";
  }
  if (!ok) return 1;
  std::snprintf(line, sizeof line,
                "step %lld loaded by %d rank(s) in %.2f s (%llu chunks on rank 0) and matches bit for bit",
                static_cast<long long>(last), world, s, static_cast<unsigned long long>(stats.chunks_read));
  say(line);
  return 0;
}
