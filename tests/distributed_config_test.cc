#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>

#include "ckptdb/ckptdb.h"
#include "comm/bind_address.h"
#include "test_util.h"

namespace ckptdb {
namespace {

class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) unsetenv(v);
  }
  void TearDown() override {
    for (const char* v : kVars) unsetenv(v);
  }
  static constexpr const char* kVars[] = {"CKPTDB_RANK", "RANK", "CKPTDB_WORLD_SIZE", "WORLD_SIZE", "CKPTDB_LOCAL_RANK",
                                          "LOCAL_RANK", "CKPTDB_RENDEZVOUS", "CKPTDB_JOB_ID", "CKPTDB_BIND_ADDRESS",
                                          "CKPTDB_SOCKET_IFNAME", "MASTER_ADDR", "CKPTDB_TIMEOUT_MS", "CKPTDB_LAUNCH_ID", "TORCHELASTIC_RUN_ID",
                                          "TORCHELASTIC_RESTART_COUNT"};
  static std::string Error() {
    auto c = DistributedConfig::FromEnvironment();
    EXPECT_FALSE(c.ok());
    return c.status().message();
  }
};

TEST_F(EnvTest, ReadsEverySetting) {
  setenv("CKPTDB_RANK", "2", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("LOCAL_RANK", "0", 1);
  setenv("CKPTDB_RENDEZVOUS", "redis://127.0.0.1:6379", 1);
  setenv("CKPTDB_JOB_ID", "job7", 1);
  setenv("CKPTDB_BIND_ADDRESS", "10.1.2.3", 1);
  setenv("CKPTDB_TIMEOUT_MS", "1500", 1);
  setenv("CKPTDB_SOCKET_IFNAME", "ib0", 1);
  setenv("MASTER_ADDR", "node-17", 1);
  auto c = DistributedConfig::FromEnvironment();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->socket_ifname, "ib0");
  EXPECT_EQ(c->route_host, "node-17");
  EXPECT_EQ(c->rank, 2);
  EXPECT_EQ(c->world_size, 4);
  EXPECT_EQ(c->local_rank, 0);
  EXPECT_EQ(c->job_id, "job7");
  EXPECT_EQ(c->bind_address, "10.1.2.3");
  EXPECT_EQ(c->timeout.count(), 1500);
}

// The launch id: CKPTDB_LAUNCH_ID, else torchrun's run id with its restart
// count (torchrun keeps the run id when it restarts the workers), else none.
TEST_F(EnvTest, ReadsTheLaunchId) {
  setenv("CKPTDB_RANK", "0", 1);
  setenv("CKPTDB_WORLD_SIZE", "2", 1);
  setenv("CKPTDB_RENDEZVOUS", "file:///tmp/x", 1);
  EXPECT_EQ(DistributedConfig::FromEnvironment()->launch_id, "");
  setenv("TORCHELASTIC_RUN_ID", "r1", 1);
  EXPECT_EQ(DistributedConfig::FromEnvironment()->launch_id, "torchelastic-r1");
  setenv("TORCHELASTIC_RESTART_COUNT", "2", 1);
  EXPECT_EQ(DistributedConfig::FromEnvironment()->launch_id, "torchelastic-r1-restart-2");
  setenv("CKPTDB_LAUNCH_ID", "mine", 1);
  EXPECT_EQ(DistributedConfig::FromEnvironment()->launch_id, "mine");
}

// torchrun without --rdzv-id says "none": that is no identity. Ids with '/'
// (keys are job/launch/...) and timeouts past a week are refused.
TEST_F(EnvTest, RefusesIdsThatCouldShareKeysAndEndlessTimeouts) {
  setenv("CKPTDB_RANK", "0", 1);
  setenv("CKPTDB_WORLD_SIZE", "2", 1);
  setenv("CKPTDB_RENDEZVOUS", "file:///tmp/x", 1);
  setenv("TORCHELASTIC_RUN_ID", "none", 1);
  EXPECT_EQ(DistributedConfig::FromEnvironment()->launch_id, "");
  setenv("CKPTDB_JOB_ID", "a/b", 1);
  auto c = DistributedConfig::FromEnvironment();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("job id 'a/b' contains '/'"), std::string::npos) << c.status();
  setenv("CKPTDB_JOB_ID", "a", 1);
  setenv("CKPTDB_LAUNCH_ID", "b/c", 1);
  c = DistributedConfig::FromEnvironment();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("launch id 'b/c'"), std::string::npos) << c.status();
  unsetenv("CKPTDB_LAUNCH_ID");
  setenv("CKPTDB_TIMEOUT_MS", "10000000000000", 1);
  c = DistributedConfig::FromEnvironment();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("more than a week"), std::string::npos) << c.status();
}

