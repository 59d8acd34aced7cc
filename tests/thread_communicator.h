// Ranks as threads for the tests (the first tier of multi-rank tests; real
// processes over TCP are the second): a job of the library's in-process
// communicator (src/comm/thread_communicator.h) with a 60 s timeout.
#ifndef CKPTDB_TESTS_THREAD_COMMUNICATOR_H_
#define CKPTDB_TESTS_THREAD_COMMUNICATOR_H_

#include <functional>

#include "ckptdb/communicator.h"

namespace ckptdb::testing {

// Runs fn(rank, communicator) on `world` threads and waits for all.
void RunRanksAsThreads(int world, const std::function<void(int, Communicator&)>& fn);

}  // namespace ckptdb::testing

#endif  // CKPTDB_TESTS_THREAD_COMMUNICATOR_H_
