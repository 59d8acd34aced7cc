// Runs an ordered stream of independent jobs on worker threads: produce(i)
// for every i in [0, n) in parallel, at most `window` jobs ahead, and
// consume(i) on the calling thread strictly in order. The save path uses it
// to checksum and compress chunks on every core while one thread appends them
// to an SST file (whose keys must arrive sorted); the load path to fetch and
// decode chunks in parallel.
#ifndef CKPTDB_SRC_ORDERED_PARALLEL_H_
#define CKPTDB_SRC_ORDERED_PARALLEL_H_

#include <cstddef>
#include <functional>
#include <string>

#include "ckptdb/status.h"

namespace ckptdb {

// Worker threads to use by default: the machine's hardware threads (at
// most 64), as the process first asked for them.
int DefaultParallelism();

// produce(i, buffer) fills `buffer` (reused across jobs; its previous
// contents are arbitrary); consume(i, buffer) gets it in order. The first
// error of either stops the run and is returned (jobs already running
// finish). With threads <= 1 everything runs on the calling thread.
Status RunOrdered(size_t n, int threads, size_t window, const std::function<Status(size_t, std::string*)>& produce,
                  const std::function<Status(size_t, std::string&)>& consume);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_ORDERED_PARALLEL_H_
