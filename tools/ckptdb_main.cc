// `ckptdb`: list and inspect the steps of a store. Parses arguments, calls
// the command functions (cli_commands.h) and maps their Status to the exit
// code: 0 success, 1 failure, 2 usage.
#include <cctype>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "ckptdb/rocksdb_store.h"
#include "cli_commands.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

const char kMainHelp[] = R"(usage: ckptdb COMMAND [ARGS...] [--help]

Lists and inspects the checkpoint steps in a ckptdb store. Every command
opens the store read-only and never blocks a job that is saving to it.

commands:
  ls STORE [--json]             one row per committed step
  ls STORE STEP [--json]        one row per entry of a step
  cat STORE STEP FQN            the values of one entry

STEP is a step number or 'latest'. 'ckptdb COMMAND --help' says more.

exit codes: 0 success, 1 failure (missing store, step or entry, corrupt
data), 2 usage error.
)";

const char kLsHelp[] = R"(usage: ckptdb ls STORE [STEP] [--json]

Without STEP: one row per committed step, oldest first:
  STEP  CREATED (UTC)  WORLD (ranks that saved it)  ENTRIES  BYTES  STORED
With STEP (a number or 'latest'): one row per entry of that step:
  FQN  KIND (tensor, sharded_tensor, bytes)  DTYPE  SHAPE  SHARDS  BYTES

BYTES are the logical bytes of the tensors; STORED what they take in the
store after ckptdb's compression (chunk headers included).

options:
  --json   print a JSON array with one object per row instead; step rows
           have "step", "created", "created_unix_ms", "world_size",
           "entries", "bytes" and "stored_bytes"; entry rows have "fqn",
           "kind", "dtype", "shape", "shards", "bytes", "stored_bytes".
  --help   this text

exit codes: 0 success, 1 failure, 2 usage error.
)";

const char kCatHelp[] = R"(usage: ckptdb cat STORE STEP FQN

Prints the values of one entry of a step (STEP: a number or 'latest').
Tensors print like numpy arrays, summarised with '...' beyond 1000
elements; sharded tensors are assembled whole; bytes entries print as
text, other bytes escaped as \xNN. Every chunk read is verified against
its checksum: corrupt data is an error, never printed.

exit codes: 0 success, 1 failure, 2 usage error.
)";

int Usage(const std::string& message, const char* help) {
  std::cerr << "ckptdb: " << message << "\n\n" << help;
  return kExitUsage;
}

int Fail(const ckptdb::Status& st) {
  std::cerr << "ckptdb: " << st.ToString() << "\n";
  return kExitFailure;
}

struct Args {
  std::vector<std::string> positional;
  bool json = false;
  bool help = false;
  std::string unknown;
};

Args ParseArgs(int argc, char** argv, int first) {
  Args a;
  bool only_positional = false;
  for (int i = first; i < argc; ++i) {
    std::string s = argv[i];
    if (!only_positional && s == "--") {
      only_positional = true;
    } else if (!only_positional && (s == "--help" || s == "-h")) {
      a.help = true;
    } else if (!only_positional && s == "--json") {
      a.json = true;
    } else if (!only_positional && s.size() > 1 && s[0] == '-' && !std::isdigit(static_cast<unsigned char>(s[1]))) {
      if (a.unknown.empty()) a.unknown = s;
    } else {
      a.positional.push_back(s);
    }
  }
  return a;
}

int RunLs(const Args& a) {
  if (a.help) return std::cout << kLsHelp, kExitOk;
  if (!a.unknown.empty()) return Usage("ls: unknown option " + a.unknown, kLsHelp);
  if (a.positional.empty() || a.positional.size() > 2) return Usage("ls: expected STORE [STEP]", kLsHelp);
  auto reader = ckptdb::OpenStoreReader(a.positional[0]);
  if (!reader.ok()) return Fail(reader.status());
  ckptdb::Status st;
  if (a.positional.size() == 1) {
    st = ckptdb::cli::ListSteps(**reader, a.json, std::cout);
  } else {
    auto step = ckptdb::cli::ResolveStep(**reader, a.positional[1]);
    if (!step.ok()) return Fail(step.status());
    st = ckptdb::cli::ListEntries(**reader, *step, a.json, std::cout);
  }
  return st.ok() ? kExitOk : Fail(st);
}

int RunCat(const Args& a) {
  if (a.help) return std::cout << kCatHelp, kExitOk;
  if (!a.unknown.empty()) return Usage("cat: unknown option " + a.unknown, kCatHelp);
  if (a.json) return Usage("cat: --json is not supported by cat", kCatHelp);
  if (a.positional.size() != 3) return Usage("cat: expected STORE STEP FQN", kCatHelp);
  auto reader = ckptdb::OpenStoreReader(a.positional[0]);
  if (!reader.ok()) return Fail(reader.status());
  auto step = ckptdb::cli::ResolveStep(**reader, a.positional[1]);
  if (!step.ok()) return Fail(step.status());
  ckptdb::Status st = ckptdb::cli::CatEntry(**reader, *step, a.positional[2], std::cout);
  return st.ok() ? kExitOk : Fail(st);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage("missing command", kMainHelp);
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") return std::cout << kMainHelp, kExitOk;
  Args args = ParseArgs(argc, argv, 2);
  if (cmd == "ls") return RunLs(args);
  if (cmd == "cat") return RunCat(args);
  return Usage("unknown command '" + cmd + "'", kMainHelp);
}
