// Encoding of StepMetadata (and the protocol's wire messages) to and from the
// Protobuf messages of proto/ckptdb.proto. Encoding is apart from I/O: these
// are pure functions, validated on decode.
#ifndef CKPTDB_SRC_METADATA_CODEC_H_
#define CKPTDB_SRC_METADATA_CODEC_H_

#include <optional>
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
// Set the storage fields of `p` (all but its region, key and nbytes) from
// what its rank reported writing: its encoded report's item, or its own
// written item, moved out.
void SetWrittenFields(const proto::WrittenItem& w, StoredPiece* p);
void MoveWrittenFields(WrittenItem&& w, StoredPiece* p);
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
// Its two halves. ValidateStepHeader: what holds without the pieces
// (version, world, metrics, note, annotations, unique FQNs, each entry's
// shape, dtype and encoding for its kind). ValidateEntryPieces: one entry's
// pieces (counts, regions, chunks, references); InvalidArgument when they
// were not read (EntryMetadata::pieces_omitted).
Status ValidateStepHeader(const StepMetadata& m);
Status ValidateEntryPieces(const StepMetadata& m, const EntryMetadata& e, bool check_storage = true);

// The stored value under M|step: a chunk value (chunk_codec.h) holding the
// serialized proto::Metadata. EncodeMetadataValue: every entry with its
// pieces (format_version 1; store formats 1-5, the bucket store, the wire).
std::string EncodeMetadataValue(const StepMetadata& m);
// DataLoss when the value is corrupt, unparsable or inconsistent, or when its
// pieces are stored apart (a format-6 record: DecodeMetadataRecord).
StatusOr<StepMetadata> DecodeMetadataValue(std::string_view value);

// Store format 6: the M value holds the entries without their pieces
// (Metadata.format_version kMetadataRecordPiecesApart), and each entry's
// pieces are under PiecesKey(step, index) (EncodeEntryPiecesValue).
inline constexpr uint32_t kMetadataRecordPiecesApart = 2;

// Store format 7: an entry of more than kPiecesPerPage pieces keeps them in
// pages of kPiecesPerPage consecutive pieces (the last may hold fewer), each
// under PiecesPageKey(step, index, page) (EncodeEntryPiecesPage), and the M
// value records each page's box: the smallest box that holds its pieces.
// A load reads only the pages whose boxes meet the regions it loads, so what
// a rank reads of an entry saved by W ranks does not grow with W.
inline constexpr size_t kPiecesPerPage = 64;
struct PiecesPage {
  std::vector<int64_t> offsets, sizes;
  uint32_t pieces = 0;
  bool exact = false;  // a grid's cell (below): its one piece is this box
};
// The pages of `e` (with its pieces): none when it has kPiecesPerPage
// pieces or fewer.
std::vector<PiecesPage> PagesOf(const EntryMetadata& e);

// The pages (their indices, increasing) whose boxes meet one of `regions`
// (the regions of the pages' entry) in at least one element.
std::vector<uint32_t> PagesMeeting(const std::vector<PiecesPage>& pages, const std::vector<EntryRegion>& regions);

// Store format 8: an entry of kGridMinPieces pieces or more (9) that tile its
// shape on a regular grid (every piece one cell: block sizes per dimension,
// the last block along a dimension smaller when the size is not a multiple;
// what DTensor Shard(d), FSDP and tensor parallelism make) records the grid
// instead of pages, and keeps each cell's piece as a page of its own: page c
// is cell c in row-major order. What the M value says of such an entry does
// not grow with its pieces, and a load reads only the cells it needs.
inline constexpr size_t kGridMinPieces = 9;
struct PiecesGrid {
  std::vector<int64_t> block;          // per dimension, in [1, shape[d]]
  std::vector<uint32_t> piece_of_cell;  // (writer only) cell c's piece: e.pieces[piece_of_cell[c]]
};
// The grid of `e` (with its pieces) when it has kGridMinPieces pieces or
// more and they tile it so; nullopt otherwise.
std::optional<PiecesGrid> GridOf(const EntryMetadata& e);
// GridOf of every entry of `m`.
std::vector<std::optional<PiecesGrid>> GridsOf(const StepMetadata& m);
// How many cells `block` makes of `shape` (0 when they do not fit: a block
// outside [1, shape[d]], or more than 2^32 cells).
uint64_t GridCells(const std::vector<int64_t>& shape, const std::vector<int64_t>& block);
// Cell `cell`'s box as a page of one piece (`exact`: the piece is the box).
PiecesPage GridCellPage(const std::vector<int64_t>& shape, const std::vector<int64_t>& block, uint64_t cell);
// The cells (increasing) that meet one of `regions` in at least one element.
std::vector<uint32_t> GridCellsMeeting(const std::vector<int64_t>& shape, const std::vector<int64_t>& block,
                                       const std::vector<EntryRegion>& regions);

