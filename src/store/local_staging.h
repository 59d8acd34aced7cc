// A rank's local staging directories (StoreAccess::kCoordinatorOnly): the
// folder on the rank's own host where its SST files wait to be sent to the
// coordinator, one per save, "ckptdb-staging-<save id>-rank-<R>" under
// StoreOptions.local_staging_dir (else $TMPDIR, else /tmp).
//
// The save removes its folder once its files are sent (or the save failed),
// but a rank that dies (killed, out of memory, its host rebooted) cannot, and
// nothing on the coordinator's side sees that host's disk. So each folder has
// a lock file beside it ("<folder>.lock") that the saving process holds
// (flock) while the folder is in use; the kernel lets go of it when the
// process ends, however it ends. Before a rank makes its folder it sweeps the
// root: every folder whose lock file it can lock belongs to no live process
// and is removed, with its lock file. A live save's folder is never touched
// (its lock is held, by this process or another; flock locks of separate
// opens conflict within one process too). Folders without a lock file
// (written by ckptdb before these locks) are left alone.
#ifndef CKPTDB_SRC_STORE_LOCAL_STAGING_H_
#define CKPTDB_SRC_STORE_LOCAL_STAGING_H_

#include <string>

#include "ckptdb/status.h"

namespace ckptdb {

// Holds the lock of one staging folder while it lives.
class StagingLock {
 public:
  StagingLock() = default;
  ~StagingLock();
  StagingLock(StagingLock&& other) noexcept;
  StagingLock& operator=(StagingLock&& other) noexcept;
  StagingLock(const StagingLock&) = delete;
  StagingLock& operator=(const StagingLock&) = delete;

  // Removes the folder and its lock file, then lets go of the lock.
  void RemoveFolder();

 private:
  friend StatusOr<StagingLock> MakeStagingFolder(const std::string& dir);
  int fd_ = -1;
  std::string dir_;
};

// Removes the staging folders under `root` that no live process holds
// (best effort: a folder that cannot be removed is left). Returns how many
// were removed.
int SweepAbandonedStagingFolders(const std::string& root);

// Locks `dir`'s lock file (making it), then makes `dir` empty. IOError
// naming the path when either cannot be made.
StatusOr<StagingLock> MakeStagingFolder(const std::string& dir);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_STORE_LOCAL_STAGING_H_
