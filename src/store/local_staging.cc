#include "store/local_staging.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

namespace ckptdb {
namespace {

namespace fs = std::filesystem;

constexpr char kPrefix[] = "ckptdb-staging-";
constexpr char kLockSuffix[] = ".lock";

std::string LockPath(const std::string& dir) { return dir + kLockSuffix; }

// Opens and locks `path`: the descriptor, or -1 when the file cannot be
// opened or, without `wait`, another open holds the lock. `create`: made if
// absent (a sweeper may hold a new lock file for a moment: the maker waits).
int TryLock(const std::string& path, bool create, bool wait) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
  if (fd < 0) return -1;
  int locked;
  while ((locked = ::flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB))) != 0 && errno == EINTR) {
  }
  if (locked != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

}  // namespace

StagingLock::~StagingLock() {
  if (fd_ >= 0) ::close(fd_);
}

StagingLock::StagingLock(StagingLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), dir_(std::move(other.dir_)) {}

StagingLock& StagingLock::operator=(StagingLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    dir_ = std::move(other.dir_);
  }
  return *this;
}

void StagingLock::RemoveFolder() {
  if (dir_.empty()) return;
  std::error_code ec;
  fs::remove_all(dir_, ec);
  ::unlink(LockPath(dir_).c_str());  // (while still held: no sweeper takes it in between)
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  dir_.clear();
}

int SweepAbandonedStagingFolders(const std::string& root) {
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const size_t n = name.size(), s = sizeof(kLockSuffix) - 1;
    if (name.rfind(kPrefix, 0) != 0 || n <= s || name.compare(n - s, s, kLockSuffix) != 0) continue;
    const std::string lock = it->path().string();
    const int fd = TryLock(lock, /*create=*/false, /*wait=*/false);
    if (fd < 0) continue;  // a live save's (or not ours to open)
    std::error_code rm;
    fs::remove_all(lock.substr(0, lock.size() - s), rm);
    if (!rm) {
      ::unlink(lock.c_str());
      ++removed;
    }
    ::close(fd);
  }
  return removed;
}

StatusOr<StagingLock> MakeStagingFolder(const std::string& dir) {
  StagingLock lock;
  const std::string path = LockPath(dir);
  std::error_code made;
  fs::create_directories(fs::path(dir).parent_path(), made);
  if (made) return Status::IOError("cannot create the local staging root " + fs::path(dir).parent_path().string() +
                                   ": " + made.message());
  // A sweeper may unlink the lock file between its open and its lock here:
  // then the lock is of a file no one else can find, and it is made again.
  for (int attempt = 0; attempt < 8 && lock.fd_ < 0; ++attempt) {
    const int fd = TryLock(path, /*create=*/true, /*wait=*/true);
    if (fd < 0) {
      return Status::IOError("cannot lock the local staging directory's lock file " + path + ": " +
                             std::strerror(errno));
    }
    struct stat held{}, named{};
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev) {
      lock.fd_ = fd;
    } else {
      ::close(fd);
    }
  }
  if (lock.fd_ < 0) return Status::IOError("cannot keep a lock file beside the local staging directory " + dir);
  lock.dir_ = dir;
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create the local staging directory " + dir + ": " + ec.message());
  return lock;
}

}  // namespace ckptdb
