// Picks the communicator a Save or Load runs on: a local one for no_dist, the
// caller's otherwise, after checking the coordinator rank against it.
#ifndef CKPTDB_SRC_RESOLVE_COMMUNICATOR_H_
#define CKPTDB_SRC_RESOLVE_COMMUNICATOR_H_

#include <memory>

#include "ckptdb/communicator.h"
#include "ckptdb/status.h"

namespace ckptdb {

// On success *out is usable; *local owns it when no_dist.
Status ResolveCommunicator(bool no_dist, Communicator* given, int coordinator_rank,
                           std::unique_ptr<Communicator>* local, Communicator** out);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_RESOLVE_COMMUNICATOR_H_
