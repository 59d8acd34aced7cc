// The layout of a store directory (include/ckptdb/rocksdb_store.h):
// STORE/CKPTDB (marker), STORE/db (RocksDB), STORE/staging/<save id>/.
#ifndef CKPTDB_SRC_STORE_DIR_H_
#define CKPTDB_SRC_STORE_DIR_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <system_error>

#include "ckptdb/status.h"

namespace ckptdb {

enum class StorePathState { kMissing, kEmptyDir, kStore };

// What is at `path`: nothing, an empty directory, or a store.
// FailedPrecondition when it is a file, or a non-empty directory that is not a
// store (the message says which and how to tell).
StatusOr<StorePathState> InspectStorePath(const std::string& path);

// The store format this ckptdb writes, and the oldest it reads
// (proto/FORMAT.md, "Format versions").
inline constexpr int kStoreFormat = 8;
inline constexpr int kOldestReadableStoreFormat = 1;

// The format number the marker of the store at `path` states. DataLoss when
// the marker is unreadable or says no format.
StatusOr<int> ReadStoreFormat(const std::string& path);

// Whether this ckptdb may open the store at `path` (a store) for reading or,
// when `for_writing`, for writing: FailedPrecondition naming both versions
// when the store's format is newer than this ckptdb's (or, for reading,
// older than the oldest it reads).
Status CheckStoreFormat(const std::string& path, bool for_writing);

// Creates the directory (and parents) and the marker (format kStoreFormat)
// when there is none. Idempotent; FailedPrecondition for a store of a newer
// format. The marker is written durably (synced file and directory).
Status CreateStoreDir(const std::string& path);

// Rewrites the marker of a store of an older, readable format to
// kStoreFormat (format 2 only adds to format 1). Call it only while holding
// the database open for writing (RocksDB's lock), so that no older writer is
// still writing format 1 beside it.
Status UpgradeStoreFormat(const std::string& path);

// A database that has been written keeps a write-ahead log file at all
// times (empty once its commits are flushed). DataLoss naming the store when
// there is none: the log may have held the latest commits, and opening
// without it would show a shorter history as if it were whole.
Status CheckWriteAheadLogPresent(const std::string& store);

// What one listing of a database directory (STORE/db) found: the facts the
// opens above need, so that a reader's open lists the directory (a file per
// rank and step) once, not once per question.
struct DatabaseFiles {
  bool current = false;     // CURRENT: the database was opened for writing
  bool manifest = false;    // a MANIFEST-* file
  bool tables = false;      // a *.sst file
  bool logs = false;        // a *.log file (write-ahead log)
  bool logs_empty = true;   // every *.log file is empty (or there is none)
};
// Lists `db_dir` once (readdir; only the *.log files are stat'ed). IOError
// naming the directory when it cannot be listed.
StatusOr<DatabaseFiles> ListDatabaseFiles(const std::string& db_dir);
// CheckWriteAheadLogPresent on a listing of the store's database directory.
Status CheckWriteAheadLogPresent(const std::string& store, const DatabaseFiles& files);

// The reserve: STORE/reserve, a file of kReserveBytes written when the store
// is created. RocksDB needs some free space to open a database for writing
// (a new MANIFEST, the WAL, an OPTIONS file), and Debian's build aborts the
// process when it meets a full disk there; a writer that finds less than
// kReserveBytes free deletes the reserve first, so that `ckptdb rm` and `gc`
// can always open a full store and free space. The reserve is written again
// once there is room (RestoreReserve).
inline constexpr uint64_t kReserveBytes = 16ull << 20;
std::string ReservePath(const std::string& store);
// Bytes free for an unprivileged writer on the file system holding `path`;
// UINT64_MAX when unknown.
uint64_t FreeBytes(const std::string& path);
// Deletes the reserve when less than kReserveBytes are free. Returns whether
// it did.
bool ReleaseReserveIfLow(const std::string& store);
// The least free space a writer opens a store with: below it, opening is
// IOError (naming the free and the needed bytes) rather than a RocksDB that
// runs out of space while writing its own files (which Debian's build
// answers with an abort).
inline constexpr uint64_t kMinFreeBytesToOpen = 4ull << 20;
Status CheckRoomToOpen(const std::string& store);
// Writes the reserve when it is missing and there is room for it and as much
// again. Best effort: a store without its reserve works.
void RestoreReserve(const std::string& store);

std::string DbDir(const std::string& store);
std::string StagingRoot(const std::string& store);
std::string StagingDir(const std::string& store, uint64_t save_id);
// A save id as a file name: 16 lowercase hex digits.
std::string SaveIdName(uint64_t save_id);

// The coordinator's mark in a save's staging directory (Prepare writes it):
// every rank's PrepareStorage waits (up to `limit`) to see it, so that a
// store that is not on a file system shared by every host fails clearly,
// naming this host, instead of each rank writing into a staging directory of
// its own that the coordinator never sees.
Status WriteStagingMark(const std::string& store, uint64_t save_id);
Status WaitForStagingMark(const std::string& store, uint64_t save_id, std::chrono::milliseconds limit);

// Converts a std::filesystem error into a Status naming the path.
Status FsError(const std::string& what, const std::string& path, const std::error_code& ec);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_STORE_DIR_H_
