// Communicator: the few collectives the save and load protocols need.
//
// The collectives carry only small control messages (statuses, plans,
// metadata). Bulk bytes travel point to point (Send, Recv) only when the
// store is on the coordinator's host alone (StoreAccess::kCoordinatorOnly):
// the other ranks' files to the coordinator on save, and the chunks a rank
// loads from it. Every call is bounded by the implementation's timeout:
// a peer that dies or hangs becomes a DeadlineExceeded or Unavailable status,
// never a hang. All ranks must make the same sequence of calls.
//
// Rooted calls (Broadcast, Gather, Scatter) move messages between the root
// and each other rank only, so what a rank other than the root sends and
// receives does not grow with the world size. They tolerate lost ranks: a
// rank whose part did not reach the root's Gather (it died, its connection
// broke, or it sent nothing within the timeout) is reported to the root in
// `missing`, and the root's later rooted calls skip it, so that the root can
// still tell every other rank why the job failed. A rank other than the root
// waits for the root's Broadcast or Scatter up to twice the timeout: the
// root may first have waited out the timeout for a lost rank.
//
// Thread safety: one collective at a time per Communicator.
#ifndef CKPTDB_COMMUNICATOR_H_
#define CKPTDB_COMMUNICATOR_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckptdb/status.h"

namespace ckptdb {

// Time and traffic spent in collectives and point-to-point messages, for
// benchmarks: what this rank moved, as its implementation moves it.
struct CollectiveStats {
  uint64_t calls = 0;
  uint64_t bytes_sent = 0;  // payload this rank contributed
  double seconds = 0;
  uint64_t bytes_received = 0;     // payload that reached this rank from others
  uint64_t messages_sent = 0;      // (with messages_received: where counted; 0 otherwise)
  uint64_t messages_received = 0;
  // Other ranks this rank holds a connection to or exchanged messages with.
  uint64_t peers = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // On return, every rank's *data equals the root's (ranks lost to the root
  // earlier are skipped, and fail on their own).
  virtual Status Broadcast(std::string* data, int root) = 0;
  // Every rank sends `mine` to the root. On the root, (*out)[r] is rank r's
  // part; a rank whose part did not come has an empty part and its reason
  // in (*missing)[r] (both are required on the root), and the call still
  // succeeds. On other ranks *out and *missing are left empty, and the call
  // fails only when the part cannot reach the root.
  virtual Status Gather(const std::string& mine, int root, std::vector<std::string>* out,
                        std::map<int, Status>* missing) = 0;
  // The root sends parts[r] to rank r (parts has one per rank; ignored on
  // other ranks); every rank's *mine is its part. Ranks lost to the root are
  // skipped, as by Broadcast. The default broadcasts every part to every
  // rank: correct, but its traffic grows with the world size.
  virtual Status Scatter(const std::vector<std::string>& parts, int root, std::string* mine);
  // On every rank, *out holds every rank's `mine`, indexed by rank. Every
  // rank receives from every other: not for messages of the save and load
  // protocols, whose traffic per rank must not grow with the world size.
  virtual Status AllGather(const std::string& mine, std::vector<std::string>* out) = 0;
  virtual Status Barrier() = 0;

  // Point to point: sends the n bytes at `data` to `peer`, which receives
  // them with a Recv of exactly n bytes from this rank. Messages from one
  // rank to another arrive in the order they were sent. Returns once the
  // bytes may be reused (they may still be in flight). Unlike the
  // collectives, Send and Recv may be called from several threads at once,
  // each for its own peer and direction, while no collective runs. The
  // default refuses (FailedPrecondition): such a communicator serves only stores
  // every rank sees.
  virtual Status Send(int peer, const void* data, size_t n);
  virtual Status Recv(int peer, void* data, size_t n);
  // Several messages to (from) one peer: as a Send (Recv) of each part in
  // order, each part its own message, but with every part in flight at
  // once, so that a stream of many messages does not wait out a round trip
  // per message. Empty parts are skipped, as Send skips them. Returns once
  // every part is sent (received); the same rules as Send and Recv apply.
  // The defaults call Send (Recv) part by part.
  struct Part {
    const void* data;
    size_t n;
  };
  struct MutablePart {
    void* data;
    size_t n;
  };
  virtual Status SendParts(int peer, const std::vector<Part>& parts);
  virtual Status RecvParts(int peer, const std::vector<MutablePart>& parts);

  // Accumulated since the communicator was made.
  virtual CollectiveStats stats() const { return {}; }

  // How long a call waits for the other ranks before it fails; zero when no
  // bound is known (the default). Save tells its StorageWriter
  // (SaveContext::collective_timeout), so that a rank waiting for storage
  // between two collectives keeps within it. A communicator that wraps
  // another forwards it.
  virtual std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(0); }

  // What the protocols keep between calls through this communicator, for
  // as long as the connection lives: the save's plan cache (a save whose
  // plan is unchanged since this job's previous save sends a fingerprint
  // instead; checkpoint.h). Not for applications. A communicator that wraps
  // another has a cache of its own.
  struct ProtocolState {
    virtual ~ProtocolState() = default;
  };
  std::shared_ptr<ProtocolState>& protocol_state() { return protocol_state_; }

 private:
  std::shared_ptr<ProtocolState> protocol_state_;
};

// A communicator of world size 1 (rank 0), used for `no_dist` runs.
std::unique_ptr<Communicator> NewLocalCommunicator();

}  // namespace ckptdb

#endif  // CKPTDB_COMMUNICATOR_H_
