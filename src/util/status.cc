#include "ckptdb/status.h"

#include <sstream>

namespace ckptdb {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kAlreadyExists: return "AlreadyExists";
    case StatusCode::kFailedPrecondition: return "FailedPrecondition";
    case StatusCode::kDataLoss: return "DataLoss";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kDeadlineExceeded: return "DeadlineExceeded";
    case StatusCode::kAborted: return "Aborted";
    case StatusCode::kIOError: return "IOError";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) rep_ = std::make_shared<Rep>(Rep{code, std::move(message), {}});
}

Status Status::CheckpointError(std::string message, std::map<int, Status> rank_failures) {
  for (auto it = rank_failures.begin(); it != rank_failures.end();) {
    it = it->second.ok() ? rank_failures.erase(it) : std::next(it);
  }
  if (rank_failures.empty()) return Status::Internal(message + " (no failed rank was recorded)");
  StatusCode code = rank_failures.begin()->second.code();
  for (const auto& [rank, st] : rank_failures) {
    if (st.code() != code) code = StatusCode::kAborted;
  }
  Status s;
  s.rep_ = std::make_shared<Rep>(Rep{code, std::move(message), std::move(rank_failures)});
  return s;
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ ? rep_->message : kEmpty;
}

const std::map<int, Status>& Status::rank_failures() const {
  static const std::map<int, Status> kNone;
  return rep_ ? rep_->rank_failures : kNone;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::ostringstream os;
  os << StatusCodeName(rep_->code) << ": " << rep_->message;
  if (!rep_->rank_failures.empty()) {
    os << " (failed ranks:";
    for (const auto& [rank, st] : rep_->rank_failures) os << " " << rank;
    os << ")";
    for (const auto& [rank, st] : rep_->rank_failures) os << "\n  rank " << rank << ": " << st.ToString();
  }
  return os.str();
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  Status s;
  s.rep_ = std::make_shared<Rep>(Rep{rep_->code, context + ": " + rep_->message, rep_->rank_failures});
  return s;
}

bool operator==(const Status& a, const Status& b) {
  if (a.rep_ == b.rep_) return true;
  return a.code() == b.code() && a.message() == b.message() && a.rank_failures() == b.rank_failures();
}

std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.ToString(); }

}  // namespace ckptdb
