#include "cli_stdout.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <streambuf>
#include <string>

namespace ckptdb::cli {

namespace {

// A buffered stream buffer over a file descriptor that remembers the first
// error. Once a write failed, nothing more is written.
class CheckedFdBuf final : public std::streambuf {
 public:
  explicit CheckedFdBuf(int fd) : fd_(fd) { setp(buf_, buf_ + sizeof buf_); }
  int error() const { return error_; }

 protected:
  int_type overflow(int_type c) override {
    if (!Drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }

  std::streamsize xsputn(const char* s, std::streamsize n) override {
    if (n < static_cast<std::streamsize>(sizeof buf_)) return std::streambuf::xsputn(s, n);
    // Large writes (cat --raw) go straight through.
    if (!Drain() || !WriteAll(s, static_cast<size_t>(n))) return 0;
    return n;
  }

  int sync() override { return Drain() ? 0 : -1; }

 private:
  bool Drain() {
    const size_t n = static_cast<size_t>(pptr() - pbase());
    setp(buf_, buf_ + sizeof buf_);
    return WriteAll(buf_, n);
  }

  bool WriteAll(const char* p, size_t n) {
    if (error_ != 0) return false;
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        error_ = errno;
        return false;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }

  int fd_;
  int error_ = 0;
  char buf_[1 << 16];
};

// Lives until the process ends (std::cout is flushed at exit, after main).
CheckedFdBuf* g_stdout = nullptr;

}  // namespace

void InstallCheckedStdout() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      // open returns the lowest free descriptor: this one.
      const int filled = ::open("/dev/null", fd == 2 ? O_WRONLY : O_RDONLY);
      if (filled >= 0 && filled != fd) ::close(filled);
    }
  }
  if (g_stdout == nullptr) g_stdout = new CheckedFdBuf(STDOUT_FILENO);
  std::cout.rdbuf(g_stdout);
}

Status FlushCheckedStdout() {
  std::cout.flush();
  if (g_stdout != nullptr && g_stdout->error() != 0) {
    return Status::IOError(std::string("cannot write to standard output: ") + std::strerror(g_stdout->error()));
  }
  if (!std::cout) return Status::IOError("cannot write to standard output");
  return Status::OK();
}

}  // namespace ckptdb::cli
