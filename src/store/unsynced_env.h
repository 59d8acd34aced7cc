// A RocksDB Env whose writable files skip every sync: for files that are
// read back once and then deleted (a rank's SST files kept on its own host
// until they are sent to the coordinator, StoreAccess::kCoordinatorOnly),
// where a sync buys no durability and costs a write to the disk. The
// coordinator syncs what it receives.
#ifndef CKPTDB_SRC_STORE_UNSYNCED_ENV_H_
#define CKPTDB_SRC_STORE_UNSYNCED_ENV_H_

#include <rocksdb/env.h>

#include <memory>

namespace ckptdb {

// Over `base`'s file system (null: RocksDB's default Env).
std::unique_ptr<rocksdb::Env> NewUnsyncedEnv(rocksdb::Env* base);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_STORE_UNSYNCED_ENV_H_
