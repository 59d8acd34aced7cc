// Encoding of StepMetadata (and the protocol's wire messages) to and from the
// Protobuf messages of proto/ckptdb.proto. Encoding is apart from I/O: these
// are pure functions, validated on decode.
#ifndef CKPTDB_SRC_METADATA_CODEC_H_
#define CKPTDB_SRC_METADATA_CODEC_H_

#include <string>
#include <string_view>
#include <vector>

#include "ckptdb.pb.h"
#include "ckptdb/metadata.h"
#include "ckptdb/status.h"
#include "ckptdb/storage.h"

namespace ckptdb {

inline constexpr uint32_t kFormatVersion = 1;

void ToProto(const StoredPiece& p, proto::Piece* out);
StoredPiece FromProto(const proto::Piece& p);
void ReferencesToProto(const std::vector<ChunkReference>& refs,
                       google::protobuf::RepeatedPtrField<proto::ChunkReference>* out);
std::vector<ChunkReference> ReferencesFromProto(
    const google::protobuf::RepeatedPtrField<proto::ChunkReference>& refs);
void ToProto(const WrittenItem& w, proto::WrittenItem* out);
WrittenItem FromProto(const proto::WrittenItem& w);
void ToProto(const ReuseCandidate& c, proto::ReuseCandidate* out);
ReuseCandidate FromProto(const proto::ReuseCandidate& c);
void ToProto(const EntryMetadata& e, proto::Entry* out);
void ToProto(const StepMetadata& m, proto::Metadata* out);
// Structural conversion only (enum values checked); InvalidArgument naming the
// FQN on an unknown dtype or kind.
StatusOr<EntryMetadata> FromProto(const proto::Entry& e);
StatusOr<StepMetadata> FromProto(const proto::Metadata& m);

// Checks that a step's metadata is self-consistent: known version, unique
// FQNs, every piece within its entry's shape with matching byte and chunk
// counts, the pieces of each entry disjoint and together covering it exactly.
// InvalidArgument naming the FQN and what is wrong. With check_storage false
// the chunk fields are not checked (a plan before anything was written).
Status ValidateStepMetadata(const StepMetadata& m, bool check_storage = true);

// The stored value under M|step: a chunk value (chunk_codec.h) holding the
// serialized proto::Metadata.
std::string EncodeMetadataValue(const StepMetadata& m);
// DataLoss when the value is corrupt, unparsable or inconsistent.
StatusOr<StepMetadata> DecodeMetadataValue(std::string_view value);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_METADATA_CODEC_H_