// With `paged`, the entries that have pages (PagesOf) record them (the
// directory store); without, none does (the bucket store's record). With
// `grids` (GridsOf(m)) too, an entry with a grid records it instead of
// pages (the directory store of format 8).
std::string EncodeMetadataRecord(const StepMetadata& m, bool paged = false,
                                 const std::vector<std::optional<PiecesGrid>>* grids = nullptr);

// A decoded M value of either kind. With pieces_apart, every entry has
// pieces_omitted set and its pieces are to be read from its pieces record;
// metadata.format_version is kFormatVersion either way. The header is
// validated (ValidateStepHeader); a record with pieces inline is validated
// whole (ValidateStepMetadata). DataLoss otherwise.
struct MetadataRecord {
  StepMetadata metadata;
  bool pieces_apart = false;
  // With pieces_apart: per entry, its pages (empty: one pieces record),
  // validated against the entry (within its shape, their piece counts
  // adding up to its recorded count).
  std::vector<std::vector<PiecesPage>> pages;
  // Per entry, its grid's block sizes (store format 8; empty: none),
  // validated (as many as the shape's dimensions, each in [1, shape[d]], as
  // many cells as the record's piece count). An entry has pages or a grid.
  std::vector<std::vector<int64_t>> grids;
};
StatusOr<MetadataRecord> DecodeMetadataRecord(std::string_view value);

// The value under PiecesKey(step, index): a chunk value holding a
// proto::EntryPieces for entry `index` of `m`.
std::string EncodeEntryPiecesValue(const StepMetadata& m, size_t index);
// Fills e->pieces (and clears e->pieces_omitted) from such a value, checking
// that it is this entry's of this save and validating the entry
// (ValidateEntryPieces). DataLoss naming the entry and step otherwise (`e`
// is then left with its pieces omitted).
Status DecodeEntryPiecesValue(std::string_view value, const StepMetadata& m, EntryMetadata* e);

// The value under PiecesPageKey(step, index, page): entry `index`'s pieces
// [page * kPiecesPerPage, +kPiecesPerPage) as a proto::EntryPieces with
// `page` set.
std::string EncodeEntryPiecesPage(const StepMetadata& m, size_t index, uint32_t page);
// The value under PiecesPageKey(step, index, cell) of an entry with grid
// `grid`: the cell's piece as a page of one.
std::string EncodeEntryPiecesCell(const StepMetadata& m, size_t index, const PiecesGrid& grid, uint32_t cell);
// Appends the pieces of such a value to `out`, checking that it is page
// `page` of entry `e` of this save, that it holds as many pieces as
// `expected` says, and that each is a valid piece of `e` inside the page's
// box. DataLoss naming the page, the entry and the step otherwise.
// (With `expected` null, the count and box are not checked: a caller that
// reads every page validates the entry whole, AdoptEntryPieces.) A grid's
// cell (`expected->exact`) must hold the one piece that is its box.
// `per_page`: how many pieces a page holds (1 for a grid's cells), to name
// a piece by its index in the entry.
Status DecodeEntryPiecesPage(std::string_view value, const StepMetadata& m, const EntryMetadata& e, uint32_t page,
                             const PiecesPage* expected, std::vector<StoredPiece>* out,
                             size_t per_page = kPiecesPerPage);
// A pieces record (as EncodeEntryPiecesValue's) holding only the pieces of
// entry `index` of `m` at `which` (increasing): what a rank of a load served
// by the coordinator (the remote reader) needs of the entry.
std::string EncodePiecesSubset(const StepMetadata& m, size_t index, const std::vector<size_t>& which);
// Gives `e` the pieces of such a value, checking that it is this entry's of
// this save and that each piece is valid, and sets pieces_partial (the
// entry's coverage is not checked: it holds some of its pieces). DataLoss
// naming the entry and step otherwise.
Status DecodePiecesSubset(std::string_view value, const StepMetadata& m, EntryMetadata* e);
// Gives `e` its pieces read from all its pages, in order, validated as
// DecodeEntryPiecesValue validates one record's (DataLoss otherwise, `e`
// then keeping its pieces omitted).
Status AdoptEntryPieces(std::vector<StoredPiece> pieces, const StepMetadata& m, EntryMetadata* e);
// Gives `e` some of its pages' pieces (each validated by
// DecodeEntryPiecesPage): sets pieces_partial. DataLoss when two overlap.
Status AdoptPartialEntryPieces(std::vector<StoredPiece> pieces, const StepMetadata& m, EntryMetadata* e);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_METADATA_CODEC_H_
