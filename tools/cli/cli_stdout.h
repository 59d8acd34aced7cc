// The standard output of the `ckptdb` command, checked: a command whose
// output could not be written (a full disk, a closed stdout, a pipe whose
// reader left while SIGPIPE is ignored) must not report success.
//
// SIGPIPE is left as the process got it: by default a reader that leaves
// early (`ckptdb ls STORE | head -1`) ends the command silently by SIGPIPE,
// as it does cat or ls; where it is ignored, the write fails with EPIPE and
// that is reported like any other failed write.
#ifndef CKPTDB_TOOLS_CLI_STDOUT_H_
#define CKPTDB_TOOLS_CLI_STDOUT_H_

#include "ckptdb/status.h"

namespace ckptdb::cli {

// Call first in main. Fills any of the descriptors 0, 1 and 2 that is closed
// with /dev/null (descriptor 1 read-only, so that writes to a closed stdout
// still fail), so that no file the command opens later takes their place;
// then points std::cout at a buffer of its own over descriptor 1 that
// remembers the first failed write and its errno, and drops the output from
// there on.
void InstallCheckedStdout();

// Writes out what std::cout holds. OK when every write of the output
// succeeded; otherwise IOError "cannot write to standard output: <reason>".
Status FlushCheckedStdout();

}  // namespace ckptdb::cli

#endif  // CKPTDB_TOOLS_CLI_STDOUT_H_
