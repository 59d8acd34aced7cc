#include "thread_communicator.h"

#include <chrono>

#include "comm/thread_communicator.h"

namespace ckptdb::testing {

void RunRanksAsThreads(int world, const std::function<void(int, Communicator&)>& fn) {
  ThreadJob job(world, std::chrono::seconds(60));
  ::ckptdb::RunRanksAsThreads(job, fn);
}

}  // namespace ckptdb::testing
