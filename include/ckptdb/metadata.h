// StepMetadata: what one committed step holds and where its bytes are.
//
// This is the in-memory form of the Protobuf `Metadata` in
// proto/ckptdb.proto, the record that makes a step exist. Every entry of the
// saved state dict is described by its kind, dtype and global shape, and by
// the pieces it was stored as: one piece for a tensor or a bytes entry, one
// per saved shard for a sharded tensor. A piece names its storage key (the
// rank that wrote it and an item number unique within that rank's part of
// the save) and how its bytes were cut into chunks.
#ifndef CKPTDB_METADATA_H_
#define CKPTDB_METADATA_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ckptdb/dtype.h"
#include "ckptdb/tensor.h"

namespace ckptdb {

// Persisted numbers; never change.
enum class EntryKind : int { kTensor = 1, kShardedTensor = 2, kBytes = 3 };
const char* EntryKindName(EntryKind kind);  // "tensor", "sharded_tensor", "bytes"

// How a bytes entry's bytes encode the value that was saved, recorded with
// the entry so that a load gives back that value whatever the target holds
// (the Python package: `bytes` as bytes, any other object as that object).
// Persisted numbers; never change. ckptdb itself never decodes the bytes.
enum class BytesEncoding : int {
  kUnrecorded = 0,  // not recorded: stores written before it was; tensor entries
  kRaw = 1,         // the value is the bytes themselves (the default of Bytes)
  kPickle = 2,      // a Python object, pickled (pickle.dumps)
  kTorchSave = 3,   // a Python object, torch.save'd (DCP's bytes items)
};
// "unrecorded", "raw", "pickle", "torch_save"; "unknown" for another number (a
// newer writer's, kept as it is by readers).
const char* BytesEncodingName(BytesEncoding encoding);

// Names the stored bytes of one piece within a save attempt.
struct StorageKey {
  uint32_t rank = 0;  // the rank that wrote the piece
  uint32_t item = 0;  // unique among the pieces that rank wrote in this save
  friend bool operator==(const StorageKey& a, const StorageKey& b) { return a.rank == b.rank && a.item == b.item; }
};

// Chunks of a piece that are stored once, under another save's keys
// (deduplication across steps, proto/FORMAT.md "References"): chunks
// [first, first + count) of the piece are chunks [chunk, chunk + count) of
// the piece `key` of save attempt `save_id` of step `step`. That step may
// have been deleted since: its chunks stay while any step refers to them.
struct ChunkReference {
  uint32_t first = 0;
  uint32_t count = 0;
  int64_t step = 0;
  uint64_t save_id = 0;
  StorageKey key;
  uint32_t chunk = 0;
  friend bool operator==(const ChunkReference& a, const ChunkReference& b) {
    return a.first == b.first && a.count == b.count && a.step == b.step && a.save_id == b.save_id &&
           a.key == b.key && a.chunk == b.chunk;
  }
};

// Where chunk c of a piece of the step (step, save_id) is stored.
struct ChunkLocation {
  int64_t step = 0;
  uint64_t save_id = 0;
  StorageKey key;
  uint32_t chunk = 0;
  friend bool operator<(const ChunkLocation& a, const ChunkLocation& b) {
    if (a.step != b.step) return a.step < b.step;
    if (a.save_id != b.save_id) return a.save_id < b.save_id;
    if (a.key.rank != b.key.rank) return a.key.rank < b.key.rank;
    if (a.key.item != b.key.item) return a.key.item < b.key.item;
    return a.chunk < b.chunk;
  }
};

// One stored blob: a whole tensor, one shard, or a bytes entry.
struct StoredPiece {
  // Region of the global tensor, row-major. A tensor's single piece covers it
  // whole (0-d: both empty); a bytes entry has offsets {0}, sizes {length}.
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
  StorageKey key;
  uint64_t nbytes = 0;        // logical (raw) bytes of the piece
  uint64_t chunk_bytes = 0;   // raw bytes per chunk; the last chunk may be shorter
  uint32_t num_chunks = 0;    // ceil(nbytes / chunk_bytes), or the grid's boxes; 0 when nbytes == 0
  // Bytes of the chunk values this piece's own save wrote (after
  // compression): chunks shared with earlier steps (`references`) are not
  // counted, so summed over a step this is what the step added to the store.
  uint64_t stored_bytes = 0;
  // The content of each chunk: kChunkHashBytes bytes per chunk, in chunk
  // order (XXH3-128 of the chunk's raw bytes; proto/FORMAT.md). Empty when
  // the save did not record them (stores written before, or
  // StoreOptions::content_hashes off).
  std::string chunk_hashes;
  // Chunks stored under another save's keys, ordered by `first`, disjoint;
  // every other chunk is under this piece's own key. Empty unless the save
  // deduplicated (StoreOptions::deduplicate).
  std::vector<ChunkReference> references;
  // How the piece's chunks were encoded (PieceEncoding in
  // src/format/chunk_codec.h); 0 when not recorded (older stores). A chunk is
  // shared only between pieces encoded alike.
  uint32_t encoding = 0;
  // Store format 4: chunks are the boxes of a grid of this shape over the
  // piece (one extent per dimension; chunk c is the box at position c in
  // row-major order, clipped to the piece, and holds that box's elements in
  // row-major order); chunk_bytes is then a whole box's raw bytes. Empty:
  // chunks are runs of chunk_bytes of the piece's row-major bytes.
  std::vector<int64_t> chunk_shape{};

