// ckptdb-gpu-bench: how fast ckptdb takes CUDA tensors off the device,
// against a plain pinned cudaMemcpy of the same bytes (the hardware's
// device-to-host limit), for 1 to 8 GiB of bf16 tensors.
//
// ckptdb's figure is what a training loop waits for: the time SaveAsync
// blocks the caller while it stages device tensors into its pinned slot (the
// rest of the save runs in the background). Then, for the first size, a
// synchronous Save of the device tensors against a Save of the same bytes
// from host memory: there the device-to-host copies are made chunk by chunk
// on the store's workers, overlapped with checksumming and writing, so the
// ratio shows what they add to a save.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_util.h"
#include "ckptdb/ckptdb.h"

using namespace ckptdb;
using ckptdb::bench::Median;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "ckptdb-gpu-bench: %s\n", what.c_str());
  std::exit(1);
}
void Cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Die(std::string(what) + ": " + cudaGetErrorString(e));
}

// Median seconds of a synchronous Save of `sd` (3 runs).
double TimeSave(StoreWriter& writer, const StateDict& sd, int64_t* step) {
  std::vector<double> t;
  for (int rep = 0; rep < 3; ++rep) {
    SaveOptions o;
    o.no_dist = true;
    o.step = (*step)++;
    auto t0 = Clock::now();
    Status st = Save(sd, writer, o);
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    if (!st.ok()) Die(st.ToString());
    (void)writer.DeleteStep(o.step);
  }
  return Median(t);
}

// Save of device tensors against Save of a host copy of the same bytes.
std::string SyncSaveRow(StoreWriter& writer, const StateDict& device_sd, size_t bytes, int64_t* step) {
  StateDict host_sd;
  for (const auto& [fqn, e] : device_sd.entries()) {
    const Tensor& t = std::get<Tensor>(e);
    Tensor h = Tensor::Zeros(t.dtype(), t.shape()).value();
    Cuda(cudaMemcpy(h.data(), t.data(), t.nbytes(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    (void)host_sd.Add(fqn, h);
  }
  const double from_host = TimeSave(writer, host_sd, step);
  const double from_device = TimeSave(writer, device_sd, step);
  char line[256];
  std::snprintf(line, sizeof line,
                "sync Save of %.0f GiB: from host tensors %.3f s, from device tensors %.3f s: device/host %.2fx "
                "(pinned staging peak %.0f MiB)\n",
                bytes / double(1 << 30), from_host, from_device, from_device / from_host,
                GetDeviceStagingStats().peak_in_use_bytes / double(1 << 20));
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> gib = {1, 2, 4, 8};
  if (argc > 1) {
    gib.clear();
    for (int i = 1; i < argc; ++i) gib.push_back(std::atoi(argv[i]));
  }
  int devices = 0;
  Cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  if (devices == 0) Die("no CUDA device");
  cudaDeviceProp prop;
  Cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("device 0: %s\n", prop.name);
  std::printf("%6s %14s %14s %14s %8s\n", "GiB", "pinned memcpy", "ckptdb stage", "ckptdb GB/s", "ratio");
  const std::string dir = std::filesystem::temp_directory_path() / "ckptdb-gpu-bench";
  std::filesystem::remove_all(dir);
  auto writer = OpenStoreWriter(dir);
  if (!writer.ok()) Die(writer.status().ToString());
  int64_t step = 0;
  std::vector<std::string> sync_rows;
  for (int g : gib) {
    const size_t bytes = size_t(g) << 30;
    void* dev = nullptr;
    void* pinned = nullptr;
    Cuda(cudaMalloc(&dev, bytes), "cudaMalloc");
    Cuda(cudaMemset(dev, 0x3c, bytes), "cudaMemset");
    Cuda(cudaHostAlloc(&pinned, bytes, cudaHostAllocDefault), "cudaHostAlloc");
    std::vector<double> raw, staged;
    for (int rep = 0; rep < 3; ++rep) {
      auto t0 = Clock::now();
      Cuda(cudaMemcpy(pinned, dev, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
      raw.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    cudaFreeHost(pinned);
    // bf16 tensors of 256 MiB on the device.
    StateDict sd;
    const size_t per = 256u << 20;
    for (size_t off = 0, i = 0; off < bytes; off += per, ++i) {
      Tensor t = Tensor::View(DType::kBF16, {int64_t(per / 2)}, static_cast<char*>(dev) + off, per, Device::CUDA(0))
                     .value();
      (void)sd.Add("t" + std::to_string(i), t);
    }
    {
      AsyncSaveOptions o;
      o.no_dist = true;
      AsyncSaver saver(**writer, o);
      for (int rep = 0; rep < 3; ++rep) {
        auto h = saver.SaveAsync(sd, step++);
        if (!h.ok()) Die(h.status().ToString());
        staged.push_back((*h)->blocked_seconds());
        Status st = (*h)->Wait();
        if (!st.ok()) Die(st.ToString());
        (void)(*writer)->DeleteStep(step - 1);
      }
    }
    const double r = Median(raw), s = Median(staged);
    std::printf("%6d %12.3f s %12.3f s %14.2f %7.2fx\n", g, r, s, bytes / s / 1e9, r / s);
    if (g == gib.front()) sync_rows.push_back(SyncSaveRow(**writer, sd, bytes, &step));
    cudaFree(dev);
  }
  for (const std::string& row : sync_rows) std::printf("%s", row.c_str());
  std::filesystem::remove_all(dir);
  return 0;
}
