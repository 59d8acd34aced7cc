// Command-line parsing for `ckptdb`: each command declares its flags and
// valued options; anything else starting with '-' is a usage error.
#ifndef CKPTDB_TOOLS_CLI_ARGS_H_
#define CKPTDB_TOOLS_CLI_ARGS_H_

#include <map>
#include <set>
#include <string>
#include <vector>

namespace ckptdb::cli {

struct ArgSpec {
  std::set<std::string> flags;   // e.g. "--json"
  std::set<std::string> values;  // options taking a value: "--slice X" or "--slice=X"
};

struct Args {
  std::vector<std::string> positional;
  std::set<std::string> flags;
  std::map<std::string, std::string> values;
  bool help = false;
  std::string error;  // the first usage problem, empty when none

  bool Has(const std::string& flag) const { return flags.count(flag) != 0; }
  // The value of option `name`, or nullptr when not given.
  const std::string* Value(const std::string& name) const;
};

// Parses argv[first, argc). "--" ends the options; "-h"/"--help" is always
// accepted. A '-' followed by a digit is a positional (a negative step is
// reported as out of range, not as an unknown option).
Args ParseArgs(int argc, char** argv, int first, const ArgSpec& spec);

}  // namespace ckptdb::cli

#endif  // CKPTDB_TOOLS_CLI_ARGS_H_
