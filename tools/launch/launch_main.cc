// ckptdb-launch: runs a program as N local ranks of one job.
//
// Sets each rank's environment (CKPTDB_RANK, CKPTDB_WORLD_SIZE,
// CKPTDB_LOCAL_RANK, CKPTDB_RENDEZVOUS, CKPTDB_JOB_ID, a fresh
// CKPTDB_LAUNCH_ID per launch, and the torchrun-style
// RANK, WORLD_SIZE, LOCAL_RANK), prefixes every line a rank prints with
// "[rank R] ", forwards Ctrl-C and SIGTERM to the ranks, and when a rank
// fails gives the others a grace period to report their own errors, then
// stops them. Exit code: 0 when every rank exited 0; otherwise
// the exit code of the first rank that failed (128+signal when killed).
// The ranks die with the launcher: when it ends without stopping them itself
// (killed by SIGKILL, say), the kernel sends each rank SIGKILL
// (PR_SET_PDEATHSIG), so that no rank goes on saving steps unwatched. Only
// the rank processes themselves: a rank that starts processes of its own
// stops them itself.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <vector>

namespace {

const char kHelp[] = R"(usage: ckptdb-launch -n N [options] -- PROGRAM [ARGS...]

Runs PROGRAM as N ranks of one job on this host, each with its environment
set for ckptdb::DistributedConfig::FromEnvironment():
  CKPTDB_RANK, CKPTDB_WORLD_SIZE, CKPTDB_LOCAL_RANK (and RANK, WORLD_SIZE,
  LOCAL_RANK), CKPTDB_RENDEZVOUS, CKPTDB_JOB_ID, and CKPTDB_LAUNCH_ID (new
  for every launch: a rendezvous and job id used before can be used again),
  and CKPTDB_BIND_ADDRESS=127.0.0.1 unless it is set (every rank is here).
Every output line is prefixed with "[rank R] ".

options:
  -n, --nproc N          number of ranks (required, 1..1024)
  --rendezvous URI       file:///dir or redis://host:port (default: a fresh
                         temporary directory, removed at the end)
  --job-id ID            rendezvous key prefix (default: random per run)
  --timeout-ms MS        CKPTDB_TIMEOUT_MS for the ranks (default: unset, so
                         the library default of 60000)
  --grace-ms MS          after a rank fails, how long the others get to
                         finish on their own (reporting their errors)
                         before SIGTERM, and 3 s later SIGKILL (default 10000)
  -h, --help             this text

Ctrl-C (SIGINT) and SIGTERM are forwarded to every rank. When the launcher
dies without stopping the ranks (SIGKILL), every rank is killed (SIGKILL).

exit codes: 0 every rank succeeded; otherwise the exit code of the first
rank that failed (128+N when it was killed by signal N); 2 usage error.
)";

volatile sig_atomic_t g_signal = 0;
void OnSignal(int sig) { g_signal = sig; }

struct Rank {
  pid_t pid = -1;
  int out_fd = -1;  // stdout and stderr of the rank, merged
  std::string partial;
  bool exited = false;
  int code = 0;
};

int Usage(const std::string& msg) {
  std::cerr << "ckptdb-launch: " << msg << "\n\n" << kHelp;
  return 2;
}

void Emit(int rank, const std::string& line) {
  std::string s = "[rank " + std::to_string(rank) + "] " + line + "\n";
  fwrite(s.data(), 1, s.size(), stdout);
  fflush(stdout);
}

void Drain(int r, Rank& k, bool all) {
  char buf[65536];
  while (true) {
    ssize_t n = read(k.out_fd, buf, sizeof buf);
    if (n <= 0) break;
    k.partial.append(buf, static_cast<size_t>(n));
    size_t pos;
    while ((pos = k.partial.find('\n')) != std::string::npos) {
      Emit(r, k.partial.substr(0, pos));
      k.partial.erase(0, pos + 1);
    }
    if (!all) break;
  }
}

std::string RandomId(const char* kind) {
  std::random_device rd;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s-%08x%08x", kind, rd(), rd());
  return buf;
}

}  // namespace

