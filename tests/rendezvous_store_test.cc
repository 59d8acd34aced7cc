// The rendezvous stores ckptdb brings (file:// and redis://), under what
// ConnectGloo asks of them: many connections of one process at once, and
// every command bounded by the rendezvous' deadline.
#include "comm/rendezvous_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ckptdb/ckptdb.h"
#include "redis_server.h"
#include "test_util.h"

namespace ckptdb {
namespace {

using Clock = std::chrono::steady_clock;

// Ranks as threads each connect through a store of their own over one
// directory (an application's async and synchronous connections, or
// in-process tests): keys created at once from many threads never collide
// on the temporary files they are written through.
TEST(FileRendezvousStore, ThreadsCreatingKeysAtOnceNeverCollide) {
  testing::TempDir dir("/dev/shm");
  constexpr int kThreads = 8, kKeys = 10000;
  std::mutex mu;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      StatusOr<std::unique_ptr<RendezvousStore>> store =
          OpenRendezvousStore("file://" + dir.path(), Clock::now() + std::chrono::seconds(60));
      if (!store.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        errors.push_back(store.status().ToString());
        return;
      }
      for (int i = 0; i < kKeys; ++i) {
        StatusOr<bool> created = (*store)->CreateKey("t" + std::to_string(t) + "/k" + std::to_string(i), "v");
        if (created.ok() && *created) continue;
        std::lock_guard<std::mutex> lock(mu);
        errors.push_back(created.ok() ? "key " + std::to_string(i) + " of thread " + std::to_string(t) + " existed"
                                      : created.status().ToString());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(errors.empty()) << errors.size() << " failed, the first: " << errors.front();
}

// A Redis server that stops answering 3 s into a rendezvous with a 4 s
// timeout: the command then waiting for its reply gets the time left before
// the deadline, not a whole timeout of its own, so ConnectGloo returns at
// the deadline (it used to return 4 s after the server stopped, 7 s in).
TEST(RedisRendezvousStore, ACommandWaitsOnlyForTheTimeLeftBeforeTheDeadline) {
  testing::RedisServer redis;
  ASSERT_TRUE(redis.ready()) << "redis-server did not start (tools/install-deps.sh installs it)";
  DistributedConfig c;
  c.rank = 0;
  c.world_size = 2;  // rank 1 never comes: rank 0 polls the store until its deadline
  c.rendezvous = redis.uri();
  c.job_id = "deadline-" + std::to_string(getpid());
  c.timeout = std::chrono::milliseconds(4000);
  c.bind_address = "127.0.0.1";
  const auto t0 = Clock::now();
  std::thread pause([&] {
    std::this_thread::sleep_until(t0 + std::chrono::seconds(3));
    redis.Pause();
  });
  StatusOr<std::unique_ptr<Communicator>> comm = ConnectGloo(c);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  pause.join();
  redis.Resume();
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_NE(comm.status().message().find(redis.uri()), std::string::npos) << comm.status();
  // A correctness bound (the deadline plus a margin for a loaded machine),
  // far below the 7 s of a command given the whole timeout.
  EXPECT_LT(seconds, 5.5) << comm.status();
}

}  // namespace
}  // namespace ckptdb
