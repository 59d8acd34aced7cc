// Choosing the address a rank listens on, and checking that its peers can
// reach it (bind_address.h).
#include "comm/bind_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <net/route.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <climits>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>

namespace ckptdb {

namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

struct IfAddrsDeleter {
  void operator()(ifaddrs* a) const { freeifaddrs(a); }
};
using IfAddrsList = std::unique_ptr<ifaddrs, IfAddrsDeleter>;

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

socklen_t SockaddrLength(const sockaddr* a) {
  return a->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// Whether `a` can be bound here (port 0: any free port, released again);
// errno's text in *why when not.
bool CanBind(const sockaddr* a, std::string* why) {
  int fd = socket(a->sa_family, SOCK_STREAM, 0);
  if (fd < 0) {
    *why = std::strerror(errno);
    return false;
  }
  const bool bound = bind(fd, a, SockaddrLength(a)) == 0;
  if (!bound) *why = std::strerror(errno);
  close(fd);
  return bound;
}

std::string Numeric(const sockaddr* a) {
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw = a->sa_family == AF_INET6
                        ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr)
                        : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(a)->sin_addr);
  if (inet_ntop(a->sa_family, raw, text, sizeof text) == nullptr) return "";
  return text;
}

bool IsLoopback(const sockaddr* a) {
  if (a->sa_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24) == 127;
  }
  if (a->sa_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    // ::ffff:127.x.y.z
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

// An address a peer can dial without knowing an interface: IPv4, or IPv6
// that is not link-local.
bool Dialable(const sockaddr* a) {
  if (a->sa_family == AF_INET) return true;
  return a->sa_family == AF_INET6 &&
         !IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
}

std::string HostName() {
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof host - 1) != 0) return "";
  return host;
}

// The configured address checked as gloo will use it: its first address
// that can be bound.
StatusOr<ListenAddress> CheckBindAddress(const std::string& host) {
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
    if (CanBind(a->ai_addr, &last_error)) {
      return ListenAddress{host, "CKPTDB_BIND_ADDRESS", IsLoopback(a->ai_addr)};
    }
  }
  return Status::InvalidArgument(what + " resolves, but cannot be bound on this host (" + last_error +
                                 "): set it to an address of one of this host's interfaces, or leave it unset");
}

// Every (interface, address) of this host's interfaces that are up.
struct Interface {
  std::string name;
  sockaddr_storage addr;
  bool loopback;
};
std::vector<Interface> Interfaces() {
  std::vector<Interface> out;
  ifaddrs* raw = nullptr;
  if (getifaddrs(&raw) != 0) return out;
  IfAddrsList list(raw);
  for (ifaddrs* i = list.get(); i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_flags & IFF_UP) == 0) continue;
    if (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6) continue;
    Interface f;
    f.name = i->ifa_name;
    std::memset(&f.addr, 0, sizeof f.addr);
    std::memcpy(&f.addr, i->ifa_addr, SockaddrLength(i->ifa_addr));
    f.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0 || IsLoopback(i->ifa_addr);
    out.push_back(f);
  }
  return out;
}

const sockaddr* Raw(const Interface& f) { return reinterpret_cast<const sockaddr*>(&f.addr); }

// "eth0 198.18.0.2, ib0 10.0.0.5": the non-loopback IPv4 addresses of the
// interfaces that are up, at most four.
std::string DescribeInterfaces() {
  std::string out;
  int n = 0;
  for (const Interface& f : Interfaces()) {
    if (f.loopback || Raw(f)->sa_family != AF_INET) continue;
    if (++n > 4) {
      out += ", ...";
      break;
    }
    out += (out.empty() ? "" : ", ") + f.name + " " + Numeric(Raw(f));
  }
  return out.empty() ? "none but loopback" : out;
}

StatusOr<ListenAddress> AddressOfInterface(const std::string& ifname) {
  const std::vector<Interface> all = Interfaces();
  const Interface* v4 = nullptr;
  const Interface* v6 = nullptr;
  std::set<std::string> names;
  for (const Interface& f : all) {
    names.insert(f.name);
    if (f.name != ifname || !Dialable(Raw(f))) continue;
    if (Raw(f)->sa_family == AF_INET && v4 == nullptr) v4 = &f;
    if (Raw(f)->sa_family == AF_INET6 && v6 == nullptr) v6 = &f;
  }
  const Interface* chosen = v4 != nullptr ? v4 : v6;
  if (chosen == nullptr) {
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    return Status::InvalidArgument("CKPTDB_SOCKET_IFNAME='" + ifname + "': " +
                                   (names.count(ifname) ? "that interface has no address a peer can dial"
                                                        : "no interface of that name is up on this host") +
                                   " (interfaces up here: " + (list.empty() ? "none" : list) + ")");
  }
  return ListenAddress{Numeric(Raw(*chosen)), "interface " + ifname + " (CKPTDB_SOCKET_IFNAME)", chosen->loopback};
}

