// Asynchronous saves: the values at the time of the call are saved, saves
// queue behind each other, background failures reach every rank, and
// destruction finishes what is in flight.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "ckptdb/ckptdb.h"
#include "test_util.h"
#include "thread_communicator.h"

namespace ckptdb {
namespace {

using testing::PatternTensor;
using testing::TempDir;

// A gate the background save waits at (in Prepare) until the test opens it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
    }
    cv.notify_all();
  }
  Status Wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return open; });
    return Status::OK();
  }
};

// A writer whose saves wait at the gate (in Prepare) until it opens.
struct GatedWriter : testing::FaultyWriter {
  explicit GatedWriter(StorageWriter* inner) : testing::FaultyWriter(inner) {
    on_prepare = [this] { return gate.Wait(); };
  }
  Gate gate;
};

Tensor LoadTensor(const std::string& store, int64_t step, const std::string& fqn) {
  auto r = OpenStoreReader(store);
  EXPECT_TRUE(r.ok()) << r.status();
  auto sd = LoadWhole(**r, step, {fqn});
  EXPECT_TRUE(sd.ok()) << sd.status();
  return std::get<Tensor>(*sd->Find(fqn));
}

TEST(AsyncSave, SavesTheValuesAtTheTimeOfTheCall) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok());
  GatedWriter gated(w->get());
  Gate& gate = gated.gate;
  Tensor weights = PatternTensor(DType::kF32, {1000}, 1);
  Tensor original = testing::ZerosLike(weights);
  std::memcpy(original.data(), weights.data(), weights.nbytes());
  StateDict sd;
  ASSERT_OK(sd.Add("w", weights));
  ASSERT_OK(sd.AddBytes("b", "before"));

  AsyncSaveOptions o;
  o.no_dist = true;
  AsyncSaver saver(gated, o);
  auto handle = saver.SaveAsync(sd, 1);
  ASSERT_TRUE(handle.ok()) << handle.status();
  // The save has not started (it waits at the gate); the caller trains on.
  EXPECT_FALSE((*handle)->Done());
  for (int64_t i = 0; i < weights.numel(); ++i) weights.data_as<float>()[i] = -1.0f;
  std::get<Bytes>(*sd.Find("b")).data = "after";
  gate.Open();
  ASSERT_OK((*handle)->Wait());
  EXPECT_TRUE((*handle)->Done());
  EXPECT_GE((*handle)->blocked_seconds(), 0.0);
  EXPECT_TRUE(LoadTensor(store, 1, "w").BitwiseEquals(original));
  auto r = OpenStoreReader(store);
  auto b = LoadWhole(**r, 1, {"b"});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(std::get<Bytes>(*b->Find("b")).data, "before");
}

TEST(AsyncSave, ManySavesInARow) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok());
  AsyncSaveOptions o;
  o.no_dist = true;
  o.max_in_flight = 2;
  std::vector<std::shared_ptr<SaveHandle>> handles;
  Tensor t = Tensor::Zeros(DType::kI64, {4096}).value();
  StateDict sd;
  ASSERT_OK(sd.Add("counter", t));
  {
    AsyncSaver saver(**w, o);
    for (int64_t step = 0; step < 12; ++step) {
      for (int64_t i = 0; i < t.numel(); ++i) t.data_as<int64_t>()[i] = step * 10000 + i;
      auto h = saver.SaveAsync(sd, step);
      ASSERT_TRUE(h.ok()) << h.status();
      handles.push_back(*h);
    }
    saver.WaitAll();
    for (auto& h : handles) EXPECT_TRUE(h->Done());
  }
  for (auto& h : handles) ASSERT_OK(h->Wait());
  for (int64_t step = 0; step < 12; ++step) {
    Tensor got = LoadTensor(store, step, "counter");
    EXPECT_EQ(got.data_as<int64_t>()[7], step * 10000 + 7) << step;
  }
  // A step that already exists fails through its handle, like a sync save.
  AsyncSaver again(**w, o);
  auto dup = again.SaveAsync(sd, 3);
  ASSERT_TRUE(dup.ok());
  Status st = (*dup)->Wait();
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st;
  // Argument errors come back at once.
  EXPECT_EQ(again.SaveAsync(sd, -5).status().code(), StatusCode::kInvalidArgument);
}

TEST(AsyncSave, BackgroundFailureReachesEveryRankAlike) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  std::mutex mu;
  std::vector<Status> results(3);
  testing::RunRanksAsThreads(3, [&](int rank, Communicator& background) {
    auto w = OpenStoreWriter(store);
    testing::FaultyWriter faulty(w->get());
    if (rank == 1) faulty.on_write = [](const std::vector<WriteItem>&) { return Status::IOError("injected: disk gone"); };
    StateDict sd;
    (void)sd.Add("s", ShardedTensor::Create(DType::kF32, {6}, {{{2 * rank}, PatternTensor(DType::kF32, {2}, rank)}}).value());
    AsyncSaveOptions o;
    o.communicator = &background;
    AsyncSaver saver(faulty, o);
    auto h = saver.SaveAsync(sd, 9);
    Status st = h.ok() ? (*h)->Wait() : h.status();
    std::lock_guard<std::mutex> lock(mu);
    results[rank] = st;
  });
  for (const Status& st : results) {
    EXPECT_EQ(st, results[0]);
    EXPECT_NE(st.ToString().find("Failed to write data"), std::string::npos) << st;
    ASSERT_EQ(st.rank_failures().size(), 1u) << st;
    EXPECT_EQ(st.rank_failures().begin()->first, 1);
  }
  auto r = OpenStoreReader(store);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)->ListSteps()->empty());
}

TEST(AsyncSave, DestructionFinishesTheSaveInFlight) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok());
  GatedWriter gated(w->get());
  Gate& gate = gated.gate;
  StateDict sd;
  ASSERT_OK(sd.Add("w", PatternTensor(DType::kBF16, {64, 64}, 5)));
  std::shared_ptr<SaveHandle> handle;
  std::thread opener;
  {
    AsyncSaveOptions o;
    o.no_dist = true;
    AsyncSaver saver(gated, o);
    auto h = saver.SaveAsync(sd, 2);
    ASSERT_TRUE(h.ok());
    handle = *h;
    EXPECT_FALSE(handle->Done());
    // The destructor must wait for the save, which can only finish once the
    // gate opens: open it from another thread while the destructor waits.
    opener = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      gate.Open();
    });
  }
  opener.join();
  EXPECT_TRUE(handle->Done());
  ASSERT_OK(handle->Wait());
  EXPECT_TRUE(LoadTensor(store, 2, "w").BitwiseEquals(std::get<Tensor>(*sd.Find("w"))));
}

TEST(AsyncSave, WaitForTimesOutWhileRunning) {
  TempDir dir;
  auto w = OpenStoreWriter(dir.Sub("s"));
  ASSERT_TRUE(w.ok());
  GatedWriter gated(w->get());
  Gate& gate = gated.gate;
  AsyncSaveOptions o;
  o.no_dist = true;
  AsyncSaver saver(gated, o);
  StateDict sd;
  ASSERT_OK(sd.AddBytes("b", "x"));
  auto h = saver.SaveAsync(sd, 0);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ((*h)->WaitFor(std::chrono::milliseconds(10)).code(), StatusCode::kDeadlineExceeded);
  gate.Open();
  ASSERT_OK((*h)->WaitFor(std::chrono::seconds(60)));
}

}  // namespace
}  // namespace ckptdb
