// Bulk bytes between two ranks over the Communicator's point-to-point
// messages, for a store that only the coordinator's host has
// (StoreAccess::kCoordinatorOnly): files sent to the coordinator on save,
// chunk values sent to a loading rank.
//
// A stream is a sequence of frames, each a 16-byte header (magic, kind,
// payload length) and its payload; no frame is larger than kMaxFramePayload,
// so a receiver's memory is bounded whatever the size of a file. A file
// travels as a begin frame (its name and size), data frames, and an end frame
// with the XXH3-64 of its bytes, checked on arrival: a file that arrives
// damaged, short or long is a DataLoss naming the sender, never ingested. A
// sender that fails half-way sends an error frame with its status, which the
// receiver returns (an error of the sending rank).
#ifndef CKPTDB_SRC_COMM_TRANSFER_H_
#define CKPTDB_SRC_COMM_TRANSFER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/communicator.h"
#include "ckptdb/status.h"

namespace ckptdb {

// The largest payload of one frame: files travel in blocks of this size.
inline constexpr uint64_t kMaxFramePayload = 8u << 20;

enum class FrameKind : uint32_t {
  kFileBegin = 1,  // payload: u64 size, then the file's name
  kData = 2,       // payload: bytes
  kFileEnd = 3,    // payload: u64 XXH3-64 of the file's bytes
  kDone = 4,       // no payload: the stream ends
  kError = 5,      // payload: an encoded Status (format/status_codec.h)
  kValue = 6,      // payload: one chunk value (loads)
  kMissing = 7,    // no payload: the requested chunk is not in the store
  kRequest = 8,    // payload: a load's chunk requests
  kBatch = 9,      // payload: per value, u8 kind (kValue or kMissing) and u64 length; the values follow
                   // as messages of their own, one per non-empty value (loads)
};

// Sends one frame to `peer`.
Status SendFrame(Communicator& comm, int peer, FrameKind kind, std::string_view payload);
// Receives one frame from `peer` into *kind and *payload (reused). A frame
// whose header is not one, or whose payload exceeds max_payload, is DataLoss
// (the stream is out of step).
Status RecvFrame(Communicator& comm, int peer, FrameKind* kind, std::string* payload,
                 uint64_t max_payload = kMaxFramePayload);
// Sends an error frame carrying `st` (best effort: the stream may be broken).
void SendErrorFrame(Communicator& comm, int peer, const Status& st);
// The status an error frame carries.
Status DecodeErrorFrame(const std::string& payload);

// Sends every file of `paths` to `peer` and then a done frame; a file that
// cannot be read is sent as an error frame and returned.
Status SendFiles(Communicator& comm, int peer, const std::vector<std::string>& paths);

// Receives the files `peer` sends (SendFiles) until its done frame. Each is
// written (and synced) at path_for(name), which must not exist yet; the
// paths written are appended to *received, in the order sent (also on
// error, for cleanup). Checks every file's size and checksum.
Status ReceiveFiles(Communicator& comm, int peer, const std::function<StatusOr<std::string>(const std::string&)>& path_for,
                    std::vector<std::string>* received);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_COMM_TRANSFER_H_