// The source address of the kernel's route to `addr` (UDP connect: nothing
// is sent); "" when there is none or it is loopback.
std::string SourceAddressTo(const sockaddr* addr) {
  int fd = socket(addr->sa_family, SOCK_DGRAM, 0);
  if (fd < 0) return "";
  std::string out;
  sockaddr_storage mine;
  socklen_t len = sizeof mine;
  if (connect(fd, addr, SockaddrLength(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &len) == 0) {
    const sockaddr* m = reinterpret_cast<const sockaddr*>(&mine);
    std::string why;
    if (!IsLoopback(m) && Dialable(m) && CanBind(m, &why)) out = Numeric(m);
  }
  close(fd);
  return out;
}

// The IPv4 address of the interface the default route leaves by
// (/proc/net/route: the line whose destination and mask are 0).
std::string DefaultRouteSource() {
  std::ifstream routes("/proc/net/route");
  std::string line, ifname;
  std::getline(routes, line);  // the header
  while (std::getline(routes, line)) {
    char name[IFNAMSIZ + 1] = {};
    unsigned long destination = 1, gateway = 0, flags = 0, mask = 1;
    int refcnt = 0, use = 0, metric = 0;
    if (std::sscanf(line.c_str(), "%16s %lx %lx %lx %d %d %d %lx", name, &destination, &gateway, &flags, &refcnt,
                    &use, &metric, &mask) == 8 &&
        destination == 0 && mask == 0 && (flags & RTF_UP) != 0) {
      ifname = name;
      break;
    }
  }
  if (ifname.empty()) return "";
  std::string why;
  for (const Interface& f : Interfaces()) {
    if (f.name == ifname && !f.loopback && Raw(f)->sa_family == AF_INET && CanBind(Raw(f), &why)) {
      return Numeric(Raw(f));
    }
  }
  return "";
}

std::string OnlyNonLoopbackAddress() {
  std::set<std::string> found;
  std::string why;
  for (const Interface& f : Interfaces()) {
    if (f.loopback || Raw(f)->sa_family != AF_INET) continue;
    if (CanBind(Raw(f), &why)) found.insert(Numeric(Raw(f)));
  }
  return found.size() == 1 ? *found.begin() : "";
}

// This host's network, as far as loopback goes: the kernel (boot id) and
// the network namespace. Ranks with the same one reach each other over
// 127.0.0.1.
std::string NetworkIdentity() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat st;
  const std::string ns = stat("/proc/self/ns/net", &st) == 0 ? std::to_string(st.st_ino) : "?";
  if (boot.empty()) boot = "host:" + HostName();
  return boot + "/" + ns;
}

}  // namespace

std::string RouteHost(const DistributedConfig& config) {
  const std::string redis = "redis://";
  if (config.rendezvous.rfind(redis, 0) == 0) {
    std::string hostport = config.rendezvous.substr(redis.size());
    hostport = hostport.substr(0, hostport.find('/'));
    if (const size_t at = hostport.rfind('@'); at != std::string::npos) hostport = hostport.substr(at + 1);
    if (!hostport.empty() && hostport[0] == '[') return hostport.substr(1, hostport.find(']') - 1);
    return hostport.substr(0, hostport.rfind(':'));
  }
  return config.route_host;
}

std::string AddressRoutingTo(const std::string& host) {
  if (host.empty()) return "";
  AddrInfoList list;
  std::string why;
  if (Resolve(host, &list, &why) != 0) return "";
  for (addrinfo* a = list.get(); a != nullptr; a = a->ai_next) {
    if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
    const std::string out = SourceAddressTo(a->ai_addr);
    if (!out.empty()) return out;
  }
  return "";
}

std::string NonLoopbackAddressOfName(const std::string& host_name) {
  AddrInfoList list;
  std::string why;
  if (host_name.empty() || Resolve(host_name, &list, &why) != 0) return "";
  for (addrinfo* a = list.get(); a != nullptr; a = a->ai_next) {
    if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
    if (IsLoopback(a->ai_addr) || !Dialable(a->ai_addr)) continue;
    const std::string numeric = Numeric(a->ai_addr);
    if (!numeric.empty() && CanBind(a->ai_addr, &why)) return numeric;
  }
  return "";
}