TEST_F(EnvTest, MissingMalformedAndContradictorySettingsAreNamed) {
  EXPECT_NE(Error().find("CKPTDB_RANK (or RANK) is not set"), std::string::npos);
  setenv("RANK", "1", 1);
  EXPECT_NE(Error().find("CKPTDB_WORLD_SIZE (or WORLD_SIZE) is not set"), std::string::npos);
  setenv("WORLD_SIZE", "2", 1);
  EXPECT_NE(Error().find("CKPTDB_RENDEZVOUS is not set"), std::string::npos);
  setenv("CKPTDB_RENDEZVOUS", "tcp://host:1", 1);
  EXPECT_NE(Error().find("must be file:///dir or redis://host:port"), std::string::npos);
  setenv("CKPTDB_RENDEZVOUS", "file:///tmp/x", 1);
  EXPECT_TRUE(DistributedConfig::FromEnvironment().ok());
  setenv("CKPTDB_RANK", "0", 1);
  EXPECT_NE(Error().find("CKPTDB_RANK=0 contradicts RANK=1"), std::string::npos) << Error();
  setenv("CKPTDB_RANK", "1", 1);
  setenv("CKPTDB_WORLD_SIZE", "abc", 1);
  EXPECT_NE(Error().find("CKPTDB_WORLD_SIZE='abc' is not an integer"), std::string::npos);
  setenv("CKPTDB_WORLD_SIZE", "1", 1);
  setenv("WORLD_SIZE", "1", 1);
  EXPECT_NE(Error().find("rank 1 is not in [0, 1)"), std::string::npos) << Error();
  setenv("CKPTDB_WORLD_SIZE", "2", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("CKPTDB_TIMEOUT_MS", "0", 1);
  EXPECT_NE(Error().find("CKPTDB_TIMEOUT_MS must be positive"), std::string::npos);
}

TEST(Distributed, SaveAndLoadRejectAMissingCommunicator) {
  StateDict sd;
  SaveOptions o;
  o.step = 1;
  // No writer is touched: the options are checked first.
  class NoWriter : public StorageWriter {
    StatusOr<uint64_t> Prepare(int64_t) override { return Status::Internal("touched"); }
    StatusOr<std::vector<ReuseCandidate>> FindReusable(const SaveContext&, const StepMetadata&) override {
      return Status::Internal("touched");
    }
    Status PrepareStorage(const SaveContext&, const std::vector<WriteItem>&) override { return Status::Internal("touched"); }
    StatusOr<WriteResult> Write(const SaveContext&, const std::vector<WriteItem>&) override { return Status::Internal("touched"); }
    Status Finish(const SaveContext&, const StepMetadata&, const std::vector<WriteResult>&) override { return Status::Internal("touched"); }
    void Abort(const SaveContext&) override {}
    FileDelivery delivery() const override { return FileDelivery::kShared; }
    StatusOr<std::string> ReceivedFilePath(const SaveContext&, int, const std::string&) override {
      return Status::Internal("touched");
    }
    void DiscardLocalFiles(const SaveContext&) override {}
  } w;
  Status st = Save(sd, w, o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("no communicator given"), std::string::npos) << st;
  auto local = NewLocalCommunicator();
  o.communicator = local.get();
  o.coordinator_rank = 3;
  st = Save(sd, w, o);
  EXPECT_NE(st.message().find("coordinator rank 3 is not in the world of size 1"), std::string::npos) << st;
}

// In a child process that starts with SIGPIPE at `disposition`: connects a
// one-rank job, then writes to a socket whose peer is gone, as gloo does
// when a rank dies. Returns the child's wait status.
int WriteToADeadPeerAfterConnecting(void (*disposition)(int), const std::string& rendezvous) {
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGPIPE, disposition);
    DistributedConfig c;
    c.rank = 0;
    c.world_size = 1;
    c.rendezvous = "file://" + rendezvous;
    c.timeout = std::chrono::milliseconds(5000);
    auto comm = ConnectGloo(c);
    if (!comm.ok()) _exit(2);
    struct sigaction now;
    sigaction(SIGPIPE, nullptr, &now);
    if (disposition != SIG_DFL && now.sa_handler != disposition) _exit(5);  // the application's own: kept
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) _exit(3);
    close(fds[1]);
    const ssize_t n = write(fds[0], "x", 1);
    _exit(n < 0 && errno == EPIPE ? 0 : 4);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

