// The key-value store ranks meet in: a directory every rank can reach
// (file:///dir) or a Redis server (redis://host:port).
//
// Keys are written once and never change: creating a key is atomic and
// fails (returns false) when the key exists, so the first writer wins and a
// second one learns that someone was there first. Nothing here blocks: the
// callers poll, each against its own deadline.
#ifndef CKPTDB_SRC_RENDEZVOUS_STORE_H_
#define CKPTDB_SRC_RENDEZVOUS_STORE_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "ckptdb/status.h"

namespace ckptdb {

class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;

  // Creates `key` holding `value` unless it exists: true when this call
  // created it, false when it existed already (its value is left alone).
  virtual StatusOr<bool> CreateKey(const std::string& key, const std::string& value) = 0;
  // The value of `key`, or nullopt when it does not exist (yet).
  virtual StatusOr<std::optional<std::string>> Get(const std::string& key) = 0;
};

// Opens the store named by `uri` (file:// creates the directory when
// missing). Each network call to Redis is bounded by `timeout`.
StatusOr<std::unique_ptr<RendezvousStore>> OpenRendezvousStore(const std::string& uri,
                                                               std::chrono::milliseconds timeout);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_RENDEZVOUS_STORE_H_
