// CUDA tensors. Where no GPU can be used (a build without the CUDA path, or
// a machine without a device) the device tests report themselves skipped,
// and saving a CUDA tensor must be a clear error that leaves the store as it
// was. tools/gpu-check.sh runs these on a GPU machine.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <mutex>

#include "ckptdb/ckptdb.h"
#include "device/device_backend.h"
#include "device/device_staging.h"
#include "test_util.h"
#include "thread_communicator.h"

#ifdef CKPTDB_TEST_CUDA
#include <cuda_runtime.h>
#endif

namespace ckptdb {
namespace {

using testing::PatternTensor;
using testing::TempDir;

bool HaveGpu() { return CudaDeviceCount() > 0; }

TEST(Cuda, SavingADeviceTensorWithoutAUsableGpuIsAClearError) {
  if (HaveGpu()) GTEST_SKIP() << "a GPU is present: this test hands the driver a host pointer";
  TempDir dir;
  auto w = OpenStoreWriter(dir.Sub("s"));
  ASSERT_TRUE(w.ok());
  float not_device_memory[4] = {1, 2, 3, 4};
  StateDict sd;
  ASSERT_OK(sd.Add("g", Tensor::View(DType::kF32, {4}, not_device_memory, 16, Device::CUDA(0)).value()));
  Status st = testing::SaveNoDist(sd, **w, 1);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("failed to plan the save"), std::string::npos) << st;
  EXPECT_NE(st.ToString().find("entry 'g' on cuda:0"), std::string::npos) << st;
  if (CudaBuilt()) {
    EXPECT_NE(st.ToString().find("CUDA error in"), std::string::npos) << st;
  } else {
    EXPECT_NE(st.ToString().find("no CUDA support"), std::string::npos) << st;
  }
  // Nothing was written.
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("s") + "/db"));
  // A load into a CUDA target fails alike, naming the entry.
  StateDict cpu;
  ASSERT_OK(cpu.Add("g", PatternTensor(DType::kF32, {4}, 1)));
  ASSERT_OK(testing::SaveNoDist(cpu, **w, 2));
  StateDict target;
  float out[4] = {0, 0, 0, 0};
  ASSERT_OK(target.Add("g", Tensor::View(DType::kF32, {4}, out, 16, Device::CUDA(0)).value()));
  auto r = OpenStoreReader(dir.Sub("s"));
  ASSERT_TRUE(r.ok());
  st = testing::LoadNoDist(target, **r, 2);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("entry 'g' on cuda:0"), std::string::npos) << st;
}

#ifdef CKPTDB_TEST_CUDA

