#include "store/store_dir.h"

#include "util/status_macros.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string_view>
#include <thread>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace ckptdb {

namespace {
constexpr char kMarkerName[] = "CKPTDB";
constexpr char kMarkerFirstLine[] = "ckptdb store";

std::string MarkerText() { return std::string(kMarkerFirstLine) + "\nformat " + std::to_string(kStoreFormat) + "\n"; }

// fsyncs a file or directory.
bool SyncPath(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_WRONLY) | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

// Writes the marker durably: a temporary file, synced, renamed over the
// marker, and the directory synced (a crash leaves the old marker or the new
// one, never an empty one).
Status WriteMarker(const fs::path& marker) {
  std::error_code ec;
  std::string tmp = marker.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << MarkerText();
    out.flush();
    if (!out) return Status::IOError("cannot write the store marker '" + tmp + "'");
  }
  if (!SyncPath(tmp, false)) return Status::IOError("cannot sync the store marker '" + tmp + "'");
  fs::rename(tmp, marker, ec);
  if (ec) return FsError("cannot create the store marker", marker.string(), ec);
  if (!SyncPath(marker.parent_path().string(), true)) {
    return Status::IOError("cannot sync the store directory '" + marker.parent_path().string() + "'");
  }
  return Status::OK();
}
}  // namespace

std::string ReservePath(const std::string& store) { return (fs::path(store) / "reserve").string(); }

uint64_t FreeBytes(const std::string& path) {
  struct statvfs st;
  if (statvfs(path.c_str(), &st) != 0) return UINT64_MAX;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

bool ReleaseReserveIfLow(const std::string& store) {
  if (FreeBytes(store) >= kReserveBytes) return false;
  std::error_code ec;
  return fs::remove(ReservePath(store), ec);
}

Status CheckRoomToOpen(const std::string& store) {
  const uint64_t free = FreeBytes(store);
  if (free >= kMinFreeBytesToOpen) return Status::OK();
  return Status::IOError("no space left for store '" + store + "': " + std::to_string(free) +
                         " bytes free on its file system, and opening it for writing needs " +
                         std::to_string(kMinFreeBytesToOpen) +
                         " (its reserve is used up); free space outside the store, then prune it "
                         "with 'ckptdb rm' or 'ckptdb gc'");
}

void RestoreReserve(const std::string& store) {
  std::error_code ec;
  const std::string path = ReservePath(store);
  if (fs::exists(path, ec) || FreeBytes(store) < 2 * kReserveBytes) return;
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  // Real blocks (not a sparse file), so that deleting it frees them.
  bool ok = posix_fallocate(fd, 0, static_cast<off_t>(kReserveBytes)) == 0 && ::fsync(fd) == 0;
  ::close(fd);
  if (ok) fs::rename(tmp, path, ec);
  if (!ok || ec) fs::remove(tmp, ec);
}

namespace {
constexpr char kStagingMarkName[] = "COORDINATOR";

std::string ThisHost() {
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}
}  // namespace

Status WriteStagingMark(const std::string& store, uint64_t save_id) {
  const fs::path dir = StagingDir(store, save_id);
  const std::string tmp = (dir / kStagingMarkName).string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << ThisHost() << "\n";
    out.flush();
    if (!out) return Status::IOError("cannot write '" + tmp + "'");
  }
  std::error_code ec;
  fs::rename(tmp, dir / kStagingMarkName, ec);
  if (ec) return FsError("cannot write the staging mark", (dir / kStagingMarkName).string(), ec);
  return Status::OK();
}

Status WaitForStagingMark(const std::string& store, uint64_t save_id, std::chrono::milliseconds limit) {
  const fs::path mark = fs::path(StagingDir(store, save_id)) / kStagingMarkName;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    std::error_code ec;
    // (A network file system may show a new directory a moment late.)
    if (fs::exists(mark, ec)) return Status::OK();
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status::FailedPrecondition(
      "store '" + store + "' is not shared with the coordinator: on this host (" + ThisHost() +
      ") the coordinator's staging directory for this save (" + mark.parent_path().string() + ") did not appear within " +
      std::to_string(limit.count()) +
      " ms. Every rank writes its files into the store for the coordinator to commit: put the store on a file "
      "system every host sees, at the same path");
}

StatusOr<int> ReadStoreFormat(const std::string& path) {
  const std::string marker = (fs::path(path) / kMarkerName).string();
  std::ifstream in(marker);
  if (!in) return Status::IOError("cannot read the store marker '" + marker + "'");
  std::string first, word;
  long long format = -1;
  if (!std::getline(in, first) || first != kMarkerFirstLine || !(in >> word >> format) || word != "format" ||
      format < 0) {
    return Status::DataLoss("the store marker '" + marker + "' is damaged: it should read \"" +
                            std::string(kMarkerFirstLine) + "\" and \"format N\"");
  }
  if (format > 1000000) format = 1000000;
  return static_cast<int>(format);
}

