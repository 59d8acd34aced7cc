// The RocksDB options ckptdb opens its database and writes its SST files
// with. Writers and the database must agree on the comparator and table
// format, so both come from here.
#ifndef CKPTDB_SRC_ROCKSDB_OPTIONS_H_
#define CKPTDB_SRC_ROCKSDB_OPTIONS_H_

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/status.h>

#include <string>

namespace ckptdb {

struct DatabaseFiles;  // store/store_dir.h

// Database options: no RocksDB compression (chunks are compressed by ckptdb),
// a small memtable (only metadata goes through it).
rocksdb::Options DatabaseOptions();

// Opens the database at `db_dir` with `o` (read-only when asked). When that
// fails naming a table file (a truncated, deleted or otherwise damaged SST:
// RocksDB checks every file's presence on open and reads some of them) and
// every write-ahead log file is empty, opens it again without RocksDB's
// open-time table checks (paranoid_checks off): the damaged files then fail
// only the reads that need them (the steps they hold), which name them. With
// a non-empty log that second open is not tried, since without paranoid
// checks a damaged log record could be skipped (commits are flushed at once,
// so the log is empty unless a writer died mid-commit). A read-only open of
// a database whose logs are all empty (the usual case) opens without those
// checks at once: they would only lead to that second open, and they stat
// every table file of the store (one per rank and step), which every rank of
// a restarting job would otherwise do on a shared file system. `listed`: a
// listing of `db_dir` just taken (ListDatabaseFiles), so that the directory is
// not listed again to learn whether the logs are empty; null: list it.
rocksdb::Status OpenRocksDatabase(rocksdb::Options o, const std::string& db_dir, bool read_only, rocksdb::DB** db,
                                  const DatabaseFiles* listed = nullptr);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_ROCKSDB_OPTIONS_H_
