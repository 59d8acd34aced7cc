#include "cli_output_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>

namespace ckptdb::cli {

namespace {

std::string Errno(int e) { return std::strerror(e); }

// What is at `path`, for the refusal: "a directory", "a character device"...
const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// OK when `path` is absent or a regular file.
Status CheckTarget(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::OK();
    return Status::IOError("cannot inspect '" + path + "': " + Errno(errno));
  }
  if (S_ISREG(st.st_mode)) return Status::OK();
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    const std::string to = std::filesystem::read_symlink(path, ec).string();
    return Status::InvalidArgument("'" + path + "' is a symbolic link" + (ec ? "" : " (to '" + to + "')") +
                                   ": export writes a regular file and neither follows nor replaces links; give "
                                   "the path of the file itself");
  }
  return Status::InvalidArgument("'" + path + "' is " + KindOf(st.st_mode) +
                                 ", not a regular file: export writes regular files only and does not replace it");
}

// The named temporary of the fallback (and of Commit's short step between
// link and rename), removed by a signal that ends the command.
char g_temp[PATH_MAX + 1];
volatile sig_atomic_t g_temp_set = 0;

void RemoveTempAndDie(int sig) {
  if (g_temp_set) ::unlink(g_temp);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void SetTemp(const std::string& path) {
  static bool handlers = false;
  if (!handlers) {
    handlers = true;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction now;
      // A signal the process ignores stays ignored.
      if (::sigaction(sig, nullptr, &now) == 0 && now.sa_handler == SIG_DFL) ::signal(sig, RemoveTempAndDie);
    }
  }
  g_temp_set = 0;
  std::strncpy(g_temp, path.c_str(), PATH_MAX);
  g_temp[PATH_MAX] = '\0';
  g_temp_set = path.size() <= PATH_MAX ? 1 : 0;
}

void ClearTemp() { g_temp_set = 0; }

}  // namespace

OutputFile::OutputFile(std::string path, std::string dir, int fd, bool unnamed)
    : path_(std::move(path)), dir_(std::move(dir)), fd_(fd), unnamed_(unnamed) {}

OutputFile::~OutputFile() { Discard(); }

StatusOr<std::unique_ptr<OutputFile>> OutputFile::Create(const std::string& path) {
  if (path.empty()) return Status::InvalidArgument("empty output path");
  Status st = CheckTarget(path);
  if (!st.ok()) return st;
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  // An unnamed file needs /proc to be linked into place.
  if (::access("/proc/self/fd", X_OK) == 0) {
    const int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    if (fd >= 0) return std::unique_ptr<OutputFile>(new OutputFile(path, dir, fd, /*unnamed=*/true));
    // No O_TMPFILE here (EOPNOTSUPP; EISDIR from kernels without it): a
    // named temporary. Other errors are the directory's.
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
      return Status::IOError("cannot create a file in '" + dir + "': " + Errno(errno));
    }
  }
  const std::string temp = path + ".tmp-" + std::to_string(::getpid());
  SetTemp(temp);
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0 && errno == EEXIST) {
    // Left by a process that had this pid: ours to replace, if a plain file.
    struct stat old;
    if (::lstat(temp.c_str(), &old) == 0 && S_ISREG(old.st_mode) && ::unlink(temp.c_str()) == 0) {
      fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    } else {
      errno = EEXIST;
    }
  }
  if (fd < 0) {
    const int e = errno;
    ClearTemp();
    return Status::IOError("cannot create '" + temp + "': " + Errno(e));
  }
  auto file = std::unique_ptr<OutputFile>(new OutputFile(path, dir, fd, /*unnamed=*/false));
  file->temp_ = temp;
  return file;
}

Status OutputFile::Write(const void* data, size_t n) {
  if (fd_ < 0) return Status::FailedPrecondition("'" + path_ + "' is closed");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::IOError("cannot write '" + path_ + "': " + Errno(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::OK();
}

Status OutputFile::Commit() {
  if (fd_ < 0) return Status::FailedPrecondition("'" + path_ + "' is closed");
  Status st = CheckTarget(path_);  // again: something may have appeared meanwhile
  if (!st.ok()) return st;
  if (unnamed_) {
    const std::string self = "/proc/self/fd/" + std::to_string(fd_);
    // Nothing there: the file gets its name in one step.
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, path_.c_str(), AT_SYMLINK_FOLLOW) == 0) {
      const int fd = fd_;
      fd_ = -1;
      if (::close(fd) != 0) {
        const int e = errno;
        ::unlink(path_.c_str());
        return Status::IOError("cannot write '" + path_ + "': " + Errno(e));
      }
      return Status::OK();
    }
    if (errno != EEXIST) return Status::IOError("cannot create '" + path_ + "': " + Errno(errno));
    // A file is there: link under a temporary name, then rename over it.
    temp_ = path_ + ".tmp-" + std::to_string(::getpid());
    SetTemp(temp_);
    ::unlink(temp_.c_str());  // a leftover of a process that had this pid
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, temp_.c_str(), AT_SYMLINK_FOLLOW) != 0) {
      const int e = errno;
      temp_.clear();
      ClearTemp();
      return Status::IOError("cannot create '" + path_ + "': " + Errno(e));
    }
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return Status::IOError("cannot write '" + path_ + "': " + Errno(errno));
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    return Status::IOError("cannot rename '" + temp_ + "' to '" + path_ + "': " + Errno(errno));
  }
  temp_.clear();
  ClearTemp();
  return Status::OK();
}

void OutputFile::Discard() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!temp_.empty()) {
    ::unlink(temp_.c_str());
    temp_.clear();
    ClearTemp();
  }
}

}  // namespace ckptdb::cli
