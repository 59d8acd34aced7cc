// RendezvousStore over a shared directory (one file per key, created with
// link(2), atomic on local file systems and NFS alike) and over Redis
// (SET NX and GET through hiredis, each bounded by the time left before the
// rendezvous' deadline).
#include "comm/rendezvous_store.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <random>

#include "util/status_macros.h"

namespace ckptdb {

namespace {

std::string Errno(int e) { return std::strerror(e); }

// What is left before `deadline`, but at least kRendezvousCommandFloor.
std::chrono::milliseconds TimeLeft(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return std::max(left, kRendezvousCommandFloor);
}

timeval ToTimeval(std::chrono::milliseconds ms) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

class FileRendezvousStore final : public RendezvousStore {
 public:
  explicit FileRendezvousStore(std::string dir) : dir_(std::move(dir)) {}

  StatusOr<bool> CreateKey(const std::string& key, const std::string& value) override {
    // Written whole under a name of this call's own, then linked to the
    // key's name: a reader sees the whole value or no key at all. (The pid
    // alone does not make the name unique: several connections of one
    // process may create keys at once, and pids repeat across hosts.)
    const std::string tmp = dir_ + "/.tmp-" + std::to_string(getpid()) + "-" + std::to_string(NextTmpId());
    const std::string path = Path(key);
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return Status::IOError("rendezvous: cannot create '" + tmp + "': " + Errno(errno));
    size_t done = 0;
    while (done < value.size()) {
      ssize_t n = write(fd, value.data() + done, value.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int e = errno;
        close(fd);
        unlink(tmp.c_str());
        return Status::IOError("rendezvous: cannot write '" + tmp + "': " + Errno(e));
      }
      done += static_cast<size_t>(n);
    }
    close(fd);
    const int rv = link(tmp.c_str(), path.c_str());
    const int e = errno;
    unlink(tmp.c_str());
    if (rv == 0) return true;
    if (e == EEXIST) return false;
    return Status::IOError("rendezvous: cannot create '" + path + "': " + Errno(e));
  }

  StatusOr<std::optional<std::string>> Get(const std::string& key) override {
    const std::string path = Path(key);
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return std::optional<std::string>();
      return Status::IOError("rendezvous: cannot open '" + path + "': " + Errno(errno));
    }
    std::string value;
    char buf[4096];
    while (true) {
      ssize_t n = read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int e = errno;
        close(fd);
        return Status::IOError("rendezvous: cannot read '" + path + "': " + Errno(e));
      }
      if (n == 0) break;
      value.append(buf, static_cast<size_t>(n));
    }
    close(fd);
    return std::optional<std::string>(std::move(value));
  }

 private:
  // A file name for the key: letters, digits, '.', '-' and '_' as they are,
  // any other byte as %XX; a long key is cut and completed with its hash.
  std::string Path(const std::string& key) const {
    std::string name;
    for (unsigned char c : key) {
      if (std::isalnum(c) || c == '.' || c == '-' || c == '_') {
        name += static_cast<char>(c);
      } else {
        char hex[4];
        std::snprintf(hex, sizeof hex, "%%%02X", c);
        name += hex;
      }
    }
    if (name.size() > 200) name = name.substr(0, 180) + "-" + std::to_string(std::hash<std::string>{}(key));
    return dir_ + "/" + name;
  }

  uint64_t NextTmpId() {
    std::lock_guard<std::mutex> lock(mu_);
    return rng_();
  }

  std::string dir_;
  std::mutex mu_;  // guards rng_: a store may be called from several threads
  std::mt19937_64 rng_{std::random_device{}() | (uint64_t{std::random_device{}()} << 32)};
};

class RedisRendezvousStore final : public RendezvousStore {
 public:
  RedisRendezvousStore(redisContext* ctx, std::string uri, std::chrono::steady_clock::time_point deadline,
                       std::chrono::milliseconds ttl)
      : ctx_(ctx), uri_(std::move(uri)), deadline_(deadline), ttl_ms_(std::to_string(ttl.count())) {}
  ~RedisRendezvousStore() override { redisFree(ctx_); }

