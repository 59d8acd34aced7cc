#include "format/status_codec.h"

namespace ckptdb {

void StatusToProto(const Status& s, proto::WireStatus* out) {
  out->set_code(static_cast<int>(s.code()));
  out->set_message(s.message());
  for (const auto& [rank, st] : s.rank_failures()) StatusToProto(st, &(*out->mutable_rank_failures())[rank]);
}

Status StatusFromProto(const proto::WireStatus& w) {
  if (w.code() == 0) return Status::OK();
  StatusCode code = (w.code() > 0 && w.code() <= static_cast<int>(StatusCode::kInternal))
                        ? static_cast<StatusCode>(w.code())
                        : StatusCode::kInternal;
  if (w.rank_failures().empty()) return Status(code, w.message());
  std::map<int, Status> failures;
  for (const auto& [rank, st] : w.rank_failures()) failures.emplace(rank, StatusFromProto(st));
  return Status::CheckpointError(w.message(), std::move(failures));
}

std::string EncodeStatus(const Status& s) {
  proto::WireStatus w;
  StatusToProto(s, &w);
  return w.SerializeAsString();
}

Status DecodeStatus(std::string_view bytes) {
  proto::WireStatus w;
  if (!w.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Status::Internal("a status message from another rank does not parse");
  }
  return StatusFromProto(w);
}

}  // namespace ckptdb
