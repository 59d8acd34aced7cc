// The rendezvous stores ckptdb brings: a directory every rank can reach
// (file:///dir) or a Redis server (redis://host:port). The interface is
// public (ckptdb/rendezvous_store.h): an application may bring its own.
#ifndef CKPTDB_SRC_RENDEZVOUS_STORE_H_
#define CKPTDB_SRC_RENDEZVOUS_STORE_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "ckptdb/rendezvous_store.h"
#include "ckptdb/status.h"

namespace ckptdb {

// Opens the store named by `uri` (file:// creates the directory when
// missing). Each network call to Redis, connecting included, waits for its
// reply only for the time left before `deadline` (at least
// kRendezvousCommandFloor, so that a last poll at the deadline can still be
// answered): a server that stops answering fails the call with
// DeadlineExceeded at the deadline, not a whole timeout later.
StatusOr<std::unique_ptr<RendezvousStore>> OpenRendezvousStore(const std::string& uri,
                                                               std::chrono::steady_clock::time_point deadline);

inline constexpr std::chrono::milliseconds kRendezvousCommandFloor{100};

}  // namespace ckptdb

#endif  // CKPTDB_SRC_RENDEZVOUS_STORE_H_
