#include "cli_entries.h"

#include <utility>
#include <vector>

namespace ckptdb::cli {

Status WithPieces(StorageReader& reader, StepMetadata* md, size_t index,
                  const std::function<Status(const EntryMetadata& e)>& fn) {
  EntryMetadata& e = md->entries[index];
  if (!e.pieces_omitted) return fn(e);
  if (Status st = reader.ReadEntryPieces(md, {e.fqn}); !st.ok()) return st;
  if (e.pieces_omitted) {  // (a reader that did not fill them)
    return Status::Internal("the pieces of entry '" + e.fqn + "' of step " + std::to_string(md->step) +
                            " were not read");
  }
  Status st = fn(e);
  std::vector<StoredPiece>().swap(e.pieces);
  e.pieces_omitted = true;
  return st;
}

StatusOr<PieceTotals> EntryTotals(StorageReader& reader, StepMetadata* md, size_t index) {
  if (std::optional<PieceTotals> totals = md->entries[index].totals()) return *totals;
  PieceTotals out;
  Status st = WithPieces(reader, md, index, [&](const EntryMetadata& e) {
    out = *e.totals();
    return Status::OK();
  });
  if (!st.ok()) return st;
  return out;
}

}  // namespace ckptdb::cli
