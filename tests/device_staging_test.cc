// The device paths of save, load and async save, driven on machines without
// a GPU through FakeDeviceBackend (tests/fake_device_backend.h): CUDA tensors
// stream through a bounded pinned pool chunk by chunk, load targets on a
// device take each chunk as it is read (or a host stand-in when they are
// strided), failures name the entry and reach every rank, and AsyncSaver
// stages device state into pinned slots allocated once.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <chrono>
#include <mutex>
#include <thread>

#include "ckptdb/ckptdb.h"
#include "device/device_backend.h"
#include "fake_device_backend.h"
#include "device/pinned_pool.h"
#include "test_util.h"
#include "thread_communicator.h"

namespace ckptdb {
namespace {

using testing::FakeDeviceBackend;
using testing::PatternTensor;
using testing::TempDir;

class DeviceStagingTest : public ::testing::Test {
 protected:
  DeviceStagingTest() : fake_(2), scoped_(&fake_) {}
  ~DeviceStagingTest() override { EXPECT_OK(SetDeviceStagingLimit(kDefaultDeviceStagingBytes)); }

  std::unique_ptr<StoreWriter> Writer(uint64_t chunk_bytes = 1 << 20, int threads = 4) {
    StoreOptions o;
    o.chunk_bytes = chunk_bytes;
    o.threads = threads;
    auto w = OpenStoreWriter(dir_.Sub("s"), o);
    EXPECT_TRUE(w.ok()) << w.status();
    return std::move(w).value();
  }
  std::unique_ptr<StoreReader> Reader() {
    auto r = OpenStoreReader(dir_.Sub("s"));
    EXPECT_TRUE(r.ok()) << r.status();
    return std::move(r).value();
  }

