// A redis-server of the test's own on a free port of 127.0.0.1, for the
// lifetime of the object.
#ifndef CKPTDB_TESTS_REDIS_SERVER_H_
#define CKPTDB_TESTS_REDIS_SERVER_H_

#include <sys/types.h>

#include <string>

namespace ckptdb::testing {

class RedisServer {
 public:
  RedisServer();
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  bool ready() const { return ready_; }
  std::string uri() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  // Stops (SIGSTOP) and resumes (SIGCONT) the server: while stopped it
  // accepts bytes (the kernel queues them) but never answers.
  void Pause();
  void Resume();

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  bool ready_ = false;
};

}  // namespace ckptdb::testing

#endif  // CKPTDB_TESTS_REDIS_SERVER_H_
