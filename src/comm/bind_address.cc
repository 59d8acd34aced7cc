// Choosing and checking the address a rank listens on (bind_address.h).
#include "comm/bind_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>

namespace ckptdb {

namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// getaddrinfo(host) for stream sockets; the error code of getaddrinfo
// (0 on success) and, for EAI_SYSTEM, errno's text in *why.
int Resolve(const std::string& host, AddrInfoList* out, std::string* why) {
  addrinfo hints;
  std::memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rv = getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rv != 0) {
    *why = rv == EAI_SYSTEM ? std::strerror(errno) : gai_strerror(rv);
    return rv;
  }
  out->reset(result);
  return 0;
}

// Whether `a` can be bound here (port 0: any free port, released again);
// errno's text in *why when not.
bool CanBind(const addrinfo& a, std::string* why) {
  int fd = socket(a.ai_family, a.ai_socktype, a.ai_protocol);
  if (fd < 0) {
    *why = std::strerror(errno);
    return false;
  }
  const bool bound = bind(fd, a.ai_addr, a.ai_addrlen) == 0;
  if (!bound) *why = std::strerror(errno);
  close(fd);
  return bound;
}

std::string Numeric(const addrinfo& a) {
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw = a.ai_family == AF_INET6
                        ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(a.ai_addr)->sin6_addr)
                        : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(a.ai_addr)->sin_addr);
  if (inet_ntop(a.ai_family, raw, text, sizeof text) == nullptr) return "";
  return text;
}

Status CheckBindAddress(const std::string& host) {
  const std::string what = "bind address '" + host + "' (CKPTDB_BIND_ADDRESS, DistributedConfig::bind_address)";
  AddrInfoList list;
  std::string why;
  const int rv = Resolve(host, &list, &why);
  if (rv != 0) {
    std::string m = what + " does not resolve: " + why;
    return rv == EAI_AGAIN ? Status::Unavailable(m) : Status::InvalidArgument(m);
  }
  std::string last_error = "no address";
  for (addrinfo* a = list.get(); a != nullptr; a = a->ai_next) {
    if (CanBind(*a, &last_error)) return Status::OK();
  }
  return Status::InvalidArgument(what + " resolves, but cannot be bound on this host (" + last_error +
                                 "): set it to an address of one of this host's interfaces, or leave it unset for "
                                 "the address this host's name resolves to");
}

}  // namespace

std::string BindAddressForHostName(const std::string& host_name) {
  AddrInfoList list;
  std::string why;
  if (!host_name.empty() && Resolve(host_name, &list, &why) == 0) {
    for (addrinfo* a = list.get(); a != nullptr; a = a->ai_next) {
      if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
      // (A link-local IPv6 address needs its interface, which a numeric
      // address does not carry.)
      if (a->ai_family == AF_INET6 &&
          IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr)) {
        continue;
      }
      const std::string numeric = Numeric(*a);
      if (!numeric.empty() && CanBind(*a, &why)) return numeric;
    }
  }
  return "127.0.0.1";
}

std::string DefaultBindAddress() {
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof host - 1) != 0) return "127.0.0.1";
  return BindAddressForHostName(host);
}

StatusOr<std::string> ChooseBindAddress(const std::string& configured) {
  if (configured.empty()) return DefaultBindAddress();
  if (Status st = CheckBindAddress(configured); !st.ok()) return st;
  return configured;
}

}  // namespace ckptdb
