// The RocksDB options ckptdb opens its database and writes its SST files
// with. Writers and the database must agree on the comparator and table
// format, so both come from here.
#ifndef CKPTDB_SRC_ROCKSDB_OPTIONS_H_
#define CKPTDB_SRC_ROCKSDB_OPTIONS_H_

#include <rocksdb/options.h>
#include <rocksdb/status.h>

#include <string>

namespace ckptdb {

// Database options: no RocksDB compression (chunks are compressed by ckptdb),
// a small memtable (only metadata goes through it).
rocksdb::Options DatabaseOptions();

// Whether a database that failed to open with `s` may be opened again with
// DamagedStoreOptions: when the error names a table file (a truncated,
// deleted or otherwise damaged SST: RocksDB checks every file's presence on
// open and reads some of them) and every write-ahead log file of `db_dir` is
// empty, so that opening without RocksDB's paranoid checks cannot skip a
// damaged log record (commits are flushed at once, so the log is empty
// unless a writer died mid-commit).
bool MayOpenDamagedStore(const rocksdb::Status& s, const std::string& db_dir);

// `o` with RocksDB's open-time checks of table files off: the damaged files
// then fail only the reads that need them (the steps they hold), which name
// them.
void UseDamagedStoreOptions(rocksdb::Options* o);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_ROCKSDB_OPTIONS_H_
