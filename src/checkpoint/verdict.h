// Every rank returns the same verdict: the statuses of all ranks meet at a
// root, which combines them and tells every rank. What a rank other than
// the root sends and receives does not grow with the world size.
#ifndef CKPTDB_SRC_CHECKPOINT_VERDICT_H_
#define CKPTDB_SRC_CHECKPOINT_VERDICT_H_

#include <string>

#include "ckptdb/communicator.h"
#include "ckptdb/status.h"

namespace ckptdb {

// Gathers every rank's `mine` at `root`: OK when every rank's is OK, else a
// checkpoint error `failure` naming each failed rank with its status (and
// each rank whose status never reached the root, with why); the root
// broadcasts it and every rank returns it. A rank that cannot reach the
// root, or hear from it, returns that error in the context of `what`.
Status AgreeOnVerdict(Communicator& comm, int root, const Status& mine, const std::string& what,
                      const std::string& failure);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_CHECKPOINT_VERDICT_H_