void CountingHandler(int) {}

TEST(Distributed, ADeadPeerIsAnErrorNotASigpipeThatKillsTheSurvivor) {
  testing::TempDir dir;
  // Default action: ConnectGloo makes it ignored, so the write fails with EPIPE.
  int status = WriteToADeadPeerAfterConnecting(SIG_DFL, dir.Sub("a"));
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // A handler of the application's own stays installed (and gets the signal).
  status = WriteToADeadPeerAfterConnecting(CountingHandler, dir.Sub("b"));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// In a child process (a crash must not take the test binary with it): joins
// a one-rank job from the environment with CKPTDB_BIND_ADDRESS=`address`
// (unset when null). Returns the child's wait status; *message gets the
// error (empty when ConnectGloo succeeded).
int ConnectWithBindAddress(const char* address, const std::string& rendezvous, std::string* message) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    setenv("CKPTDB_RANK", "0", 1);
    setenv("CKPTDB_WORLD_SIZE", "1", 1);
    setenv("CKPTDB_RENDEZVOUS", ("file://" + rendezvous).c_str(), 1);
    setenv("CKPTDB_TIMEOUT_MS", "3000", 1);
    if (address != nullptr) setenv("CKPTDB_BIND_ADDRESS", address, 1);
    auto config = DistributedConfig::FromEnvironment();
    Status st = config.status();
    if (st.ok()) st = ConnectGloo(*config).status();
    const std::string m = st.ok() ? "" : st.ToString();
    if (!m.empty() && write(fds[1], m.data(), m.size()) < 0) _exit(3);
    _exit(0);
  }
  close(fds[1]);
  char buf[1024];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) message->append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST(Distributed, ABindAddressThatDoesNotResolveIsAnErrorNamingIt) {
  testing::TempDir dir;
  // A typo: gloo's lookup would crash on it (getaddrinfo's error unchecked).
  std::string m;
  int status = ConnectWithBindAddress("localhostt", dir.Sub("typo"), &m);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_NE(m.find("CKPTDB_BIND_ADDRESS"), std::string::npos) << m;
  EXPECT_NE(m.find("'localhostt'"), std::string::npos) << m;
  EXPECT_NE(m.find("does not resolve"), std::string::npos) << m;
  // InvalidArgument, or Unavailable where the resolver itself is unreachable.
  EXPECT_TRUE(m.rfind("InvalidArgument", 0) == 0 || m.rfind("Unavailable", 0) == 0) << m;
  // An address of no interface of this host (TEST-NET-1): named too.
  m.clear();
  status = ConnectWithBindAddress("192.0.2.1", dir.Sub("foreign"), &m);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_NE(m.find("'192.0.2.1'"), std::string::npos) << m;
  EXPECT_NE(m.find("cannot be bound"), std::string::npos) << m;
  // The default (the host name's address) and "localhost" work.
  m.clear();
  status = ConnectWithBindAddress(nullptr, dir.Sub("default"), &m);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(m, "");
  status = ConnectWithBindAddress("localhost", dir.Sub("localhost"), &m);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(m, "");
}

