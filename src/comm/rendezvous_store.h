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
// missing). Each network call to Redis is bounded by `timeout`.
StatusOr<std::unique_ptr<RendezvousStore>> OpenRendezvousStore(const std::string& uri,
                                                               std::chrono::milliseconds timeout);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_RENDEZVOUS_STORE_H_