Status CheckStoreFormat(const std::string& path, bool for_writing) {
  auto format = ReadStoreFormat(path);
  if (!format.ok()) return format.status();
  if (*format > kStoreFormat) {
    return Status::FailedPrecondition("store '" + path + "' has format " + std::to_string(*format) +
                                      ", newer than this ckptdb's format " + std::to_string(kStoreFormat) +
                                      "; refusing to " + (for_writing ? "write to" : "read") +
                                      " it (use a newer ckptdb)");
  }
  if (*format < kOldestReadableStoreFormat) {
    return Status::FailedPrecondition("store '" + path + "' has format " + std::to_string(*format) +
                                      ", older than the oldest this ckptdb reads (" +
                                      std::to_string(kOldestReadableStoreFormat) + ")");
  }
  return Status::OK();
}

Status FsError(const std::string& what, const std::string& path, const std::error_code& ec) {
  return Status::IOError(what + " '" + path + "': " + ec.message());
}

std::string DbDir(const std::string& store) { return (fs::path(store) / "db").string(); }
std::string StagingRoot(const std::string& store) { return (fs::path(store) / "staging").string(); }
std::string SaveIdName(uint64_t save_id) {
  char name[17];
  std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(save_id));
  return name;
}
std::string StagingDir(const std::string& store, uint64_t save_id) {
  return (fs::path(store) / "staging" / SaveIdName(save_id)).string();
}

StatusOr<DatabaseFiles> ListDatabaseFiles(const std::string& db_dir) {
  DIR* dir = opendir(db_dir.c_str());
  if (dir == nullptr) {
    return FsError("cannot list", db_dir, std::error_code(errno, std::generic_category()));
  }
  DatabaseFiles files;
  auto ends_with = [](std::string_view name, std::string_view suffix) {
    return name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
  };
  errno = 0;
  while (const dirent* d = readdir(dir)) {
    const std::string_view name(d->d_name);
    if (name == "CURRENT") files.current = true;
    if (name.rfind("MANIFEST-", 0) == 0) files.manifest = true;
    if (ends_with(name, ".sst")) files.tables = true;
    if (ends_with(name, ".log")) {
      files.logs = true;
      struct stat st;
      if (fstatat(dirfd(dir), d->d_name, &st, 0) != 0 || st.st_size != 0) files.logs_empty = false;
    }
    errno = 0;
  }
  const int listed = errno;
  closedir(dir);
  if (listed != 0) return FsError("cannot list", db_dir, std::error_code(listed, std::generic_category()));
  return files;
}

Status CheckWriteAheadLogPresent(const std::string& store, const DatabaseFiles& files) {
  if (!files.current) return Status::OK();  // never opened for writing
  if (files.logs) return Status::OK();
  if (!files.manifest) return Status::OK();  // RocksDB reports that itself
  // No table file: nothing was ever ingested, so nothing committed (a crash
  // inside the store's very first open).
  if (!files.tables) return Status::OK();
  return Status::DataLoss("store '" + store + "' is damaged: its write-ahead log (a *.log file in " + DbDir(store) +
                          ") is missing; it may have held the latest commits, so the store is not opened as if "
                          "its history were whole. Restore the file if you have it");
}

Status CheckWriteAheadLogPresent(const std::string& store) {
  StatusOr<DatabaseFiles> files = ListDatabaseFiles(DbDir(store));
  if (files.ok()) return CheckWriteAheadLogPresent(store, *files);
  std::error_code ec;
  // (No database directory, or none with a CURRENT: never opened for writing.)
  return fs::exists(fs::path(DbDir(store)) / "CURRENT", ec) ? files.status() : Status::OK();
}

StatusOr<StorePathState> InspectStorePath(const std::string& path) {
  if (path.empty()) return Status::InvalidArgument("empty store path");
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) return FsError("cannot inspect", path, ec);
  if (!fs::exists(st)) return StorePathState::kMissing;
  if (!fs::is_directory(st)) {
    return Status::FailedPrecondition("'" + path + "' is a file, not a ckptdb store (a store is a directory)");
  }
  if (fs::is_regular_file(fs::path(path) / kMarkerName, ec)) return StorePathState::kStore;
  if (fs::is_empty(path, ec) && !ec) return StorePathState::kEmptyDir;
  // Only the marker's temporary: a crash while the store was being created.
  bool only_tmp = true;
  for (auto it = fs::directory_iterator(path, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    only_tmp = only_tmp && it->path().filename() == std::string(kMarkerName) + ".tmp";
  }
  if (only_tmp && !ec) return StorePathState::kEmptyDir;
  return Status::FailedPrecondition("'" + path + "' is not a ckptdb store (no " + kMarkerName +
                                    " marker file in a non-empty directory); refusing to touch it");
}

Status CreateStoreDir(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return FsError("cannot create store directory", path, ec);
  fs::path marker = fs::path(path) / kMarkerName;
  if (fs::exists(marker, ec)) return CheckStoreFormat(path, /*for_writing=*/true);  // newer: refused
  return WriteMarker(marker);
}

Status UpgradeStoreFormat(const std::string& path) {
  ASSIGN_OR_RETURN(int format, ReadStoreFormat(path));
  if (format == kStoreFormat) return Status::OK();
  RETURN_IF_ERROR(CheckStoreFormat(path, /*for_writing=*/true));
  return WriteMarker(fs::path(path) / kMarkerName);
}

}  // namespace ckptdb
