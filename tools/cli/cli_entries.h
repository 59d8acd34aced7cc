// A step's entries one at a time: the commands that go over a whole step
// (ls STEP, verify, diff, export, info) read the step's summary first
// (StorageReader::ReadStepSummary: every entry's name, kind, dtype and
// shape) and then each entry's pieces only while they look at that entry,
// so that they hold one entry's pieces at a time however many entries and
// ranks the step has (a store format 6 step; an older step is read whole
// once, as before).
#ifndef CKPTDB_TOOLS_CLI_ENTRIES_H_
#define CKPTDB_TOOLS_CLI_ENTRIES_H_

#include <cstddef>
#include <functional>

#include "ckptdb/metadata.h"
#include "ckptdb/status.h"
#include "ckptdb/storage.h"

namespace ckptdb::cli {

// Calls fn with entry `index` of `md` (what ReadStepSummary returned)
// holding its pieces: read first when they were omitted (ReadEntryPieces)
// and dropped again after fn returns, so that `md` is as it was. Returns the
// read's error (DataLoss naming the entry) without calling fn, or fn's.
// REQUIRES: index < md->entries.size().
Status WithPieces(StorageReader& reader, StepMetadata* md, size_t index,
                  const std::function<Status(const EntryMetadata& e)>& fn);

// The PieceTotals of entry `index` of `md`: as the step's record states
// them when it does (nothing is read), else from its pieces (read and
// dropped again, as by WithPieces).
StatusOr<PieceTotals> EntryTotals(StorageReader& reader, StepMetadata* md, size_t index);

}  // namespace ckptdb::cli

#endif  // CKPTDB_TOOLS_CLI_ENTRIES_H_
