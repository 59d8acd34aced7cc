// Shared output helpers of the `ckptdb` commands: tables, times, JSON bits.
#ifndef CKPTDB_TOOLS_CLI_OUTPUT_H_
#define CKPTDB_TOOLS_CLI_OUTPUT_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "ckptdb/tensor.h"

namespace ckptdb::cli {

// "2026-11-30T16:08:51Z"
std::string IsoTime(int64_t unix_ms);
// "[2,3]"
std::string JsonShape(const Shape& s);
// "[1, 2, 3]" (JSON) from numbers.
std::string JsonIntList(const std::vector<int64_t>& v);
// "1, 2, 5..9, 12" for people: runs of three or more consecutive steps as
// "a..b", and the middle of very long lists elided ("(N more)").
std::string JoinSteps(const std::vector<int64_t>& v);
// Rows as left-aligned columns two spaces apart; no trailing spaces.
void PrintTable(const std::vector<std::vector<std::string>>& rows, std::ostream& out);

}  // namespace ckptdb::cli

#endif  // CKPTDB_TOOLS_CLI_OUTPUT_H_
