// Status and StatusOr<T>: how every ckptdb call reports failure.
//
// A Status is cheap: an OK status is a null pointer, so returning success
// costs nothing. Codes are chosen by what the caller should do next:
//
//   kInvalidArgument    the call itself is wrong (bad shape, bad step, ...):
//                       fix the arguments; retrying will not help.
//   kNotFound           the named thing (step, FQN, store) does not exist.
//   kAlreadyExists      the step is already committed; pick another step.
//   kFailedPrecondition the store or the state dict is not in a state that
//                       allows the call (wrong kind of entry, not a store).
//   kDataLoss           stored bytes are corrupt (checksum, truncated value,
//                       unreadable metadata). Never retried silently.
//   kUnavailable        a transient failure (I/O, a peer went away): retry
//                       the whole save or load.
//   kDeadlineExceeded   a collective or rendezvous timed out.
//   kAborted            the save/load was abandoned because another rank
//                       failed; the per-rank failures say why.
//   kIOError            the file system refused an operation.
//   kInternal           a bug in ckptdb.
//
// A checkpoint error (a save or load that failed on one or more ranks)
// additionally carries rank_failures(): rank -> that rank's own Status. The
// message names every failed rank, and every rank returns an equal Status.
//
// Thread safety: Status and StatusOr are values; const methods may be called
// concurrently.
#ifndef CKPTDB_STATUS_H_
#define CKPTDB_STATUS_H_

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

namespace ckptdb {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,
  kNotFound = 2,
  kAlreadyExists = 3,
  kFailedPrecondition = 4,
  kDataLoss = 5,
  kUnavailable = 6,
  kDeadlineExceeded = 7,
  kAborted = 8,
  kIOError = 9,
  kInternal = 10,
};

// "OK", "InvalidArgument", ... (stable; used in messages and JSON).
const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
  static Status NotFound(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
  static Status AlreadyExists(std::string m) { return Status(StatusCode::kAlreadyExists, std::move(m)); }
  static Status FailedPrecondition(std::string m) { return Status(StatusCode::kFailedPrecondition, std::move(m)); }
  static Status DataLoss(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
  static Status Unavailable(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }
  static Status DeadlineExceeded(std::string m) { return Status(StatusCode::kDeadlineExceeded, std::move(m)); }
  static Status Aborted(std::string m) { return Status(StatusCode::kAborted, std::move(m)); }
  static Status IOError(std::string m) { return Status(StatusCode::kIOError, std::move(m)); }
  static Status Internal(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }

  // A checkpoint error: `message` (e.g. "Failed to write data") plus the
  // status of every failed rank. The code is that of the lowest failed rank
  // when all failed ranks agree on it, else kAborted.
  static Status CheckpointError(std::string message, std::map<int, Status> rank_failures);

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  // The message without the code name.
  const std::string& message() const;
  // Empty unless this is a checkpoint error.
  const std::map<int, Status>& rank_failures() const;
  bool IsCheckpointError() const { return rep_ && !rep_->rank_failures.empty(); }

  // "OK" or "<CodeName>: <message>"; a checkpoint error lists every rank.
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>" (OK stays OK).
  Status WithContext(const std::string& context) const;

  friend bool operator==(const Status& a, const Status& b);
  friend bool operator!=(const Status& a, const Status& b) { return !(a == b); }

 private:
  struct Rep {
    StatusCode code;
    std::string message;
    std::map<int, Status> rank_failures;
  };
  std::shared_ptr<const Rep> rep_;
};

std::ostream& operator<<(std::ostream& os, const Status& s);

// Either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const T& value) : value_(value) {}          // NOLINT: implicit by design
  StatusOr(T&& value) : value_(std::move(value)) {}    // NOLINT
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = Status::Internal("StatusOr constructed from an OK Status without a value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok(). Aborts with the status printed otherwise.
  T& value() & { Check(); return *value_; }
  const T& value() const& { Check(); return *value_; }
  T&& value() && { Check(); return std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void Check() const {
    if (!status_.ok()) {
      std::string s = status_.ToString();
      fprintf(stderr, "ckptdb: StatusOr::value() on an error: %s\n", s.c_str());
      std::abort();
    }
  }
  Status status_;
  std::optional<T> value_;
};

}  // namespace ckptdb

#endif  // CKPTDB_STATUS_H_
