// The address a rank's TCP listener binds to and advertises to its peers,
// and the check, after the rendezvous, that every peer can reach it.
//
// The default (nothing set) is the address that ranks on other hosts are
// most likely to reach, found in this order:
//   1. CKPTDB_SOCKET_IFNAME (DistributedConfig::socket_ifname): an address
//      of that interface (as GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME);
//   2. the address this host uses to reach the rendezvous host (the
//      redis:// server; else MASTER_ADDR, torchrun's store host), as the
//      kernel routes to it (a UDP connect: nothing is sent), as NCCL and Ray
//      choose it;
//   3. the first address this host's name resolves to that is not loopback
//      and can be bound here (PyTorch gloo's choice, without its loopback);
//   4. the address of the interface the default route leaves by;
//   5. this host's only non-loopback IPv4 address, when it has exactly one;
//   6. 127.0.0.1, which serves only a job whose ranks all share this host's
//      network (the check below fails a job that spans hosts, naming it).
// Steps 2-5 skip loopback answers: host names often resolve to 127.0.1.1
// (Debian's /etc/hosts) or 127.0.0.1 (container images), and a rendezvous
// on this host says nothing of how other hosts reach it.
// CKPTDB_BIND_ADDRESS (DistributedConfig::bind_address) wins over all.
#ifndef CKPTDB_SRC_BIND_ADDRESS_H_
#define CKPTDB_SRC_BIND_ADDRESS_H_

#include <string>
#include <vector>

#include "ckptdb/distributed.h"
#include "ckptdb/status.h"

namespace ckptdb {

struct ListenAddress {
  std::string address;  // as gloo binds it: numeric, or the configured name
  std::string how;      // why this one, for messages ("the route to redis host h")
  bool loopback = false;
};

// The address per the rules above, from config.bind_address,
// config.socket_ifname and `route_host` (empty: no step 2).
// config.bind_address is checked the way gloo's tcp::CreateDevice uses it
// (getaddrinfo, then the first address that can be bound), because gloo
// does not check getaddrinfo's error and crashes on a name that does not
// resolve: InvalidArgument naming it when it does not resolve or no address
// of it can be bound here (Unavailable when the resolver failed
// temporarily). A socket_ifname that names no interface of this host, or
// one without an address, is InvalidArgument listing the interfaces there.
StatusOr<ListenAddress> ChooseListenAddress(const DistributedConfig& config, const std::string& route_host);

// The host step 2 routes to: the redis:// rendezvous's host, else
// config.route_host (MASTER_ADDR), else "".
std::string RouteHost(const DistributedConfig& config);

// Step 2 alone: the source address of the route to `host`; "" when it does
// not resolve, has no route, or the answer is loopback.
std::string AddressRoutingTo(const std::string& host);

// Step 3 alone: the first non-loopback address `host_name` resolves to that
// can be bound here, numeric; "" when none.
std::string NonLoopbackAddressOfName(const std::string& host_name);

// What a rank publishes at the rendezvous beside its gloo addresses, so that
// every rank can check the job's addresses alike.
struct PeerCard {
  std::string network;     // this host's network: boot id and network namespace
  std::string host;        // gethostname
  std::string address;     // ListenAddress::address
  std::string how;         // ListenAddress::how
  bool loopback = false;
  std::string interfaces;  // "eth0 198.18.0.2, ib0 10.0.0.5": what could be set
};
PeerCard MyPeerCard(const ListenAddress& listen);
std::string EncodePeerCard(const PeerCard& card);
// False when `text` is not an encoded card.
bool DecodePeerCard(const std::string& text, PeerCard* card);

// Every rank calls this with every rank's card (indexed by rank) and gets
// the same answer: OK, or, when the ranks span more than one network (hosts,
// or containers with networks of their own) and some listen on a loopback
// address that the others cannot reach, InvalidArgument naming each such
// rank, its host, its address and why it was chosen, and the two settings
// that fix it (CKPTDB_SOCKET_IFNAME, CKPTDB_BIND_ADDRESS).
Status CheckPeersCanReachEachOther(const std::vector<PeerCard>& cards);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_BIND_ADDRESS_H_
