// The RocksDB options ckptdb opens its database and writes its SST files
// with. Writers and the database must agree on the comparator and table
// format, so both come from here.
#ifndef CKPTDB_SRC_ROCKSDB_OPTIONS_H_
#define CKPTDB_SRC_ROCKSDB_OPTIONS_H_

#include <rocksdb/options.h>

namespace ckptdb {

// Database options: no RocksDB compression (chunks are compressed by ckptdb),
// a small memtable (only metadata goes through it).
rocksdb::Options DatabaseOptions();

}  // namespace ckptdb

#endif  // CKPTDB_SRC_ROCKSDB_OPTIONS_H_