// A device copy of `t` (freed with the returned tensor's owner below).
struct DeviceTensor {
  void* ptr = nullptr;
  Tensor view;
  DeviceTensor(const Tensor& host, int device) {
    cudaSetDevice(device);
    EXPECT_EQ(cudaMalloc(&ptr, std::max<size_t>(host.nbytes(), 1)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), host.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
    view = Tensor::View(host.dtype(), host.shape(), ptr, host.nbytes(), Device::CUDA(device)).value();
  }
  ~DeviceTensor() { cudaFree(ptr); }
  Tensor ToHost() const {
    Tensor h = Tensor::Zeros(view.dtype(), view.shape()).value();
    EXPECT_EQ(cudaMemcpy(h.data(), ptr, h.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

TEST(Cuda, EveryDTypeRoundTripsOnTheDevice) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  TempDir dir;
  auto w = OpenStoreWriter(dir.Sub("s"));
  ASSERT_TRUE(w.ok());
  std::vector<std::unique_ptr<DeviceTensor>> saved, loaded;
  StateDict sd, target;
  uint32_t seed = 0;
  for (DType d : kAllDTypes) {
    Tensor host = PatternTensor(d, {33, 65}, ++seed);
    saved.push_back(std::make_unique<DeviceTensor>(host, 0));
    loaded.push_back(std::make_unique<DeviceTensor>(testing::ZerosLike(host), 0));
    ASSERT_OK(sd.Add(DTypeName(d), saved.back()->view));
    ASSERT_OK(target.Add(DTypeName(d), loaded.back()->view));
  }
  ASSERT_OK(testing::SaveNoDist(sd, **w, 1));
  auto r = OpenStoreReader(dir.Sub("s"));
  ASSERT_OK(testing::LoadNoDist(target, **r, 1));
  for (size_t i = 0; i < saved.size(); ++i) EXPECT_TRUE(loaded[i]->ToHost().BitwiseEquals(saved[i]->ToHost()));
}

TEST(Cuda, CpuSavedLoadsIntoGpuAndBack) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  TempDir dir;
  auto w = OpenStoreWriter(dir.Sub("s"));
  // 42 MB: eleven 4 MiB chunks each way, through a pool of 8 MiB.
  struct LimitBack {
    ~LimitBack() { (void)SetDeviceStagingLimit(kDefaultDeviceStagingBytes); }
  } limit_back;
  ASSERT_OK(SetDeviceStagingLimit(8 << 20));
  Tensor host = PatternTensor(DType::kBF16, {5000, 4200}, 3);
  StateDict cpu;
  ASSERT_OK(cpu.Add("w", host));
  ASSERT_OK(testing::SaveNoDist(cpu, **w, 1));
  DeviceTensor dev(testing::ZerosLike(host), 0);
  StateDict gpu_target;
  ASSERT_OK(gpu_target.Add("w", dev.view));
  auto r = OpenStoreReader(dir.Sub("s"));
  ASSERT_OK(testing::LoadNoDist(gpu_target, **r, 1));
  EXPECT_TRUE(dev.ToHost().BitwiseEquals(host));
  // And saved from the GPU, loaded on the CPU.
  StateDict gpu;
  ASSERT_OK(gpu.Add("w", dev.view));
  ASSERT_OK(testing::SaveNoDist(gpu, **w, 2));
  ASSERT_OK((*r)->Refresh());
  auto back = LoadWhole(**r, 2);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(std::get<Tensor>(*back->Find("w")).BitwiseEquals(host));
  EXPECT_LE(GetDeviceStagingStats().pinned_bytes, 8u << 20);
}

TEST(Cuda, ReshardedLoadIntoGpuShards) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  TempDir dir;
  StoreOptions so;
  so.chunk_bytes = 1 << 20;
  auto w = OpenStoreWriter(dir.Sub("s"), so);
  Tensor full = PatternTensor(DType::kF32, {2048, 1000}, 9);  // 8 MB in 1 MiB chunks
  StateDict sd;
  ASSERT_OK(sd.Add("w", full));
  ASSERT_OK(testing::SaveNoDist(sd, **w, 1));
  auto r = OpenStoreReader(dir.Sub("s"));
  // Rows (chunk by chunk onto the device) and columns (strided: through a
  // host tensor), on two devices when there are two.
  const int d1 = CudaDeviceCount() > 1 ? 1 : 0;
  DeviceTensor top(Tensor::Zeros(DType::kF32, {1000, 1000}).value(), 0);
  DeviceTensor bottom(Tensor::Zeros(DType::kF32, {1048, 1000}).value(), d1);
  DeviceTensor left(Tensor::Zeros(DType::kF32, {2048, 400}).value(), d1);
  StateDict rows, cols;
  ASSERT_OK(rows.Add("w", ShardedTensor::Create(DType::kF32, {2048, 1000}, {{{0, 0}, top.view}, {{1000, 0}, bottom.view}})
                              .value()));
  ASSERT_OK(cols.Add("w", ShardedTensor::Create(DType::kF32, {2048, 1000}, {{{0, 0}, left.view}}).value()));
  ASSERT_OK(testing::LoadNoDist(rows, **r, 1));
  ASSERT_OK(testing::LoadNoDist(cols, **r, 1));
  Tensor t = top.ToHost(), b = bottom.ToHost(), l = left.ToHost();
  EXPECT_EQ(0, std::memcmp(t.data(), full.data(), t.nbytes()));
  EXPECT_EQ(0, std::memcmp(b.data(), full.data_as<float>() + 1000 * 1000, b.nbytes()));
  for (int64_t i = 0; i < 2048; ++i) {
    ASSERT_EQ(0, std::memcmp(l.data_as<float>() + i * 400, full.data_as<float>() + i * 1000, 400 * 4)) << "row " << i;
  }
}

TEST(Cuda, ShardedGpuTensorsAcrossRanksAndAsyncSave) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  TempDir dir;
  const std::string store = dir.Sub("s");
  Tensor full = PatternTensor(DType::kF32, {64, 48}, 4);
  std::mutex mu;
  std::vector<Status> st(2);
  testing::RunRanksAsThreads(2, [&](int rank, Communicator& comm) {
    Tensor part = Tensor::Copy(DType::kF32, {32, 48}, full.data_as<float>() + rank * 32 * 48, 32 * 48 * 4).value();
    DeviceTensor dev(part, 0);
    StateDict sd;
    (void)sd.Add("w", ShardedTensor::Create(DType::kF32, {64, 48}, {{{32 * rank, 0}, dev.view}}).value());
    auto w = OpenStoreWriter(store);
    AsyncSaveOptions o;
    o.communicator = &comm;
    AsyncSaver saver(**w, o);
    auto h = saver.SaveAsync(sd, 5);
    Status s = h.ok() ? (*h)->Wait() : h.status();
    std::lock_guard<std::mutex> lock(mu);
    st[rank] = s;
  });
  for (const Status& s : st) ASSERT_OK(s);
  auto r = OpenStoreReader(store);
  auto back = LoadWhole(**r, 5);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(std::get<Tensor>(*back->Find("w")).BitwiseEquals(full));
}

#endif  // CKPTDB_TEST_CUDA

}  // namespace
}  // namespace ckptdb
