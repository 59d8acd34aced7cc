// The split between the checkpoint protocol and storage (as in PyTorch 1.13's
// sharded checkpoint): Save and Load (checkpoint.h) drive a StorageWriter or
// StorageReader; the RocksDB store (rocksdb_store.h) is the real
// implementation, and tests wrap it to inject faults.
//
// Call order of a save, per rank (the protocol guarantees it):
//   coordinator: Prepare(step)                 -> save id, sent to every rank
//   coordinator: FindReusable(plan)            -> candidates, each rank sent its own
//   every rank:  PrepareStorage(ctx, items)    (only when Prepare succeeded)
//   every rank:  Write(ctx, items)             -> WriteResult, gathered by the coordinator
//   with FileDelivery::kSent, when every rank wrote: every rank but the
//                coordinator sends its files to it (Save does, point to
//                point), which stores them at ReceivedFilePath; then every
//                rank but the coordinator calls DiscardLocalFiles
//   coordinator: Finish(ctx, metadata, results) when every rank succeeded,
//                Abort(ctx) otherwise, or when Finish failed.
// Load: every rank calls ReadMetadataOf(step, the FQNs it loads) and then
// Read(...) with pieces of those entries only.
//
// Thread safety: one save or load at a time per object; implementations may
// use threads internally.
#ifndef CKPTDB_STORAGE_H_
#define CKPTDB_STORAGE_H_

#include <cstdint>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "ckptdb/dtype.h"
#include "ckptdb/metadata.h"
#include "ckptdb/status.h"

namespace ckptdb {

// Identifies one save attempt on every rank.
struct SaveContext {
  int64_t step = 0;
  uint64_t save_id = 0;
  int rank = 0;
  int world_size = 1;
  int coordinator_rank = 0;
  // How long the other ranks wait for this one at the save's next
  // collective (Communicator::timeout; zero when unknown). A writer that
  // waits for something in PrepareStorage or Write (the RocksDB store waits
  // to see the coordinator's staging directory) keeps well within it, so
  // that its verdict reaches the others before they time out.
  std::chrono::milliseconds collective_timeout{0};
};

// A stored piece whose chunks a piece of the new save may share instead of
// writing them again (deduplication across steps): the same entry's piece of
// the same region as committed in step `step` (save attempt `save_id`). A
// chunk is shared when its content hash, raw length and encoding equal the
// candidate's chunk at the same index.
struct ReuseCandidate {
  StorageKey key;  // the new piece (of this save) it is a candidate for
  int64_t step = 0;
  uint64_t save_id = 0;
  StoredPiece piece;  // with its chunk hashes and its own references
};

// A region of entry `fqn` a load reads: the box of the global tensor at
// `offsets` of `sizes` (StorageReader::ReadMetadataFor).
struct EntryRegion {
  std::string fqn;
  std::vector<int64_t> offsets, sizes;
};

// One piece this rank writes: its bytes are read from `data` during Write,
// or, when `source` is set, through it.
struct WriteItem {
  std::string fqn;  // for error messages
  EntryKind kind = EntryKind::kTensor;
  DType dtype = DType::kU8;
  StorageKey key;
  const void* data = nullptr;
  uint64_t nbytes = 0;
  // Set for a CUDA tensor, whose bytes are not in host memory (`data` is
  // then null): a writer calls source(begin, n, use) for each range it
  // needs, and source calls use() with the range's bytes, valid only during
  // that call. May be called from several threads at once, for different
  // ranges. A StorageWriter must handle it (or refuse such items). A host
  // item (`data` set) may have a source too (a wrapper's checks around the
  // bytes): a writer may then read any range through either, and `data`
  // stays readable and unchanged until Write returns whatever the source
  // does (a bucket's upload sends the bytes a source hands over at `data`
  // from there, after the source's call).
  std::function<Status(uint64_t begin, uint64_t n, const std::function<void(const char*)>& use)> source;
  // Chunks that may be shared with a stored piece (FindReusable); null: none.
  // Not owned; valid during Write.
  const ReuseCandidate* reuse = nullptr;
  // The piece's extent along each dimension (its StoredPiece::sizes; {length}
  // for bytes): a writer may cut it into n-d boxes (StoredPiece::chunk_shape).
  // Empty: cut as a run of bytes.
  std::vector<int64_t> sizes{};
};

// What Write did with one item; it completes the item's StoredPiece.
struct WrittenItem {
  StorageKey key;
  uint64_t chunk_bytes = 0;
  uint32_t num_chunks = 0;
  uint64_t stored_bytes = 0;
  std::string chunk_hashes;  // StoredPiece::chunk_hashes; empty when not computed
  std::vector<ChunkReference> references;  // chunks shared, not written
  uint32_t encoding = 0;                   // StoredPiece::encoding
  std::vector<int64_t> chunk_shape{};      // StoredPiece::chunk_shape
};

// What one rank's Write produced. `files` are opaque to the protocol and
// passed to the coordinator's Finish (for the RocksDB store: SST files in the
// store's staging area).
struct WriteResult {
  int rank = 0;
  std::vector<std::string> files;
  std::vector<WrittenItem> items;
};

// How the files of the other ranks' WriteResults reach the coordinator.
enum class FileDelivery : int {
  // Where they were written: the coordinator sees every rank's files (a
  // shared file system).
  kShared = 0,
  // Sent: after every rank's Write succeeded, each rank sends its files to
  // the coordinator over the communicator (checksummed, in bounded blocks),
  // and the coordinator's Finish gets the paths it stored them at.
  kSent = 1,
};

class StorageWriter {
 public:
  virtual ~StorageWriter() = default;