// The default listen address is one peers on other hosts can reach: never
// a loopback answer of the host name or of a route, and an interface when
// CKPTDB_SOCKET_IFNAME names one (bind_address.h).
TEST(Distributed, TheDefaultListenAddressIsNotLoopbackWhenThisHostHasAnother) {
  // Names that resolve to loopback, to no interface of this host
  // (TEST-NET-1), or not at all: no address of theirs.
  EXPECT_EQ(NonLoopbackAddressOfName("localhost"), "");
  EXPECT_EQ(NonLoopbackAddressOfName("192.0.2.1"), "");
  EXPECT_EQ(NonLoopbackAddressOfName("no-such-host.invalid"), "");
  EXPECT_EQ(NonLoopbackAddressOfName(""), "");
  // A rendezvous host on this host's loopback says nothing of other hosts.
  EXPECT_EQ(AddressRoutingTo("127.0.0.1"), "");
  EXPECT_EQ(AddressRoutingTo("localhost"), "");
  EXPECT_EQ(AddressRoutingTo("no-such-host.invalid"), "");
  // The rendezvous host: the redis server's, else route_host (MASTER_ADDR).
  DistributedConfig c;
  c.rank = 0;
  c.world_size = 1;
  c.rendezvous = "redis://cache.example:6379";
  c.route_host = "master.example";
  EXPECT_EQ(RouteHost(c), "cache.example");
  c.rendezvous = "redis://[fd00::5]:6379";
  EXPECT_EQ(RouteHost(c), "fd00::5");
  testing::TempDir dir;
  c.rendezvous = "file://" + dir.path();
  EXPECT_EQ(RouteHost(c), "master.example");
  // Nothing set: an address that can be bound, loopback only as the last
  // resort (and then said so).
  c.route_host = "";
  StatusOr<ListenAddress> chosen = ChooseListenAddress(c, "");
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_FALSE(chosen->address.empty());
  EXPECT_EQ(chosen->loopback, chosen->address == "127.0.0.1") << chosen->address << ": " << chosen->how;
  if (chosen->loopback) {
    EXPECT_NE(chosen->how.find("no other address"), std::string::npos) << chosen->how;
  }
  // The interface named by CKPTDB_SOCKET_IFNAME.
  c.socket_ifname = "lo";
  chosen = ChooseListenAddress(c, "");
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->address, "127.0.0.1");
  EXPECT_TRUE(chosen->loopback);
  EXPECT_NE(chosen->how.find("CKPTDB_SOCKET_IFNAME"), std::string::npos) << chosen->how;
  c.socket_ifname = "nosuchif9";
  chosen = ChooseListenAddress(c, "");
  ASSERT_FALSE(chosen.ok());
  EXPECT_EQ(chosen.status().code(), StatusCode::kInvalidArgument);
  const std::string m = chosen.status().ToString();
  EXPECT_NE(m.find("CKPTDB_SOCKET_IFNAME='nosuchif9'"), std::string::npos) << m;
  EXPECT_NE(m.find("lo"), std::string::npos) << m;  // the interfaces there
  // CKPTDB_BIND_ADDRESS wins over the interface.
  c.bind_address = "localhost";
  chosen = ChooseListenAddress(c, "");
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->address, "localhost");
  EXPECT_TRUE(chosen->loopback);
  c.bind_address = "";
  c.socket_ifname = "";
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
}

PeerCard Card(const std::string& network, const std::string& host, const std::string& address, bool loopback) {
  PeerCard c;
  c.network = network;
  c.host = host;
  c.address = address;
  c.how = loopback ? "no other address found" : "this host's name " + host;
  c.loopback = loopback;
  c.interfaces = loopback ? "eth0 198.18.0.9" : "eth0 " + address;
  return c;
}

// Every rank checks the same cards: a job on one network may listen on
// loopback; a job across networks may not, and the error names each rank
// on loopback, its host, its address and both settings.
TEST(Distributed, ALoopbackRankInAJobAcrossHostsIsNamedWithTheFix) {
  PeerCard mine = MyPeerCard(ListenAddress{"127.0.0.1", "test", true});
  PeerCard back;
  ASSERT_TRUE(DecodePeerCard(EncodePeerCard(mine), &back));
  EXPECT_EQ(back.network, mine.network);
  EXPECT_EQ(back.host, mine.host);
  EXPECT_EQ(back.address, "127.0.0.1");
  EXPECT_TRUE(back.loopback);
  EXPECT_FALSE(DecodePeerCard("garbage", &back));

  // One host: loopback is fine.
  EXPECT_TRUE(CheckPeersCanReachEachOther({Card("n0", "a", "127.0.0.1", true), Card("n0", "a", "127.0.0.1", true)})
                  .ok());
  // Two hosts, both reachable.
  EXPECT_TRUE(
      CheckPeersCanReachEachOther({Card("n0", "a", "198.18.0.1", false), Card("n1", "b", "198.18.0.2", false)}).ok());
  // Two hosts, ranks 1 and 3 of host b on loopback.
  const std::vector<PeerCard> cards = {Card("n0", "a", "198.18.0.1", false), Card("n1", "b", "127.0.0.1", true),
                                       Card("n0", "a", "198.18.0.1", false), Card("n1", "b", "127.0.0.1", true)};
  Status st = CheckPeersCanReachEachOther(cards);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  const std::string m = st.ToString();
  for (const char* want : {"ranks 1, 3 on host b listen on 127.0.0.1", "no other address found", "eth0 198.18.0.9",
                           "spans 2 hosts", "CKPTDB_SOCKET_IFNAME", "CKPTDB_BIND_ADDRESS"}) {
    EXPECT_NE(m.find(want), std::string::npos) << want << " in " << m;
  }
  // The same answer whichever rank checks (the cards are the same).
  EXPECT_EQ(CheckPeersCanReachEachOther(cards).ToString(), m);
}

}  // namespace
}  // namespace ckptdb