  StatusOr<bool> CreateKey(const std::string& key, const std::string& value) override {
    // Created only if absent, and expiring: a launch's keys are needed while
    // its ranks meet, not for ever (a shared Redis would otherwise keep every
    // launch's keys).
    RETURN_IF_ERROR(BoundNextReply("SET NX"));
    redisReply* reply = static_cast<redisReply*>(redisCommand(ctx_, "SET %b %b NX PX %s", key.data(), key.size(),
                                                              value.data(), value.size(), ttl_ms_.c_str()));
    if (reply == nullptr) return Failed("SET NX");
    const int type = reply->type;
    const std::string text = type == REDIS_REPLY_STATUS || type == REDIS_REPLY_ERROR ? std::string(reply->str, reply->len) : "";
    freeReplyObject(reply);
    if (type == REDIS_REPLY_STATUS && text == "OK") return true;
    if (type == REDIS_REPLY_NIL) return false;
    return Status::Unavailable("rendezvous " + uri_ + ": SET NX: " + (text.empty() ? "unexpected reply" : text));
  }

  StatusOr<std::optional<std::string>> Get(const std::string& key) override {
    RETURN_IF_ERROR(BoundNextReply("GET"));
    redisReply* reply = static_cast<redisReply*>(redisCommand(ctx_, "GET %b", key.data(), key.size()));
    if (reply == nullptr) return Failed("GET");
    const int type = reply->type;
    const std::string text = type == REDIS_REPLY_STRING || type == REDIS_REPLY_ERROR ? std::string(reply->str, reply->len) : "";
    freeReplyObject(reply);
    if (type == REDIS_REPLY_NIL) return std::optional<std::string>();
    if (type == REDIS_REPLY_STRING) return std::optional<std::string>(text);
    return Status::Unavailable("rendezvous " + uri_ + ": GET: " + (text.empty() ? "unexpected reply" : text));
  }

 private:
  // The next command waits for its reply only for the time left.
  Status BoundNextReply(const char* command) {
    wait_ = TimeLeft(deadline_);
    const timeval tv = ToTimeval(wait_);
    if (redisSetTimeout(ctx_, tv) == REDIS_OK) return Status::OK();
    return Status::Unavailable("rendezvous " + uri_ + ": " + command + ": cannot bound the wait for its reply: " +
                               (ctx_->errstr[0] ? ctx_->errstr : "redisSetTimeout failed"));
  }

  Status Failed(const char* command) {
    const std::string prefix = "rendezvous " + uri_ + ": " + command + ": ";
    if (ctx_->err == REDIS_ERR_IO && (errno == EAGAIN || errno == ETIMEDOUT)) {
      return Status::DeadlineExceeded(prefix + "no reply within " + std::to_string(wait_.count()) +
                                      " ms (what was left of the rendezvous' timeout)");
    }
    return Status::Unavailable(prefix + "failed: " + (ctx_->errstr[0] ? ctx_->errstr : "no reply"));
  }

  redisContext* ctx_;
  std::string uri_;
  std::chrono::steady_clock::time_point deadline_;
  std::string ttl_ms_;
  std::chrono::milliseconds wait_{0};  // the bound of the last command
};

}  // namespace

StatusOr<std::unique_ptr<RendezvousStore>> OpenRendezvousStore(const std::string& uri,
                                                               std::chrono::steady_clock::time_point deadline) {
  if (uri.rfind("file://", 0) == 0) {
    std::string dir = uri.substr(7);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status::IOError("cannot create rendezvous directory '" + dir + "': " + ec.message());
    return std::unique_ptr<RendezvousStore>(new FileRendezvousStore(dir));
  }
  if (uri.rfind("redis://", 0) != 0) {
    return Status::InvalidArgument("rendezvous '" + uri + "' must be file:///dir or redis://host:port");
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
  const std::chrono::milliseconds left = TimeLeft(deadline);
  redisContext* ctx = redisConnectWithTimeout(host.c_str(), port, ToTimeval(left));
  if (ctx == nullptr) return Status::Unavailable("cannot reach rendezvous '" + uri + "': out of memory");
  if (ctx->err != 0) {
    std::string m =
        "cannot reach rendezvous '" + uri + "' within " + std::to_string(left.count()) + " ms: " + ctx->errstr;
    const bool timed_out = ctx->err == REDIS_ERR_IO && errno == ETIMEDOUT;
    redisFree(ctx);
    return timed_out ? Status::DeadlineExceeded(m) : Status::Unavailable(m);
  }
  // Keys outlive the meeting by far, whatever the timeout: at least an hour.
  const auto ttl = std::max<std::chrono::milliseconds>(10 * left, std::chrono::hours(1));
  return std::unique_ptr<RendezvousStore>(new RedisRendezvousStore(ctx, uri, deadline, ttl));
}

}  // namespace ckptdb