  // How this writer's files reach the coordinator. Every rank's writer must
  // say the same (a save whose ranks disagree fails on every rank, naming
  // them). A writer that wraps another forwards this and the two calls below.
  virtual FileDelivery delivery() const = 0;

  // Coordinator only, before anything else: opens (or creates) the store,
  // refuses a step that is already committed (AlreadyExists), makes the
  // staging area. Returns the save id of this attempt.
  virtual StatusOr<uint64_t> Prepare(int64_t step) = 0;

  // Coordinator only, after Prepare succeeded: for pieces of `planned` (the
  // step's merged plan: every rank's pieces with their keys, before
  // anything is written), stored pieces whose chunks they may share. A store
  // without deduplication returns none; a writer that wraps another
  // forwards it. The candidates are sent to every rank with the save id;
  // each rank's Write gets its own.
  virtual StatusOr<std::vector<ReuseCandidate>> FindReusable(const SaveContext& ctx,
                                                             const StepMetadata& planned) = 0;

  // Every rank, after the coordinator's Prepare succeeded: readies storage for
  // exactly `items` (those the following Write gets).
  virtual Status PrepareStorage(const SaveContext& ctx, const std::vector<WriteItem>& items) = 0;

  // Every rank: writes every item's bytes durably into staging. Nothing is
  // visible to readers yet. The result has exactly one WrittenItem per item,
  // with its key (in any order): a result that leaves an item out, names one
  // twice or names a key not among `items` fails the save as this rank's
  // error.
  virtual StatusOr<WriteResult> Write(const SaveContext& ctx, const std::vector<WriteItem>& items) = 0;

  // Coordinator only, with kSent: where to store file `name` (a plain file
  // name) that `rank` sends for this save; the path must not exist yet.
  virtual StatusOr<std::string> ReceivedFilePath(const SaveContext& ctx, int rank, const std::string& name) = 0;

  // Every rank but the coordinator, with kSent, once its files were sent or
  // the save failed: removes this rank's local copies of the save's files.
  virtual void DiscardLocalFiles(const SaveContext& ctx) = 0;

  // Coordinator only, when every rank's Write succeeded. Makes the step
  // visible atomically (refusing it when a step whose chunks it shares was
  // deleted meanwhile): after an error nothing of the step is visible (and
  // what was already moved into the store is removed again or left for the
  // sweep), after OK all of it is, durably. `results` holds every rank's
  // rank and files; what each rank wrote of its pieces (WriteResult::items)
  // is in `metadata`'s pieces by then, and the items themselves are empty
  // (a coordinator of thousands of ranks does not hold every piece twice
  // while it commits).
  virtual Status Finish(const SaveContext& ctx, const StepMetadata& metadata,
                        const std::vector<WriteResult>& results) = 0;