  TempDir dir_;
  FakeDeviceBackend fake_;
  ScopedDeviceBackendForTesting scoped_;
};

TEST_F(DeviceStagingTest, SaveStreamsDeviceTensorsChunkByChunkThroughABoundedPool) {
  // 2 chunks of 1 MiB, for 4 workers and a state of 24 MiB on the devices.
  ASSERT_OK(SetDeviceStagingLimit(2 << 20));
  fake_.set_copy_delay_us(2000);
  const Tensor w = PatternTensor(DType::kF32, {3 << 20}, 1);    // 12 MiB on cuda:0
  const Tensor e = PatternTensor(DType::kBF16, {4 << 20}, 2);   // 8 MiB on cuda:1
  const Tensor s0 = PatternTensor(DType::kF32, {512, 1024}, 3);  // 2 MiB shards on cuda:0
  const Tensor s1 = PatternTensor(DType::kF32, {512, 1024}, 4);
  const Tensor cpu = PatternTensor(DType::kI64, {1000}, 5);
  StateDict sd;
  ASSERT_OK(sd.Add("w", fake_.ToDevice(w, 0)));
  ASSERT_OK(sd.Add("e", fake_.ToDevice(e, 1)));
  ASSERT_OK(sd.Add("s", ShardedTensor::Create(DType::kF32, {1024, 1024},
                                              {Shard{{0, 0}, fake_.ToDevice(s0, 0)}, Shard{{512, 0}, fake_.ToDevice(s1, 0)}})
                            .value()));
  ASSERT_OK(sd.Add("cpu", cpu));
  ASSERT_OK(sd.Add("blob", Bytes{"opaque"}));
  const uint64_t device_bytes = w.nbytes() + e.nbytes() + s0.nbytes() + s1.nbytes();

  auto writer = Writer();
  const DeviceStagingStats before = GetDeviceStagingStats();
  fake_.QueueKernels(0);
  fake_.QueueKernels(1);
  ASSERT_OK(testing::SaveNoDist(sd, *writer, 1));
  // The save waited for the kernels queued on both devices before copying.
  EXPECT_EQ(fake_.copies_racing_kernels(), 0u);
  EXPECT_EQ(fake_.synchronizes(), 2u);
  const DeviceStagingStats after = GetDeviceStagingStats();
  EXPECT_EQ(after.bytes_to_host - before.bytes_to_host, device_bytes);
  // Never the whole state in pinned memory: at most the limit, ever.
  EXPECT_LE(fake_.peak_live_pinned_bytes(), 2u << 20);
  EXPECT_GT(fake_.peak_live_pinned_bytes(), 0u);
  // Chunks were copied off the device by several workers at once.
  EXPECT_GE(fake_.max_concurrent_copies(), 2);
  // Every device copy of the save landed in pinned memory.
  EXPECT_EQ(fake_.copies_with_pageable_host_memory(), 0u);

  // Read back on the CPU, bit for bit.
  auto reader = Reader();
  auto whole = LoadWhole(*reader, 1, {});
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(std::get<Tensor>(*whole->Find("w")).BitwiseEquals(w));
  EXPECT_TRUE(std::get<Tensor>(*whole->Find("e")).BitwiseEquals(e));
  EXPECT_TRUE(std::get<Tensor>(*whole->Find("cpu")).BitwiseEquals(cpu));
  const Tensor& s = std::get<Tensor>(*whole->Find("s"));
  EXPECT_EQ(0, std::memcmp(s.data(), s0.data(), s0.nbytes()));
  EXPECT_EQ(0, std::memcmp(static_cast<char*>(s.data()) + s0.nbytes(), s1.data(), s1.nbytes()));

  // The pool's buffers are reused by the next save: no new allocations.
  const uint64_t allocations = fake_.pinned_allocations();
  ASSERT_OK(testing::SaveNoDist(sd, *writer, 2));
  EXPECT_EQ(fake_.pinned_allocations(), allocations);
}

TEST_F(DeviceStagingTest, LoadIntoDeviceTargetsSameShardingReshardedAndConverted) {
  ASSERT_OK(SetDeviceStagingLimit(4 << 20));
  const Tensor full = PatternTensor(DType::kF32, {1024, 768}, 7);  // 3 MiB
  const size_t half = full.nbytes() / 2;
  StateDict saved;
  ASSERT_OK(saved.Add("rows", ShardedTensor::Create(DType::kF32, {1024, 768},
                                                    {Shard{{0, 0}, Tensor::Copy(DType::kF32, {512, 768}, full.data(), half).value()},
                                                     Shard{{512, 0}, Tensor::Copy(DType::kF32, {512, 768},
                                                                                  static_cast<char*>(full.data()) + half, half)
                                                                         .value()}})
                                  .value()));
  ASSERT_OK(saved.Add("plain", full));
  auto writer = Writer();
  ASSERT_OK(testing::SaveNoDist(saved, *writer, 3));
  auto reader = Reader();

  // Row shards on cuda:1 (each chunk straight to the device), a plain
  // tensor on cuda:0, and column shards on cuda:0 (strided: a host stand-in).
  StateDict target;
  ASSERT_OK(target.Add("rows", ShardedTensor::Create(DType::kF32, {1024, 768},
                                                     {Shard{{0, 0}, fake_.DeviceZeros(DType::kF32, {256, 768}, 1)},
                                                      Shard{{256, 0}, fake_.DeviceZeros(DType::kF32, {768, 768}, 1)}})
                                   .value()));
  ASSERT_OK(target.Add("plain", fake_.DeviceZeros(DType::kF32, {1024, 768}, 0)));
  const DeviceStagingStats before = GetDeviceStagingStats();
  fake_.QueueKernels(1);
  ASSERT_OK(testing::LoadNoDist(target, *reader, 3));
  EXPECT_EQ(fake_.copies_racing_kernels(), 0u);
  EXPECT_EQ(GetDeviceStagingStats().bytes_to_device - before.bytes_to_device, 2 * full.nbytes());
  const auto& shards = std::get<ShardedTensor>(*target.Find("rows")).local_shards();
  Tensor r0 = FakeDeviceBackend::ReadBack(shards[0].tensor), r1 = FakeDeviceBackend::ReadBack(shards[1].tensor);
  EXPECT_EQ(0, std::memcmp(r0.data(), full.data(), r0.nbytes()));
  EXPECT_EQ(0, std::memcmp(r1.data(), static_cast<char*>(full.data()) + r0.nbytes(), r1.nbytes()));
  EXPECT_TRUE(FakeDeviceBackend::ReadBack(std::get<Tensor>(*target.Find("plain"))).BitwiseEquals(full));

  // Columns: each shard is a strided window of every saved row.
  StateDict cols;
  ASSERT_OK(cols.Add("rows", ShardedTensor::Create(DType::kF32, {1024, 768},
                                                   {Shard{{0, 0}, fake_.DeviceZeros(DType::kF32, {1024, 300}, 0)},
                                                    Shard{{0, 300}, fake_.DeviceZeros(DType::kF32, {1024, 468}, 0)}})
                                 .value()));
  ASSERT_OK(testing::LoadNoDist(cols, *reader, 3));
  const auto& cs = std::get<ShardedTensor>(*cols.Find("rows")).local_shards();
  for (int k = 0; k < 2; ++k) {
    Tensor got = FakeDeviceBackend::ReadBack(cs[k].tensor);
    const int64_t c0 = cs[k].offsets[1], w = cs[k].tensor.shape()[1];
    for (int64_t r = 0; r < 1024; r += 97) {
      for (int64_t c = 0; c < w; c += 13) {
        ASSERT_EQ(got.data_as<float>()[r * w + c], full.data_as<float>()[r * 768 + c0 + c]) << r << "," << c;
      }
    }
  }

  // Converted on the way in: f32 saved, bf16 on the device (a 1.5 MiB host
  // stand-in, copied over in pieces that fit a 1 MiB limit).
  ASSERT_OK(SetDeviceStagingLimit(1 << 20));
  StateDict conv;
  ASSERT_OK(conv.Add("plain", fake_.DeviceZeros(DType::kBF16, {1024, 768}, 0)));
  LoadOptions lo;
  lo.step = 3;
  lo.no_dist = true;
  lo.convert_dtype = true;
  ASSERT_OK(Load(conv, *reader, lo));
  Tensor expect = Tensor::Zeros(DType::kBF16, {1024, 768}).value();
  ConvertElements(DType::kF32, full.data(), DType::kBF16, expect.data(), full.numel());
  EXPECT_TRUE(FakeDeviceBackend::ReadBack(std::get<Tensor>(*conv.Find("plain"))).BitwiseEquals(expect));
  EXPECT_LE(fake_.peak_live_pinned_bytes(), 4u << 20);
}

TEST_F(DeviceStagingTest, PoolBuffersAreReusedOnlyForTheirOwnSize) {
  // Two big buffers in the pool (as a save with big chunks leaves them).
  // Small chunks next must not each take a big one (that would allow two
  // copies at a time under this limit).
  ASSERT_OK(SetDeviceStagingLimit(8 << 20));
  {
    auto a = LeasePinned(4 << 20, 0), b = LeasePinned(4 << 20, 0);
    ASSERT_TRUE(a.ok() && b.ok());
  }
  ASSERT_EQ(fake_.live_pinned_bytes(), 8u << 20);
  fake_.set_copy_delay_us(3000);
  StateDict sd;
  ASSERT_OK(sd.Add("w", fake_.ToDevice(PatternTensor(DType::kF32, {2 << 20}, 1), 0)));  // 8 MiB
  auto small = Writer(256 << 10, 4);
  ASSERT_OK(testing::SaveNoDist(sd, *small, 2));
  EXPECT_GE(fake_.max_concurrent_copies(), 3);
  EXPECT_LE(fake_.peak_live_pinned_bytes(), 8u << 20);
}

TEST_F(DeviceStagingTest, PoolServesRequestsInTheOrderTheyArrive) {
  // A big request waiting for room is not overtaken by small ones that
  // would fit: otherwise a stream of chunks could starve it.
  ASSERT_OK(SetDeviceStagingLimit(8 << 20));
  auto first = LeasePinned(4 << 20, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  PinnedLease held = std::move(first).value();
  std::mutex mu;
  std::vector<std::string> order;
  std::thread big([&] {
    auto l = LeasePinned(8 << 20, 0);
    EXPECT_TRUE(l.ok()) << l.status();
    std::lock_guard<std::mutex> lock(mu);
    order.push_back("big");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // big is waiting
  std::thread small([&] {
    auto l = LeasePinned(64 << 10, 0);  // would fit beside `held` at once
    EXPECT_TRUE(l.ok()) << l.status();
    std::lock_guard<std::mutex> lock(mu);
    order.push_back("small");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(order.empty()) << order.front();
  }
  held = PinnedLease();  // gives the 4 MiB back
  big.join();
  small.join();
  EXPECT_EQ(order, (std::vector<std::string>{"big", "small"}));
}

TEST_F(DeviceStagingTest, LoweringTheLimitUnderAWaitingCopyFailsTheSaveInsteadOfHanging) {
  ASSERT_OK(SetDeviceStagingLimit(2 << 20));
  fake_.set_copy_delay_us(50000);  // 24 chunks, 2 at a time: over half a second
  StateDict sd;
  ASSERT_OK(sd.Add("w", fake_.ToDevice(PatternTensor(DType::kF32, {6 << 20}, 1), 0)));
  auto writer = Writer(1 << 20, 4);
  Status st;
  std::thread save([&] { st = testing::SaveNoDist(sd, *writer, 1); });
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  EXPECT_OK(SetDeviceStagingLimit(512 << 10));  // not ASSERT: the thread must be joined
  save.join();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("over the device staging limit of 524288 bytes"), std::string::npos) << st;
  auto steps = Reader()->ListSteps();
  ASSERT_TRUE(steps.ok());
  EXPECT_TRUE(steps->empty());
}

TEST_F(DeviceStagingTest, AFailedDeviceCopyReachesEveryRankAndCommitsNothing) {
  auto writer = Writer(1 << 16, 2);
  std::mutex mu;  // FakeDeviceBackend allocations from several rank threads
  std::vector<Status> results(3);
  testing::RunRanksAsThreads(3, [&](int rank, Communicator& comm) {
    Tensor dev;
    {
      std::lock_guard<std::mutex> lock(mu);
      dev = fake_.ToDevice(PatternTensor(DType::kF32, {64, 1024}, 10 + rank), rank % 2);
      if (rank == 1) fake_.FailCopiesTouching(static_cast<char*>(dev.data()) + (100 << 10), 1);
    }
    StateDict sd;
    ASSERT_OK(sd.Add("w", ShardedTensor::Create(DType::kF32, {192, 1024}, {Shard{{64 * rank, 0}, dev}}).value()));
    SaveOptions so;
    so.step = 5;
    so.communicator = &comm;
    results[rank] = Save(sd, *writer, so);
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_FALSE(results[r].ok()) << "rank " << r;
    EXPECT_EQ(results[r].ToString(), results[0].ToString());
    ASSERT_EQ(results[r].rank_failures().size(), 1u) << results[r];
    EXPECT_EQ(results[r].rank_failures().begin()->first, 1);
  }
  const std::string msg = results[0].ToString();
  EXPECT_NE(msg.find("chunk 1 of 'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("injected copy failure"), std::string::npos) << msg;
  auto reader = Reader();
  auto steps = reader->ListSteps();
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_TRUE(steps->empty());
}

TEST_F(DeviceStagingTest, AFailedCopyOntoTheDeviceNamesTheEntry) {
  auto writer = Writer();
  StateDict sd;
  ASSERT_OK(sd.Add("w", PatternTensor(DType::kF32, {1 << 18}, 1)));
  ASSERT_OK(testing::SaveNoDist(sd, *writer, 1));
  for (bool strided : {false, true}) {
    StateDict target;
    Tensor t = strided ? fake_.DeviceZeros(DType::kF16, {1 << 18}, 0) : fake_.DeviceZeros(DType::kF32, {1 << 18}, 0);
    fake_.FailCopiesTouching(t.data(), 1);
    ASSERT_OK(target.Add("w", t));
    LoadOptions lo;
    lo.step = 1;
    lo.no_dist = true;
    lo.convert_dtype = true;
    Status st = Load(target, *Reader(), lo);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.ToString().find("entry 'w'"), std::string::npos) << st;
    EXPECT_NE(st.ToString().find("injected copy failure"), std::string::npos) << st;
  }
}

TEST_F(DeviceStagingTest, BadDevicesAndLimitsAreClearErrorsThatWriteNothing) {
  EXPECT_EQ(SetDeviceStagingLimit(0).code(), StatusCode::kInvalidArgument);
  auto writer = Writer(1 << 20);
  StateDict sd;
  ASSERT_OK(sd.Add("w", fake_.ToDevice(PatternTensor(DType::kF32, {1 << 20}, 1), 0)));
  // A chunk (1 MiB) larger than the whole pool.
  ASSERT_OK(SetDeviceStagingLimit(256 << 10));
  Status st = testing::SaveNoDist(sd, *writer, 1);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("over the device staging limit of 262144 bytes"), std::string::npos) << st;
  ASSERT_OK(SetDeviceStagingLimit(kDefaultDeviceStagingBytes));
  // A device this process does not have: a planning error naming the entry.
  StateDict far;
  ASSERT_OK(far.Add("far", Tensor::View(DType::kF32, {4}, sd.Find("w") ? std::get<Tensor>(*sd.Find("w")).data() : nullptr,
                                        16, Device::CUDA(5))
                               .value()));
  st = testing::SaveNoDist(far, *writer, 2);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("entry 'far' on cuda:5"), std::string::npos) << st;
  EXPECT_NE(st.ToString().find("no device 5"), std::string::npos) << st;
  auto steps = Reader()->ListSteps();
  ASSERT_TRUE(steps.ok());
  EXPECT_TRUE(steps->empty());
  // Then a good save goes through.
  ASSERT_OK(testing::SaveNoDist(sd, *writer, 3));
  // A load of some keys does not touch (or refuse) the other entries'
  // devices.
  StateDict target;
  ASSERT_OK(target.Add("w", fake_.DeviceZeros(DType::kF32, {1 << 20}, 1)));
  ASSERT_OK(target.Add("far", std::get<Tensor>(*far.Find("far"))));
  LoadOptions lo;
  lo.step = 3;
  lo.no_dist = true;
  lo.keys = {"w"};
  ASSERT_OK(Load(target, *Reader(), lo));
  EXPECT_TRUE(FakeDeviceBackend::ReadBack(std::get<Tensor>(*target.Find("w")))
                  .BitwiseEquals(FakeDeviceBackend::ReadBack(std::get<Tensor>(*sd.Find("w")))));
  lo.keys = {};
  st = Load(target, *Reader(), lo);
  EXPECT_NE(st.ToString().find("entry 'far' on cuda:5"), std::string::npos) << st;
}

TEST_F(DeviceStagingTest, AsyncSaveStagesDeviceStateIntoPinnedSlotsAllocatedOnce) {
  auto writer = Writer();
  AsyncSaveOptions ao;
  ao.no_dist = true;
  AsyncSaver saver(*writer, ao);
  const Tensor host = PatternTensor(DType::kBF16, {1 << 20}, 3);
  Tensor dev = fake_.ToDevice(host, 1);
  StateDict sd;
  ASSERT_OK(sd.Add("w", dev));
  ASSERT_OK(sd.Add("cpu", PatternTensor(DType::kF32, {100}, 4)));
  std::vector<Tensor> expected;
  for (int i = 0; i < 4; ++i) {
    fake_.QueueKernels(1);
    auto h = saver.SaveAsync(sd, 10 + i);
    ASSERT_TRUE(h.ok()) << h.status();
    expected.push_back(FakeDeviceBackend::ReadBack(dev));
    // Training goes on: the device tensor changes at once.
    for (int64_t k = 0; k < 1000; ++k) dev.data_as<uint16_t>()[k * 7] ^= static_cast<uint16_t>(0x1234 + i);
    if (i == 3) ASSERT_OK((*h)->Wait());
  }
  saver.WaitAll();
  // One slot of pinned memory for every save (max_in_flight 1), no more; the
  // device copies went straight into it.
  EXPECT_EQ(fake_.pinned_allocations(), 1u);
  EXPECT_EQ(fake_.copies_with_pageable_host_memory(), 0u);
  EXPECT_EQ(fake_.copies_racing_kernels(), 0u);
  auto reader = Reader();
  for (int i = 0; i < 4; ++i) {
    auto got = LoadWhole(*reader, 10 + i, {"w"});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(std::get<Tensor>(*got->Find("w")).BitwiseEquals(expected[i])) << "step " << 10 + i;
  }
}

TEST_F(DeviceStagingTest, AsyncSaveFallsBackToAnOrdinarySlotWhenPinningFails) {
  ASSERT_OK(SetDeviceStagingLimit(1 << 20));
  fake_.FailPinnedAllocationsOver(1 << 20);  // the 4 MiB slot cannot be pinned
  auto writer = Writer();
  AsyncSaveOptions ao;
  ao.no_dist = true;
  AsyncSaver saver(*writer, ao);
  const Tensor host = PatternTensor(DType::kF32, {1 << 20}, 8);
  StateDict sd;
  ASSERT_OK(sd.Add("w", fake_.ToDevice(host, 0)));
  for (int i = 0; i < 2; ++i) {
    auto h = saver.SaveAsync(sd, 20 + i);
    ASSERT_TRUE(h.ok()) << h.status();
    ASSERT_OK((*h)->Wait());
  }
  // Through the pool's pinned pieces, never straight into pageable memory;
  // the slot was not pinned again for the second save.
  EXPECT_EQ(fake_.copies_with_pageable_host_memory(), 0u);
  EXPECT_EQ(fake_.failed_pinned_allocations(), 1u);
  EXPECT_LE(fake_.peak_live_pinned_bytes(), 1u << 20);
  auto got = LoadWhole(*Reader(), 21, {"w"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(std::get<Tensor>(*got->Find("w")).BitwiseEquals(host));
}

}  // namespace
}  // namespace ckptdb
