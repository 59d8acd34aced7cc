// The gloo-over-TCP Communicator. Only small control messages travel here.
// Variable-size messages go as a fixed-size length exchange followed by the
// payload; every call is bounded by the configured timeout, and gloo's
// exceptions become Status at this edge.
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/redis_store.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "ckptdb/distributed.h"
#include "status_macros.h"

namespace ckptdb {

namespace {

using Clock = std::chrono::steady_clock;

Status FromException(const std::exception& e, const std::string& what) {
  std::string m = what + ": " + e.what();
  if (m.find("imed out") != std::string::npos || m.find("imeout") != std::string::npos) {
    return Status::DeadlineExceeded(m);
  }
  return Status::Unavailable(m);
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::unique_ptr<gloo::rendezvous::Store> base, std::unique_ptr<gloo::rendezvous::Store> store,
                   std::shared_ptr<gloo::transport::Device> device, std::shared_ptr<gloo::rendezvous::Context> ctx,
                   std::chrono::milliseconds timeout)
      : base_(std::move(base)), store_(std::move(store)), device_(std::move(device)), ctx_(std::move(ctx)),
        timeout_(timeout) {}

  int rank() const override { return ctx_->rank; }
  int world_size() const override { return ctx_->size; }
  CollectiveStats stats() const override { return stats_; }

  Status Broadcast(std::string* data, int root) override {
    if (root < 0 || root >= ctx_->size) return Status::InvalidArgument("broadcast root " + std::to_string(root));
    return Timed("broadcast", data->size(), [&] {
      uint64_t n = data->size();
      {
        gloo::BroadcastOptions o(ctx_);
        o.setOutput(&n, 1);
        o.setRoot(root);
        o.setTag(NextTag());
        o.setTimeout(timeout_);
        gloo::broadcast(o);
      }
      // One pad byte: gloo buffers are never empty.
      std::string buf = ctx_->rank == root ? *data + '\0' : std::string(n + 1, '\0');
      gloo::BroadcastOptions o(ctx_);
      o.setOutput(buf.data(), buf.size());
      o.setRoot(root);
      o.setTag(NextTag());
      o.setTimeout(timeout_);
      gloo::broadcast(o);
      buf.pop_back();
      *data = std::move(buf);
    });
  }

  Status AllGather(const std::string& mine, std::vector<std::string>* out) override {
    return Timed("all-gather", mine.size(), [&] { AllGatherImpl(mine, out); });
  }

  Status Gather(const std::string& mine, int root, std::vector<std::string>* out) override {
    if (root < 0 || root >= ctx_->size) return Status::InvalidArgument("gather root " + std::to_string(root));
    // Control messages are small: an all-gather costs little more than a
    // gather, and every rank learns of a dead peer alike.
    return Timed("gather", mine.size(), [&] {
      AllGatherImpl(mine, out);
      if (ctx_->rank != root) out->clear();
    });
  }

  Status Barrier() override {
    return Timed("barrier", 0, [&] {
      gloo::BarrierOptions o(ctx_);
      o.setTag(NextTag());
      o.setTimeout(timeout_);
      gloo::barrier(o);
    });
  }

 private:
  void AllGatherImpl(const std::string& mine, std::vector<std::string>* out) {
    const int n = ctx_->size;
    std::vector<uint64_t> sizes(n);
    uint64_t my = mine.size() + 1;
    {
      gloo::AllgatherOptions o(ctx_);
      o.setInput(&my, 1);
      o.setOutput(sizes.data(), sizes.size());
      o.setTag(NextTag());
      o.setTimeout(timeout_);
      gloo::allgather(o);
    }
    std::string in = mine + '\0';
    uint64_t total = 0;
    std::vector<size_t> counts(n);
    for (int r = 0; r < n; ++r) total += counts[r] = sizes[r];
    std::string all(total, '\0');
    gloo::AllgathervOptions o(ctx_);
    o.setInput(in.data(), in.size());
    o.setOutput(all.data(), counts);
    o.setTag(NextTag());
    o.setTimeout(timeout_);
    gloo::allgatherv(o);
    out->assign(n, std::string());
    uint64_t off = 0;
    for (int r = 0; r < n; ++r) {
      (*out)[r] = all.substr(off, counts[r] - 1);
      off += counts[r];
    }
  }

  template <typename F>
  Status Timed(const char* what, size_t bytes, F&& f) {
    if (!failed_.ok()) return failed_.WithContext(std::string(what) + ": the communicator failed earlier");
    auto t0 = Clock::now();
    Status st;
    try {
      f();
    } catch (const std::exception& e) {
      st = FromException(e, std::string(what) + " on rank " + std::to_string(ctx_->rank));
      failed_ = st;  // gloo pairs are unusable after an error
    }
    stats_.calls++;
    stats_.bytes_sent += bytes;
    stats_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    return st;
  }

  uint32_t NextTag() { return tag_++ & 0x7fffffff; }

