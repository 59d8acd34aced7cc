// The `ckptdb` subcommands as functions: each does its work and writes to
// `out`, returning a Status; main only parses arguments and maps the Status
// to an exit code.
#ifndef CKPTDB_TOOLS_CLI_COMMANDS_H_
#define CKPTDB_TOOLS_CLI_COMMANDS_H_

#include <ostream>
#include <string>

#include "ckptdb/rocksdb_store.h"
#include "ckptdb/status.h"

namespace ckptdb::cli {

// A step argument: a number, or "latest".
StatusOr<int64_t> ResolveStep(StoreReader& reader, const std::string& arg);

// One row per committed step.
Status ListSteps(StoreReader& reader, bool json, std::ostream& out);
// One row per entry of a step.
Status ListEntries(StoreReader& reader, int64_t step, bool json, std::ostream& out);
// The values of one entry.
Status CatEntry(StoreReader& reader, int64_t step, const std::string& fqn, std::ostream& out);

}  // namespace ckptdb::cli

#endif  // CKPTDB_TOOLS_CLI_COMMANDS_H_
