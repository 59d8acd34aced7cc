// rocksdb::Status -> ckptdb::Status, at the edge, with context.
#ifndef CKPTDB_SRC_ROCKSDB_STATUS_H_
#define CKPTDB_SRC_ROCKSDB_STATUS_H_

#include <rocksdb/status.h>

#include <string>

#include "ckptdb/status.h"

namespace ckptdb {

inline Status FromRocks(const rocksdb::Status& s, const std::string& context) {
  if (s.ok()) return Status::OK();
  std::string m = context + ": " + s.ToString();
  if (s.IsNotFound()) return Status::NotFound(m);
  if (s.IsCorruption()) return Status::DataLoss(m);
  if (s.IsInvalidArgument()) return Status::InvalidArgument(m);
  if (s.IsIOError()) return Status::IOError(m);
  if (s.IsBusy() || s.IsTryAgain() || s.IsTimedOut() || s.IsIncomplete()) return Status::Unavailable(m);
  if (s.IsNotSupported()) return Status::FailedPrecondition(m);
  return Status::Internal(m);
}

}  // namespace ckptdb

#endif  // CKPTDB_SRC_ROCKSDB_STATUS_H_
