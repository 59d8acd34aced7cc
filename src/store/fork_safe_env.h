// A RocksDB Env whose background work (flushes, compactions) runs on thread
// pools that belong to the calling process.
//
// Why: RocksDB's default Env keeps its background threads in a process-wide
// static. A child forked from a process that had opened a database (Python's
// multiprocessing on Linux, a launcher or test runner that forks) inherits
// that static, with the parent's threads counted in it but not running: a
// flush it schedules is never run, and the commit that waits for it
// (StoreWriter::Finish) hangs forever. With this Env the pools are made
// anew, lazily, in each process that schedules work, so a forked child's
// databases get threads of their own. The parent's pools are left as they
// are in the child (never touched, never freed: their locks may have been
// held by a thread that does not exist there).
//
// Thread safety: every method may be called from any thread.
#ifndef CKPTDB_SRC_STORE_FORK_SAFE_ENV_H_
#define CKPTDB_SRC_STORE_FORK_SAFE_ENV_H_

#include <rocksdb/env.h>

#include <memory>

namespace ckptdb {

// Over `base` (null: RocksDB's default Env), which keeps serving files,
// clocks and everything else; only Schedule, UnSchedule and the pool sizes
// are this Env's own.
std::unique_ptr<rocksdb::Env> NewForkSafeEnv(rocksdb::Env* base);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_STORE_FORK_SAFE_ENV_H_