  // Where chunk c is stored, for a piece of save (step, save_id).
  ChunkLocation LocateChunk(int64_t step, uint64_t save_id, uint32_t c) const;
  // The raw bytes of chunk c (the last chunk may be shorter). REQUIRES:
  // c < num_chunks.
  uint64_t chunk_raw_bytes(uint32_t c) const;
  // For a piece cut into boxes: the region of the global tensor chunk c
  // holds. REQUIRES: chunk_shape set, c < num_chunks.
  void chunk_region(uint32_t c, std::vector<int64_t>* offsets, std::vector<int64_t>* sizes) const;
  // Chunks stored under other saves' keys.
  uint64_t referenced_chunks() const;
};

// Bytes of one chunk's content hash in StoredPiece::chunk_hashes.
inline constexpr size_t kChunkHashBytes = 16;

// An entry's piece count and the sum of its pieces' stored_bytes.
struct PieceTotals {
  uint64_t pieces = 0;
  uint64_t stored_bytes = 0;
};

struct EntryMetadata {
  std::string fqn;
  EntryKind kind = EntryKind::kTensor;
  DType dtype = DType::kU8;  // kU8 for bytes entries
  Shape shape;               // global shape; {length} for bytes entries
  std::vector<StoredPiece> pieces;
  // Bytes entries: how the bytes encode the saved value (kUnrecorded in
  // steps written before it was recorded, and for tensor entries).
  BytesEncoding bytes_encoding = BytesEncoding::kUnrecorded;
  // True when this entry's pieces were not read: metadata read for other
  // entries only (StorageReader::ReadMetadataOf) leaves every entry it was
  // not asked for with its name, kind, dtype, shape and bytes encoding, and
  // `pieces` empty. Such metadata describes where none of these entries'
  // bytes are: it is never valid as a whole step's (ValidateStepMetadata
  // refuses it, and nothing stores it).
  bool pieces_omitted = false;
  // True when `pieces` holds only some of the entry's pieces: at least every
  // piece that meets the regions a load named (StorageReader::
  // ReadMetadataFor), possibly others. Read of those regions takes it; like
  // pieces_omitted, it is never valid as a whole step's metadata, and the
  // entry's totals are the recorded ones.
  bool pieces_partial = false;
  // The entry's PieceTotals as the step's record states them beside its
  // entries, read with the record whether or not the pieces were: set in
  // steps whose pieces are stored apart (store format 6) and that were saved
  // since the record holds them; unset in others. A reader checks them
  // against the pieces it reads (DataLoss when they differ).
  std::optional<PieceTotals> recorded_totals{};

  // The raw bytes of the entry (its pieces' nbytes summed; with
  // pieces_omitted or pieces_partial, from its shape and dtype, which its pieces cover
  // exactly).
  uint64_t logical_bytes() const;
  // The sum of its pieces' stored_bytes; 0 with pieces_omitted.
  uint64_t stored_bytes() const;
  // Its PieceTotals: from its pieces, or with pieces_omitted or
  // pieces_partial, recorded_totals (unset when not recorded).
  std::optional<PieceTotals> totals() const;
};

// A metric's name (SaveOptions::metrics): 1 to 128 characters, none of them
// whitespace or a control character ("val_loss", "eval/accuracy"), so that
// it is one word on a command line. InvalidArgument naming it otherwise.
Status ValidateMetricName(const std::string& name);
// A step's metrics and note as SaveOptions takes them: valid names, finite
// values (InvalidArgument naming the metric for NaN or an infinity), a note
// of at most kMaxNoteBytes.
inline constexpr size_t kMaxNoteBytes = 64u << 10;
Status ValidateMetricsAndNote(const std::map<std::string, double>& metrics, const std::string& note);

struct StepMetadata {
  uint32_t format_version = 1;
  int64_t step = 0;
  int64_t created_unix_ms = 0;
  int32_t world_size = 1;
  int32_t coordinator_rank = 0;
  uint64_t save_id = 0;  // random per save attempt; tells committed data from leftovers
  std::vector<EntryMetadata> entries;  // in the saved state dict's order
  // What the step recorded about itself (SaveOptions::metrics and note);
  // empty in steps saved without them.
  std::map<std::string, double> metrics;
  std::string note;
  // Records the application attached to the step (SaveOptions::annotations),
  // by name, stored as they are; empty in steps written before.
  std::map<std::string, std::string> annotations;

  const EntryMetadata* Find(const std::string& fqn) const;
  uint64_t logical_bytes() const;
  uint64_t stored_bytes() const;
};

}  // namespace ckptdb

#endif  // CKPTDB_METADATA_H_
