// ckptdb-demo: a small training loop that checkpoints into a ckptdb store.
//
// It builds a model-like state dict (embeddings in bf16, attention weights in
// f32, norms in f16, an fp8 copy of a weight, Adam-style moments, a step
// counter, a mask and a JSON bytes entry: about 250 MiB), resumes from the
// store's latest step when there is one, trains a few steps (a cheap
// deterministic update), saves each as a step, then loads the latest step
// back into fresh tensors and checks every byte.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>

#include "ckptdb/ckptdb.h"

using namespace ckptdb;

namespace {

#define CHECK_OK(expr)                                                        \
  do {                                                                        \
    ::ckptdb::Status _s = (expr);                                             \
    if (!_s.ok()) {                                                           \
      std::cerr << "ckptdb-demo: " << #expr << ": " << _s.ToString() << "\n"; \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

template <typename T>
T Must(StatusOr<T> v) {
  if (!v.ok()) {
    std::cerr << "ckptdb-demo: " << v.status().ToString() << "\n";
    std::exit(1);
  }
  return std::move(v).value();
}

uint16_t FloatToBF16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return static_cast<uint16_t>((b + 0x7fff + ((b >> 16) & 1)) >> 16);  // round to nearest even
}

// A state dict shaped like a small transformer and its optimizer.
StateDict MakeModel(int layers, int64_t dim, int64_t vocab) {
  StateDict sd;
  std::mt19937 rng(1234);
  std::normal_distribution<float> g(0.f, 0.02f);
  auto randn_f32 = [&](Shape s) {
    Tensor t = Must(Tensor::Zeros(DType::kF32, std::move(s)));
    for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = g(rng);
    return t;
  };
  auto randn_bf16 = [&](Shape s) {
    Tensor t = Must(Tensor::Zeros(DType::kBF16, std::move(s)));
    for (int64_t i = 0; i < t.numel(); ++i) t.data_as<uint16_t>()[i] = FloatToBF16(g(rng));
    return t;
  };
  CHECK_OK(sd.Add("model.embed.weight", randn_bf16({vocab, dim})));
  for (int l = 0; l < layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* w : {"attn.wq", "attn.wk", "attn.wv", "attn.wo"}) {
      CHECK_OK(sd.Add(p + w + ".weight", randn_f32({dim, dim})));
    }
    CHECK_OK(sd.Add(p + "mlp.up.weight", randn_bf16({4 * dim, dim})));
    CHECK_OK(sd.Add(p + "mlp.down.weight", randn_bf16({dim, 4 * dim})));
    Tensor norm = Must(Tensor::Zeros(DType::kF16, {dim}));
    for (int64_t i = 0; i < dim; ++i) norm.data_as<uint16_t>()[i] = 0x3c00;  // 1.0 in f16
    CHECK_OK(sd.Add(p + "norm.weight", norm));
    CHECK_OK(sd.Add("optim.exp_avg." + std::to_string(l) + ".wq", randn_f32({dim, dim})));
    CHECK_OK(sd.Add("optim.exp_avg_sq." + std::to_string(l) + ".wq", randn_f32({dim, dim})));
  }
  Tensor fp8 = Must(Tensor::Zeros(DType::kF8E4M3, {dim, dim}));
  for (int64_t i = 0; i < fp8.numel(); ++i) fp8.data_as<uint8_t>()[i] = static_cast<uint8_t>(rng() & 0x7e);
  CHECK_OK(sd.Add("model.head.weight_fp8", fp8));
  Tensor mask = Must(Tensor::Zeros(DType::kBool, {vocab}));
  for (int64_t i = 0; i < vocab; ++i) mask.data_as<uint8_t>()[i] = (i % 7) != 0;
  CHECK_OK(sd.Add("model.vocab_mask", mask));
  CHECK_OK(sd.Add("trainer.step", Must(Tensor::Zeros(DType::kI64, {}))));
  CHECK_OK(sd.AddBytes("trainer.state", "{}"));
  return sd;
}

// One "training step": nudges every float weight and bumps the counter.
void TrainStep(StateDict& sd, int64_t step) {
  for (auto& [fqn, entry] : sd.mutable_entries()) {
    if (Tensor* t = std::get_if<Tensor>(&entry)) {
      if (t->dtype() == DType::kF32) {
        float* p = t->data_as<float>();
        for (int64_t i = 0; i < t->numel(); i += 7) p[i] *= 0.999f;
      } else if (t->dtype() == DType::kI64) {
        *t->data_as<int64_t>() = step;
      }
    } else if (Bytes* b = std::get_if<Bytes>(&entry)) {
      b->data = "{\"step\": " + std::to_string(step) + ", \"lr\": 0.0003, \"data_loader\": {\"epoch\": 0, \"offset\": " +
                std::to_string(step * 4096) + "}}";
    }
  }
}

// Fresh tensors of the same shapes, for loading into.
StateDict EmptyLike(const StateDict& sd) {
  StateDict out;
  for (const auto& [fqn, entry] : sd.entries()) {
    if (const Tensor* t = std::get_if<Tensor>(&entry)) {
      CHECK_OK(out.Add(fqn, Must(Tensor::Zeros(t->dtype(), t->shape()))));
    } else {
      CHECK_OK(out.Add(fqn, Bytes{}));
    }
  }
  return out;
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string store = "demo.ckptdb";
  int steps = 3;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << "usage: ckptdb-demo [STORE] [--steps N]\n\n"
                   "Trains a small model-like state dict (~250 MiB, mixed dtypes) for N steps\n"
                   "(default 3), saving each step into STORE (default demo.ckptdb), resuming\n"
                   "from the store's latest step when it has one; then loads the latest step\n"
                   "back and checks it bit for bit. Exit code 0 when everything matched.\n";
      return 0;
    } else if (a == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
      if (steps < 1) {
        std::cerr << "ckptdb-demo: --steps must be at least 1\n";
        return 2;
      }
    } else if (!a.empty() && a[0] == '-') {
      std::cerr << "ckptdb-demo: unknown option " << a << " (see --help)\n";
      return 2;
    } else {
      store = a;
    }
  }

  StateDict model = MakeModel(/*layers=*/4, /*dim=*/1024, /*vocab=*/32000);
  uint64_t total = 0;
  for (const auto& [fqn, e] : model.entries()) {
    if (const Tensor* t = std::get_if<Tensor>(&e)) total += t->nbytes();
  }
  std::printf("model: %zu entries, %.1f MiB\n", model.size(), total / 1048576.0);

  StoreOptions opts;
  opts.compression = Compression::kAuto;  // bf16 weights shrink; random f32 stays raw
  auto writer = Must(OpenStoreWriter(store, opts));

  // Resume from the latest committed step, as a restarted job would.
  int64_t first = 0;
  if (auto reader = OpenStoreReader(store); reader.ok()) {
    if (auto latest = (*reader)->LatestStep(); latest.ok()) {
      LoadOptions lo;
      lo.step = *latest;
      lo.no_dist = true;
      CHECK_OK(Load(model, **reader, lo));
      first = *latest + 1;
      std::printf("resumed from step %lld\n", static_cast<long long>(*latest));
    }
  }

  for (int64_t step = first; step < first + steps; ++step) {
    TrainStep(model, step);
    SaveOptions so;
    so.step = step;
    so.no_dist = true;
    auto t0 = std::chrono::steady_clock::now();
    CHECK_OK(Save(model, *writer, so));
    double s = Seconds(t0);
    std::printf("step %lld saved in %.2f s (%.0f MiB/s)\n", static_cast<long long>(step), s, total / 1048576.0 / s);
  }
  int64_t last = first + steps - 1;

  auto reader = Must(OpenStoreReader(store));
  StateDict loaded = EmptyLike(model);
  LoadOptions lo;
  lo.step = last;
  lo.no_dist = true;
  LoadStats stats;
  auto t0 = std::chrono::steady_clock::now();
  CHECK_OK(Load(loaded, *reader, lo, &stats));
  double s = Seconds(t0);
  std::printf("step %lld loaded in %.2f s (%.0f MiB/s, %llu chunks)\n", static_cast<long long>(last), s,
              total / 1048576.0 / s, static_cast<unsigned long long>(stats.chunks_read));

  for (const auto& [fqn, entry] : model.entries()) {
    const Entry* got = loaded.Find(fqn);
    bool same = false;
    if (const Tensor* t = std::get_if<Tensor>(&entry)) {
      same = std::get<Tensor>(*got).BitwiseEquals(*t);
    } else {
      same = std::get<Bytes>(*got).data == std::get<Bytes>(entry).data;
    }
    if (!same) {
      std::cerr << "ckptdb-demo: MISMATCH in '" << fqn << "' after loading step " << last << "\n";
      return 1;
    }
  }
  std::printf("step %lld matches the trained state bit for bit (%zu entries)\n", static_cast<long long>(last),
              model.size());
  return 0;
}
