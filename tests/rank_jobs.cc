#include "rank_jobs.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace ckptdb::testing {

using Clock = std::chrono::steady_clock;

std::vector<ProcResult> RunProcs(const std::vector<Proc>& procs, const std::string& rendezvous,
                                 const std::string& job_id, int timeout_ms, const std::string& out_dir,
                                 double limit_s) {
  std::vector<pid_t> pids;
  std::vector<ProcResult> results(procs.size());
  const auto t0 = Clock::now();
  for (size_t i = 0; i < procs.size(); ++i) {
    const std::string report = out_dir + "/proc-" + std::to_string(i) + ".txt";
    std::filesystem::remove(report);
    pid_t pid = fork();
    if (pid == 0) {
      setenv("CKPTDB_RANK", std::to_string(procs[i].rank).c_str(), 1);
      setenv("CKPTDB_WORLD_SIZE", std::to_string(procs[i].world).c_str(), 1);
      setenv("CKPTDB_RENDEZVOUS", rendezvous.c_str(), 1);
      setenv("CKPTDB_JOB_ID", job_id.c_str(), 1);
      setenv("CKPTDB_TIMEOUT_MS", std::to_string(timeout_ms).c_str(), 1);
      setenv("CKPTDB_TEST_REPORT", report.c_str(), 1);
      // On 127.0.0.1, whatever this host's name resolves to (the default
      // bind address).
      setenv("CKPTDB_BIND_ADDRESS", "127.0.0.1", 1);
      for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "CKPTDB_LAUNCH_ID", "TORCHELASTIC_RUN_ID",
                            "TORCHELASTIC_RESTART_COUNT"}) {
        unsetenv(v);
      }
      for (const auto& [k, v] : procs[i].env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(CKPTDB_RANK_HELPER));
      for (const std::string& a : procs[i].args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(CKPTDB_RANK_HELPER, argv.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  size_t running = pids.size();
  bool killed = false;
  while (running > 0) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      auto it = std::find(pids.begin(), pids.end(), pid);
      if (it == pids.end()) continue;
      ProcResult& r = results[it - pids.begin()];
      r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      --running;
      continue;
    }
    if (!killed && std::chrono::duration<double>(Clock::now() - t0).count() > limit_s) {
      ADD_FAILURE() << "processes still running after " << limit_s << " s: killing them";
      for (size_t i = 0; i < pids.size(); ++i) {
        if (results[i].exit_code < 0) kill(pids[i], SIGKILL);
      }
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (size_t i = 0; i < procs.size(); ++i) {
    std::ifstream in(out_dir + "/proc-" + std::to_string(i) + ".txt");
    if (!in) continue;
    ProcResult& r = results[i];
    std::string line;
    std::getline(in, r.code);
    std::getline(in, r.failed);
    std::getline(in, line);
    std::istringstream(line) >> line >> r.collective_s >> r.peers >> r.bytes_received >> r.messages_received;
    std::stringstream rest;
    rest << in.rdbuf();
    r.text = rest.str();
  }
  return results;
}

}  // namespace ckptdb::testing