StatusOr<ListenAddress> ChooseListenAddress(const DistributedConfig& config, const std::string& route_host) {
  if (!config.bind_address.empty()) return CheckBindAddress(config.bind_address);
  if (!config.socket_ifname.empty()) return AddressOfInterface(config.socket_ifname);
  if (std::string a = AddressRoutingTo(route_host); !a.empty()) {
    return ListenAddress{a, "the route to the rendezvous host " + route_host, false};
  }
  const std::string host = HostName();
  if (std::string a = NonLoopbackAddressOfName(host); !a.empty()) {
    return ListenAddress{a, "this host's name " + host, false};
  }
  if (std::string a = DefaultRouteSource(); !a.empty()) return ListenAddress{a, "the default route", false};
  if (std::string a = OnlyNonLoopbackAddress(); !a.empty()) {
    return ListenAddress{a, "this host's only network address", false};
  }
  return ListenAddress{"127.0.0.1",
                       "no other address found: " +
                           (route_host.empty() ? std::string("no rendezvous host to route to")
                                               : "the rendezvous host " + route_host + " is on this host") +
                           ", the host name " + (host.empty() ? "(none)" : host) +
                           " resolves to loopback or not at all, no default route, interfaces: " +
                           DescribeInterfaces(),
                       true};
}

PeerCard MyPeerCard(const ListenAddress& listen) {
  PeerCard c;
  c.network = NetworkIdentity();
  c.host = HostName();
  c.address = listen.address;
  c.how = listen.how;
  c.loopback = listen.loopback;
  c.interfaces = DescribeInterfaces();
  return c;
}

// Fields one per line, in order; none holds a newline (how and interfaces
// are built here, host names and addresses have none).
std::string EncodePeerCard(const PeerCard& c) {
  auto clean = [](std::string s) {
    std::replace(s.begin(), s.end(), '\n', ' ');
    return s;
  };
  return "card1\n" + clean(c.network) + "\n" + clean(c.host) + "\n" + clean(c.address) + "\n" + clean(c.how) + "\n" +
         (c.loopback ? "1" : "0") + "\n" + clean(c.interfaces) + "\n";
}

bool DecodePeerCard(const std::string& text, PeerCard* c) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    const size_t nl = text.find('\n', start);
    if (nl == std::string::npos) return false;
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  if (lines.size() != 7 || lines[0] != "card1") return false;
  c->network = lines[1];
  c->host = lines[2];
  c->address = lines[3];
  c->how = lines[4];
  c->loopback = lines[5] == "1";
  c->interfaces = lines[6];
  return true;
}

Status CheckPeersCanReachEachOther(const std::vector<PeerCard>& cards) {
  std::set<std::string> networks;
  for (const PeerCard& c : cards) networks.insert(c.network);
  if (networks.size() <= 1) return Status::OK();
  // Loopback ranks, grouped by host and address (every rank of a host
  // usually chose alike).
  std::map<std::string, std::vector<int>> groups;
  std::map<std::string, const PeerCard*> group_card;
  for (size_t r = 0; r < cards.size(); ++r) {
    if (!cards[r].loopback) continue;
    const std::string key = cards[r].network + "\n" + cards[r].address + "\n" + cards[r].how;
    groups[key].push_back(static_cast<int>(r));
    group_card[key] = &cards[r];
  }
  if (groups.empty()) return Status::OK();
  std::vector<std::pair<int, std::string>> ordered;  // by first rank
  for (const auto& [key, ranks] : groups) ordered.emplace_back(ranks.front(), key);
  std::sort(ordered.begin(), ordered.end());
  std::string who;
  std::string example_host, example_ifs;
  for (const auto& [first, key] : ordered) {
    const std::vector<int>& ranks = groups[key];
    const PeerCard& c = *group_card[key];
    std::string list;
    for (int r : ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
    who += std::string(who.empty() ? "" : "; ") + (ranks.size() == 1 ? "rank " : "ranks ") + list + " on host " +
           c.host + (ranks.size() == 1 ? " listens on " : " listen on ") + c.address + " (" + c.how + "; its interfaces: " + c.interfaces + ")";
    if (example_host.empty()) {
      example_host = c.host;
      example_ifs = c.interfaces;
    }
  }
  return Status::InvalidArgument(
      "the job spans " + std::to_string(networks.size()) +
      " hosts (networks), but " + who +
      ": a loopback address, which ranks on other hosts cannot reach. Set CKPTDB_SOCKET_IFNAME to the network "
      "interface the hosts reach each other by (for example CKPTDB_SOCKET_IFNAME=eth0), or CKPTDB_BIND_ADDRESS to "
      "the address of host " + example_host + " that the other hosts reach, on every rank there");
}

}  // namespace ckptdb
