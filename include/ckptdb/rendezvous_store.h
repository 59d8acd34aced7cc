// RendezvousStore: the key-value store the ranks of a job meet in before
// they connect to each other (ConnectGloo, distributed.h).
//
// ckptdb brings two (CKPTDB_RENDEZVOUS=file:///dir or redis://host:port);
// an application that already has a store its ranks share (PyTorch's c10d
// store under torchrun: the Python package adapts it) implements this
// interface and passes it to ConnectGloo.
//
// Contract: keys are written once and never change. CreateKey is atomic and
// fails (returns false) when the key exists, so the first writer wins and a
// second one learns that someone was there first. Neither call blocks
// waiting for a key: the callers poll, each against its own deadline.
// Errors are returned as Status (Unavailable or DeadlineExceeded for a store
// that cannot be reached), never thrown.
//
// Thread safety: ConnectGloo calls a store from one thread at a time.
#ifndef CKPTDB_RENDEZVOUS_STORE_H_
#define CKPTDB_RENDEZVOUS_STORE_H_

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

}  // namespace ckptdb

#endif  // CKPTDB_RENDEZVOUS_STORE_H_