// When starting the ranks failed part-way: kills and reaps the ranks
// started so far, removes the launcher's own rendezvous directory, and
// returns the launcher's exit code.
int StopStarted(std::vector<Rank>& ranks, int started, const std::string& temp_dir) {
  for (int r = 0; r < started; ++r) kill(ranks[r].pid, SIGKILL);
  for (int r = 0; r < started; ++r) {
    waitpid(ranks[r].pid, nullptr, 0);
    if (ranks[r].out_fd >= 0) close(ranks[r].out_fd);
  }
  std::error_code ec;
  if (!temp_dir.empty()) std::filesystem::remove_all(temp_dir, ec);
  return 1;
}

int main(int argc, char** argv) {
  int n = 0;
  std::string rendezvous, job_id = RandomId("job"), timeout_ms;
  const std::string launch_id = RandomId("launch");
  long grace_ms = 10000;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    auto need = [&](const char* what) -> const char* {
      if (i + 1 >= argc) return nullptr;
      (void)what;
      return argv[++i];
    };
    if (a == "--") {
      ++i;
      break;
    } else if (a == "-h" || a == "--help") {
      std::cout << kHelp;
      return 0;
    } else if (a == "-n" || a == "--nproc") {
      const char* v = need("-n");
      if (!v) return Usage("-n needs a number");
      n = std::atoi(v);
    } else if (a == "--rendezvous") {
      const char* v = need("--rendezvous");
      if (!v) return Usage("--rendezvous needs a URI");
      rendezvous = v;
    } else if (a == "--job-id") {
      const char* v = need("--job-id");
      if (!v) return Usage("--job-id needs a value");
      job_id = v;
    } else if (a == "--timeout-ms") {
      const char* v = need("--timeout-ms");
      if (!v) return Usage("--timeout-ms needs a number");
      timeout_ms = v;
    } else if (a == "--grace-ms") {
      const char* v = need("--grace-ms");
      if (!v) return Usage("--grace-ms needs a number");
      grace_ms = std::atol(v);
    } else {
      return Usage("unknown option '" + a + "' (the program goes after --)");
    }
  }
  if (n < 1 || n > 1024) return Usage("-n N is required, with 1 <= N <= 1024");
  if (i >= argc) return Usage("no program given after --");
  if (!rendezvous.empty() && rendezvous.rfind("file://", 0) != 0 && rendezvous.rfind("redis://", 0) != 0) {
    return Usage("--rendezvous must be file:///dir or redis://host:port");
  }

  std::string temp_dir;
  if (rendezvous.empty()) {
    char tmpl[] = "/tmp/ckptdb-launch-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::perror("ckptdb-launch: mkdtemp");
      return 1;
    }
    temp_dir = tmpl;
    rendezvous = "file://" + temp_dir;
  }

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const pid_t launcher = getpid();
  std::vector<Rank> ranks(n);
  for (int r = 0; r < n; ++r) {
    int fds[2];
    // Close-on-exec: a rank inherits no other rank's pipe (dup2 below
    // clears the flag on its own stdout and stderr).
    if (pipe2(fds, O_CLOEXEC) != 0) {
      std::perror("ckptdb-launch: pipe");
      return StopStarted(ranks, r, temp_dir);
    }
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("ckptdb-launch: fork");
      close(fds[0]);
      close(fds[1]);
      return StopStarted(ranks, r, temp_dir);
    }
    if (pid == 0) {
      // The rank dies with the launcher, whatever ends it. The launcher may
      // have died before prctl took effect: then this process was already
      // reparented, and there is no one to run for.
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
        std::fprintf(stderr, "ckptdb-launch: prctl(PR_SET_PDEATHSIG): %s\n", std::strerror(errno));
        _exit(127);
      }
      if (getppid() != launcher) _exit(127);
      // The launcher ignores SIGPIPE for itself; ranks start with the default.
      signal(SIGPIPE, SIG_DFL);
      // Ranks get their own process group so that a terminal's Ctrl-C reaches
      // them only through the launcher, exactly once.
      setpgid(0, 0);
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      close(fds[0]);
      close(fds[1]);
      std::string rs = std::to_string(r), ws = std::to_string(n);
      setenv("CKPTDB_RANK", rs.c_str(), 1);
      setenv("CKPTDB_WORLD_SIZE", ws.c_str(), 1);
      setenv("CKPTDB_LOCAL_RANK", rs.c_str(), 1);
      setenv("RANK", rs.c_str(), 1);
      setenv("WORLD_SIZE", ws.c_str(), 1);
      setenv("LOCAL_RANK", rs.c_str(), 1);
      setenv("CKPTDB_RENDEZVOUS", rendezvous.c_str(), 1);
      setenv("CKPTDB_JOB_ID", job_id.c_str(), 1);
      setenv("CKPTDB_LAUNCH_ID", launch_id.c_str(), 1);
      if (!timeout_ms.empty()) setenv("CKPTDB_TIMEOUT_MS", timeout_ms.c_str(), 1);
      // Every rank is on this host: they listen on loopback unless told
      // otherwise (the library's default is the host name's address).
      setenv("CKPTDB_BIND_ADDRESS", "127.0.0.1", 0);
      execvp(argv[i], argv + i);
      std::fprintf(stderr, "ckptdb-launch: cannot run '%s': %s\n", argv[i], std::strerror(errno));
      _exit(127);
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    ranks[r].pid = pid;
    ranks[r].out_fd = fds[0];
  }

  using Clock = std::chrono::steady_clock;
  int first_failure = -1;
  int result = 0;
  bool stopping = false;
  const Clock::time_point never = Clock::now() + std::chrono::hours(24 * 365);
  Clock::time_point term_at = never, kill_at = never;
  int forwarded = 0;
  int running = n;
  while (running > 0) {
    if (g_signal != 0 && g_signal != forwarded) {
      forwarded = g_signal;
      for (Rank& k : ranks) {
        if (!k.exited) kill(k.pid, g_signal);
      }
      if (!stopping) {
        stopping = true;
        kill_at = Clock::now() + std::chrono::milliseconds(grace_ms);
        if (result == 0) result = 128 + g_signal;
      }
    }
    std::vector<pollfd> pfds;
    std::vector<int> which;
    for (int r = 0; r < n; ++r) {
      if (ranks[r].out_fd >= 0) {
        pfds.push_back(pollfd{ranks[r].out_fd, POLLIN, 0});
        which.push_back(r);
      }
    }
    if (!pfds.empty()) poll(pfds.data(), pfds.size(), 50);
    else usleep(50 * 1000);
    for (size_t j = 0; j < pfds.size(); ++j) {
      if (pfds[j].revents & (POLLIN | POLLHUP | POLLERR)) Drain(which[j], ranks[which[j]], false);
    }
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (int r = 0; r < n; ++r) {
        Rank& k = ranks[r];
        if (k.pid != pid) continue;
        Drain(r, k, true);
        if (!k.partial.empty()) Emit(r, k.partial);
        close(k.out_fd);
        k.out_fd = -1;
        k.exited = true;
        --running;
        k.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (k.code != 0 && first_failure < 0) {
          first_failure = r;
          if (result == 0) result = k.code;
          std::fprintf(stderr, "ckptdb-launch: rank %d %s %d; the other ranks get %ld ms to finish\n", r,
                       WIFEXITED(status) ? "exited with code" : "was killed by signal",
                       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), grace_ms);
          if (!stopping) {
            stopping = true;
            term_at = Clock::now() + std::chrono::milliseconds(grace_ms);
          }
        }
      }
    }
    if (Clock::now() >= term_at) {
      for (Rank& k : ranks) {
        if (!k.exited) kill(k.pid, SIGTERM);
      }
      term_at = never;
      kill_at = Clock::now() + std::chrono::seconds(3);
    }
    if (Clock::now() >= kill_at) {
      for (Rank& k : ranks) {
        if (!k.exited) kill(k.pid, SIGKILL);
      }
      kill_at = never;
    }
  }
  if (!temp_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(temp_dir, ec);
  }
  return result;
}
