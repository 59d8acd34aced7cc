#include "checkpoint/verdict.h"

#include <map>
#include <vector>

#include "format/status_codec.h"
#include "util/status_macros.h"

namespace ckptdb {

Status AgreeOnVerdict(Communicator& comm, int root, const Status& mine, const std::string& what,
                      const std::string& failure) {
  std::vector<std::string> all;
  std::map<int, Status> missing;
  RETURN_IF_ERROR(comm.Gather(EncodeStatus(mine), root, &all, &missing).WithContext(what));
  std::string verdict;
  if (comm.rank() == root) {
    std::map<int, Status> failures = std::move(missing);
    for (size_t r = 0; r < all.size(); ++r) {
      if (failures.count(static_cast<int>(r))) continue;
      Status st = DecodeStatus(all[r]);
      if (!st.ok()) failures[static_cast<int>(r)] = st;
    }
    verdict = EncodeStatus(failures.empty() ? Status::OK() : Status::CheckpointError(failure, std::move(failures)));
  }
  Status told = comm.Broadcast(&verdict, root);
  // (The root knows the verdict even when it could not tell every rank.)
  if (!told.ok() && comm.rank() != root) return told.WithContext(what);
  return DecodeStatus(verdict);
}

}  // namespace ckptdb
