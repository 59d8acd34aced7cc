#include "store_dir.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace ckptdb {

namespace {
constexpr char kMarkerName[] = "CKPTDB";
constexpr char kMarkerText[] = "ckptdb store\nformat 1\n";
}  // namespace

Status FsError(const std::string& what, const std::string& path, const std::error_code& ec) {
  return Status::IOError(what + " '" + path + "': " + ec.message());
}

std::string DbDir(const std::string& store) { return (fs::path(store) / "db").string(); }
std::string StagingRoot(const std::string& store) { return (fs::path(store) / "staging").string(); }
std::string StagingDir(const std::string& store, uint64_t save_id) {
  char name[17];
  std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(save_id));
  return (fs::path(store) / "staging" / name).string();
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
  return Status::FailedPrecondition("'" + path + "' is not a ckptdb store (no " + kMarkerName +
                                    " marker file in a non-empty directory); refusing to touch it");
}

Status CreateStoreDir(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return FsError("cannot create store directory", path, ec);
  fs::path marker = fs::path(path) / kMarkerName;
  if (fs::exists(marker, ec)) return Status::OK();
  std::string tmp = marker.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kMarkerText;
    out.flush();
    if (!out) return Status::IOError("cannot write the store marker '" + tmp + "'");
  }
  fs::rename(tmp, marker, ec);
  if (ec) return FsError("cannot create the store marker", marker.string(), ec);
  return Status::OK();
}

}  // namespace ckptdb
