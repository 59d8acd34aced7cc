// The layout of a store directory (include/ckptdb/rocksdb_store.h):
// STORE/CKPTDB (marker), STORE/db (RocksDB), STORE/staging/<save id>/.
#ifndef CKPTDB_SRC_STORE_DIR_H_
#define CKPTDB_SRC_STORE_DIR_H_

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

// Creates the directory (and parents) and the marker. Idempotent.
Status CreateStoreDir(const std::string& path);

std::string DbDir(const std::string& store);
std::string StagingRoot(const std::string& store);
std::string StagingDir(const std::string& store, uint64_t save_id);

// Converts a std::filesystem error into a Status naming the path.
Status FsError(const std::string& what, const std::string& path, const std::error_code& ec);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_STORE_DIR_H_
