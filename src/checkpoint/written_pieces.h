// Completing a save's metadata on its coordinator: each piece's storage
// fields (how it was cut into chunks, its stored bytes, chunk hashes and
// references) come from the write report of the rank that wrote it.
//
// A report is folded into the pieces as soon as it is read, so that the
// coordinator of thousands of ranks never holds every rank's report parsed
// beside the step's metadata (a WrittenItem per piece of the step, and an
// index of them all: about 190 bytes a piece).
#ifndef CKPTDB_SRC_CHECKPOINT_WRITTEN_PIECES_H_
#define CKPTDB_SRC_CHECKPOINT_WRITTEN_PIECES_H_

#include <cstdint>
#include <vector>

#include "ckptdb.pb.h"
#include "ckptdb/metadata.h"
#include "ckptdb/status.h"
#include "ckptdb/storage.h"

namespace ckptdb {

// Use: for each rank r in [0, world_size) whose report came, Fill(r, its
// items) once, then Complete(r); a rank whose Fill or Complete fails is
// that rank's write failure. `md` may be committed only when every rank's
// Fill and Complete succeeded: after a failure some pieces hold new storage
// fields and others none.
class WrittenPieces {
 public:
  // Indexes md's pieces by the rank in their keys (16 bytes a piece); every
  // key's rank is in [0, world_size) (MergePlans refuses a plan with a piece
  // of another rank). `md` must outlive this, its pieces neither added nor
  // moved.
  WrittenPieces(StepMetadata* md, int world_size);

  // Fills the pieces rank `rank` reported writing: from its encoded report's
  // items, or (the coordinator's own) from its written items, moved out. An
  // Internal error names what does not fit: an item of another rank, one
  // the rank did not plan, one reported twice (in this report or an earlier
  // Fill of the same rank).
  Status Fill(int rank, const google::protobuf::RepeatedPtrField<proto::WrittenItem>& items);
  Status Fill(int rank, std::vector<WrittenItem>&& items);
  // After Fill(rank, ...): Internal error naming the first piece of `rank`'s
  // plan that its report left out (and its entry).
  Status Complete(int rank) const;

 private:
  struct Slot {
    StoredPiece* piece;
    uint32_t item;
    bool filled;
  };
  // The slot of (rank, item), or an error; marks it filled.
  StatusOr<StoredPiece*> Take(int rank, const StorageKey& key);

  StepMetadata* md_;
  std::vector<std::vector<Slot>> by_rank_;  // each sorted by item
};

}  // namespace ckptdb

#endif  // CKPTDB_SRC_CHECKPOINT_WRITTEN_PIECES_H_