  // Coordinator only, when the save failed after Prepare: discards staging
  // files and anything stored for ctx.save_id. Best effort: what it cannot
  // remove, the next sweep does.
  virtual void Abort(const SaveContext& ctx) = 0;
};

// A byte range [offset, offset + length) of one stored piece, to be copied
// to `dest` (which holds at least `length` bytes), or handed to `sink`; or,
// for a piece cut into boxes (StoredPiece::chunk_shape set), whose byte
// ranges are not runs of chunks, a region of it handed to `box_sink`.
// Where a box's row-major bytes lie in a target: in runs of run_bytes, run k
// at dest + k * stride (one run, of all of them, when they lie together).
// dest null: they do not lie so.
struct BoxPlace {
  char* dest = nullptr;
  uint64_t run_bytes = 0;
  uint64_t stride = 0;
};

struct ReadItem {
  std::string fqn;  // for error messages
  StoredPiece piece;
  uint64_t offset = 0;
  uint64_t length = 0;
  void* dest = nullptr;
  // When set, called instead of copying to dest, once per chunk, with the
  // verified bytes [begin, begin + n) of the piece (clipped to the range):
  // for scattering a chunk into a strided target without a staging copy, or
  // copying it onto a device. May be called from several threads at once,
  // for different chunks; an error it returns fails the read.
  std::function<Status(uint64_t begin, const char* data, uint64_t n)> sink;
  // Optional, beside a sink that copies bytes as they are: where bytes
  // [begin, begin + n) of the piece lie in the target, contiguous, or null
  // where they do not. A store may then land a chunk there as box_place
  // (below) says, the sink not called for it.
  std::function<char*(uint64_t begin, uint64_t n)> range_place{};
  // The size of the piece's elements. With a sink, every call gets whole
  // elements ([begin, begin + n) element-aligned), even from a piece whose
  // chunks split elements (stores written before format 2): an element cut
  // by a chunk boundary is handed over with the chunk it starts in.
  uint32_t element_bytes = 1;
  // A read of a piece cut into boxes names the region to read instead
  // (offset, length, dest and sink unused): [region_offsets,
  // region_offsets + region_sizes) in the global tensor, within the piece.
  // Every chunk that holds an element of it is fetched once and handed to
  // box_sink with its box (global coordinates), in windows [begin, begin +
  // n) of the box's row-major bytes (whole elements; together, all of
  // them), and box_sink copies what it needs. As with `dest`, a raw chunk's
  // checksum is checked as its windows are handed over: when it fails, the
  // read fails (DataLoss) after box_sink saw the bytes, and the target is
  // not to be used. May be called from several threads at once, for
  // different chunks; an error it returns fails the read. A byte range of
  // such a piece is refused (Internal).
  std::vector<int64_t> region_offsets{}, region_sizes{};
  std::function<Status(const std::vector<int64_t>& box_offsets, const std::vector<int64_t>& box_sizes,
                       uint64_t begin, const char* data, uint64_t n)>
      box_sink{};
  // Optional, beside box_sink: where a chunk's box (global coordinates)
  // lies whole in the target, its row-major bytes as box_sink would copy
  // them there, unconverted (BoxPlace); a null dest where they do not (part
  // of the box, a conversion). A store may then land the chunk: write its
  // raw bytes there straight from storage as they arrive, and check them
  // after (the bucket store does: ReadStats::chunks_landed). A chunk that
  // passes is not handed to box_sink; one that fails is handed over as any
  // other (which writes its place again) or fails the read, its place then
  // holding bytes no check passed. Called from the reader's threads.
  std::function<BoxPlace(const std::vector<int64_t>& box_offsets, const std::vector<int64_t>& box_sizes)> box_place{};
};

// What a read fetched from storage.
struct ReadStats {
  uint64_t chunks_read = 0;
  // Of those, the chunks the store landed: wrote straight into their place
  // as they arrived, then checked, with no copy in between
  // (ReadItem::box_place, range_place or dest; a bucket's raw chunks).
  uint64_t chunks_landed = 0;
  uint64_t stored_bytes_read = 0;  // chunk values as stored
  uint64_t raw_bytes_read = 0;     // after decompression (whole chunks)
};

class StorageReader {
 public:
  virtual ~StorageReader() = default;

  // NotFound naming the step when it is not committed; DataLoss when its
  // metadata is unreadable.
  virtual StatusOr<StepMetadata> ReadMetadata(int64_t step) = 0;