  std::unique_ptr<gloo::rendezvous::Store> base_;
  std::unique_ptr<gloo::rendezvous::Store> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  std::chrono::milliseconds timeout_;
  uint32_t tag_ = 1;
  Status failed_;
  CollectiveStats stats_;
};

StatusOr<std::unique_ptr<gloo::rendezvous::Store>> OpenStore(const std::string& uri) {
  try {
    if (uri.rfind("file://", 0) == 0) {
      std::string dir = uri.substr(7);
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) return Status::IOError("cannot create rendezvous directory '" + dir + "': " + ec.message());
      return std::unique_ptr<gloo::rendezvous::Store>(new gloo::rendezvous::FileStore(dir));
    }
    std::string hp = uri.substr(8);
    size_t colon = hp.rfind(':');
    std::string host = colon == std::string::npos ? hp : hp.substr(0, colon);
    int port = 6379;
    if (colon != std::string::npos) {
      char* end = nullptr;
      long p = std::strtol(hp.c_str() + colon + 1, &end, 10);
      if (*end != '\0' || p <= 0 || p > 65535) return Status::InvalidArgument("bad port in rendezvous '" + uri + "'");
      port = static_cast<int>(p);
    }
    return std::unique_ptr<gloo::rendezvous::Store>(new gloo::rendezvous::RedisStore(host, port));
  } catch (const std::exception& e) {
    return Status::Unavailable("cannot reach rendezvous '" + uri + "': " + e.what());
  }
}

// Every rank announces itself and waits for all others, so that a rank that
// never comes is reported by rank number instead of as a connect error.
Status AwaitArrivals(gloo::rendezvous::Store& store, const DistributedConfig& c) {
  try {
    store.set("arrived/" + std::to_string(c.rank), std::vector<char>{'1'});
  } catch (const std::exception& e) {
    return Status::Unavailable(std::string("rendezvous: announcing rank: ") + e.what());
  }
  const auto deadline = Clock::now() + c.timeout;
  std::vector<std::string> missing;
  while (true) {
    missing.clear();
    for (int r = 0; r < c.world_size; ++r) {
      std::string key = "arrived/" + std::to_string(r);
      try {
        store.wait({key}, std::chrono::milliseconds(1));
      } catch (const std::exception&) {
        missing.push_back(std::to_string(r));
      }
    }
    if (missing.empty()) return Status::OK();
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::string list;
  for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
  return Status::DeadlineExceeded("rendezvous timed out after " + std::to_string(c.timeout.count()) +
                                  " ms: rank(s) " + list + " of " + std::to_string(c.world_size) +
                                  " never arrived (job '" + c.job_id + "', " + c.rendezvous + ")");
}

// Checks config.bind_address the way gloo's tcp::CreateDevice will use it
// (getaddrinfo, then bind to the first address that can be bound), because
// gloo does not check getaddrinfo's error and crashes on a name that does
// not resolve. Runs before the rendezvous, so that a typo fails at once.
Status CheckBindAddress(const std::string& host) {
  const std::string what = "bind address '" + host + "' (CKPTDB_BIND_ADDRESS, DistributedConfig::bind_address)";
  addrinfo hints;
  std::memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rv = getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rv != 0) {
    std::string why = rv == EAI_SYSTEM ? std::strerror(errno) : gai_strerror(rv);
    std::string m = what + " does not resolve: " + why;
    return rv == EAI_AGAIN ? Status::Unavailable(m) : Status::InvalidArgument(m);
  }
  std::string last_error = "no address";
  bool bound = false;
  for (addrinfo* a = result; a != nullptr && !bound; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    // Port 0 (getaddrinfo was given no service): any free port, released again.
    bound = bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    if (!bound) last_error = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(result);
  if (!bound) {
    return Status::InvalidArgument(what + " resolves, but cannot be bound on this host (" + last_error +
                                   "): set it to an address of one of this host's interfaces");
  }
  return Status::OK();
}

// gloo writes to its sockets with writev: once a peer has died, a write to
// it raises SIGPIPE, whose default action kills this (surviving) rank
// before the write's error can become a Status. So a process that left
// SIGPIPE at its default ignores it from here on; one that installed its
// own handler or ignores it already is left alone.
void IgnoreSigpipeUnlessHandled() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current;
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  });
}

}  // namespace

StatusOr<std::unique_ptr<Communicator>> ConnectGloo(const DistributedConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  RETURN_IF_ERROR(CheckBindAddress(config.bind_address));
  IgnoreSigpipeUnlessHandled();
  ASSIGN_OR_RETURN(std::unique_ptr<gloo::rendezvous::Store> base, OpenStore(config.rendezvous));
  auto store = std::make_unique<gloo::rendezvous::PrefixStore>(config.job_id, *base);
  RETURN_IF_ERROR(AwaitArrivals(*store, config));
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = config.bind_address;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(config.rank, config.world_size);
    ctx->setTimeout(config.timeout);
    ctx->connectFullMesh(*store, device);
    return std::unique_ptr<Communicator>(
        new GlooCommunicator(std::move(base), std::move(store), std::move(device), std::move(ctx), config.timeout));
  } catch (const std::exception& e) {
    return FromException(e, "connecting rank " + std::to_string(config.rank) + " to its peers");
  }
}

}  // namespace ckptdb
