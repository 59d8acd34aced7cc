// A regular file written whole or not at all, for `ckptdb export`.
//
// The bytes go to a file with no name yet (O_TMPFILE in OUT's directory), so
// that however the command ends before Commit (an error, Ctrl-C, SIGKILL, a
// full disk) nothing is left behind. Commit gives it its name: linked as OUT
// when nothing is there, or linked under OUT.tmp-PID and renamed over OUT.
// Where the file system has no O_TMPFILE, OUT.tmp-PID is written instead,
// and removed on every failure and on SIGINT, SIGTERM and SIGHUP.
//
// OUT must be absent or a regular file: a symbolic link (even a dangling one)
// is neither followed nor replaced, and a directory, device, FIFO or socket
// is never replaced by a file. Both are refused (InvalidArgument naming OUT
// and what it is) before anything is written, and again at Commit.
#ifndef CKPTDB_TOOLS_CLI_OUTPUT_FILE_H_
#define CKPTDB_TOOLS_CLI_OUTPUT_FILE_H_

#include <cstddef>
#include <memory>
#include <string>

#include "ckptdb/status.h"

namespace ckptdb::cli {

class OutputFile {
 public:
  // Checks `path` (see above) and opens the file that will become it.
  static StatusOr<std::unique_ptr<OutputFile>> Create(const std::string& path);
  // Discards the file unless Commit succeeded.
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // IOError naming the path and the reason (e.g. "No space left on device").
  Status Write(const void* data, size_t n);
  // Closes the file and puts it in place at `path`, atomically replacing a
  // regular file there. After an error nothing is left but what was at
  // `path` before.
  Status Commit();

 private:
  OutputFile(std::string path, std::string dir, int fd, bool unnamed);
  void Discard();

  std::string path_;
  std::string dir_;
  std::string temp_;  // the named temporary, while one exists
  int fd_ = -1;
  bool unnamed_ = false;
};

}  // namespace ckptdb::cli

#endif  // CKPTDB_TOOLS_CLI_OUTPUT_FILE_H_