  // What a load of the entries `fqns` needs of step `step`: every entry's
  // name, kind, dtype, shape and bytes encoding, and the pieces of the
  // entries `fqns` names (names the step lacks are ignored). The pieces of
  // the other entries may be left out: such an entry has `pieces_omitted`
  // set and `pieces` empty, and the result is not a whole step's metadata
  // (ValidateStepMetadata refuses it; Read of the named entries' pieces
  // takes it). Errors as ReadMetadata's, and DataLoss naming the entry when
  // a named entry's pieces are unreadable; an entry not named is not read,
  // so its damage is not seen. The default reads the whole metadata
  // (ReadMetadata): readers that keep a step in one record (the bucket
  // store, the remote reader) return every entry's pieces. The RocksDB
  // directory store reads only the named entries' records (store format 6).
  virtual StatusOr<StepMetadata> ReadMetadataOf(int64_t step, const std::vector<std::string>& fqns) {
    (void)fqns;
    return ReadMetadata(step);
  }

  // As ReadMetadataOf(step, fqns), reading of each entry that `regions`
  // names at least the pieces that meet one of its regions (a box of the
  // global tensor: offsets and sizes), which is all a load of those regions
  // needs. Such an entry may come with only some of its pieces:
  // `pieces_partial` is then set. An entry of `fqns` that `regions` does
  // not name comes with all its pieces. The default is ReadMetadataOf. The
  // RocksDB directory store reads, of an entry kept in pages (store format
  // 7: an entry of many pieces, as W ranks save), only the pages whose
  // boxes meet a region, so that a rank's load of its own shards reads a
  // few pages per entry whatever the world size; Load calls this.
  virtual StatusOr<StepMetadata> ReadMetadataFor(int64_t step, const std::vector<std::string>& fqns,
                                                 const std::vector<EntryRegion>& regions) {
    (void)regions;
    return ReadMetadataOf(step, fqns);
  }

  // What a listing of step `step` needs, as cheaply as the store gives it:
  // every entry's name, kind, dtype, shape and bytes encoding, with its
  // pieces where they come at no extra cost and with `pieces_omitted` set
  // (and, where recorded, EntryMetadata::recorded_totals) where they do not.
  // The RocksDB directory store reads only the step's M record: a format-6
  // step's entries all come without pieces, an older step's all with them.
  // Errors as ReadMetadata's; a damaged pieces record is not seen. The
  // default reads the whole metadata.
  virtual StatusOr<StepMetadata> ReadStepSummary(int64_t step) { return ReadMetadata(step); }

  // Reads the pieces of the entries `fqns` names into `metadata` (what
  // ReadStepSummary or ReadMetadataOf returned for its step, with the same
  // save id): each gets its pieces and `pieces_omitted` cleared, so that
  // Read of its pieces takes `metadata`. Entries that have their pieces, and
  // names `metadata` lacks, are left alone. Memory stays bounded when a
  // caller reads one entry at a time and clears its pieces (setting
  // `pieces_omitted`) when done. DataLoss naming the entry when its pieces
  // are unreadable (that entry keeps them omitted; no other is touched);
  // NotFound when the step is gone; FailedPrecondition when it was saved
  // again since `metadata` was read. The default reads them with
  // ReadMetadataOf; the RocksDB directory store reads only their pieces
  // records.
  virtual Status ReadEntryPieces(StepMetadata* metadata, const std::vector<std::string>& fqns) {
    std::vector<std::string> missing;
    for (const std::string& fqn : fqns) {
      const EntryMetadata* e = metadata->Find(fqn);
      if (e != nullptr && e->pieces_omitted) missing.push_back(fqn);
    }
    if (missing.empty()) return Status::OK();
    StatusOr<StepMetadata> read = ReadMetadataOf(metadata->step, missing);
    if (!read.ok()) return read.status();
    if (read->save_id != metadata->save_id) {
      return Status::FailedPrecondition("step " + std::to_string(metadata->step) +
                                        " was saved again since its metadata was read");
    }
    // (Same save: the same entries in the same order.)
    for (size_t i = 0; i < metadata->entries.size() && i < read->entries.size(); ++i) {
      EntryMetadata& e = metadata->entries[i];
      EntryMetadata& r = read->entries[i];
      if (e.pieces_omitted && !r.pieces_omitted && r.fqn == e.fqn) {
        e.pieces = std::move(r.pieces);
        e.pieces_omitted = false;
      }
    }
    return Status::OK();
  }

  // Fetches only the chunks that cover each item's range, verifies each
  // chunk's checksum (DataLoss naming the FQN on mismatch: wrong bytes are
  // never delivered), and copies the range to item.dest. `metadata` is what
  // ReadMetadata returned for the step.
  virtual StatusOr<ReadStats> Read(const StepMetadata& metadata, const std::vector<ReadItem>& items) = 0;
};

}  // namespace ckptdb

#endif  // CKPTDB_STORAGE_H_
