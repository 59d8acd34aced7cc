// Multi-process jobs of ckptdb_rank_helper for the tests: real processes
// over TCP on 127.0.0.1, each with its own rank, world size, arguments and
// environment, bounded in time.
#ifndef CKPTDB_TESTS_RANK_JOBS_H_
#define CKPTDB_TESTS_RANK_JOBS_H_

#include <map>
#include <string>
#include <vector>

namespace ckptdb::testing {

// One process of ckptdb_rank_helper: its rank, the world size it is told,
// its arguments and environment (on top of the job's).
struct Proc {
  int rank;
  int world;
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
};

struct ProcResult {
  int exit_code = -1;
  double seconds = 0;  // from the start of the job to this process's exit
  std::string code;    // status code name ("" when it wrote no report)
  std::string failed;  // failed ranks of a checkpoint error
  double collective_s = 0;  // seconds it spent in collectives
  int peers = -1;           // ranks it held a connection to at the end
  uint64_t bytes_received = 0, messages_received = 0;  // control traffic that reached it
  std::string text;    // Status::ToString()
};

// Starts every process at once, waits for all (killing all of them after
// `limit_s`, so a hang fails the test instead of stalling it), and reads
// their reports.
std::vector<ProcResult> RunProcs(const std::vector<Proc>& procs, const std::string& rendezvous,
                                 const std::string& job_id, int timeout_ms, const std::string& out_dir,
                                 double limit_s = 30);

}  // namespace ckptdb::testing

#endif  // CKPTDB_TESTS_RANK_JOBS_H_
