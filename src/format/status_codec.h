// Status <-> proto::WireStatus, so that statuses (with their per-rank
// failures) can travel between ranks unchanged.
#ifndef CKPTDB_SRC_STATUS_CODEC_H_
#define CKPTDB_SRC_STATUS_CODEC_H_

#include <string>
#include <string_view>

#include "ckptdb.pb.h"
#include "ckptdb/status.h"

namespace ckptdb {

void StatusToProto(const Status& s, proto::WireStatus* out);
Status StatusFromProto(const proto::WireStatus& w);

std::string EncodeStatus(const Status& s);
// A message that does not parse becomes an Internal status saying so.
Status DecodeStatus(std::string_view bytes);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_STATUS_CODEC_H_
