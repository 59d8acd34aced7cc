#include "redis_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace ckptdb::testing {

RedisServer::RedisServer() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  close(s);
  pid_ = fork();
  if (pid_ == 0) {
    std::string port = std::to_string(port_);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, STDOUT_FILENO);
    execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "", "--appendonly",
           "no", "--loglevel", "warning", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until it accepts connections.
  for (int i = 0; i < 200 && !ready_; ++i) {
    int c = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_port = htons(static_cast<uint16_t>(port_));
    ready_ = connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(c);
    if (!ready_) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
}

RedisServer::~RedisServer() {
  if (pid_ > 0) {
    kill(pid_, SIGCONT);
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
}

void RedisServer::Pause() {
  if (pid_ > 0) kill(pid_, SIGSTOP);
}

void RedisServer::Resume() {
  if (pid_ > 0) kill(pid_, SIGCONT);
}

}  // namespace ckptdb::testing
