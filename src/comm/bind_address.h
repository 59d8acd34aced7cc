// The address a rank's TCP listener binds to and advertises to its peers.
#ifndef CKPTDB_SRC_BIND_ADDRESS_H_
#define CKPTDB_SRC_BIND_ADDRESS_H_

#include <string>

#include "ckptdb/status.h"

namespace ckptdb {

// `configured` (DistributedConfig::bind_address, CKPTDB_BIND_ADDRESS) when
// set, checked the way gloo's tcp::CreateDevice uses it (getaddrinfo, then
// the first address that can be bound), because gloo does not check
// getaddrinfo's error and crashes on a name that does not resolve:
// InvalidArgument naming it when it does not resolve or no address of it can
// be bound here (Unavailable when the resolver failed temporarily).
// Empty: DefaultBindAddress().
StatusOr<std::string> ChooseBindAddress(const std::string& configured);

// PyTorch's gloo default: the first address that `host_name` resolves to
// which can be bound on this host, as a numeric address; "127.0.0.1" when
// it does not resolve or none can be bound.
std::string BindAddressForHostName(const std::string& host_name);

// BindAddressForHostName(this host's name, gethostname(2)): across hosts,
// where host names resolve to the addresses the hosts reach each other by,
// every rank listens where its peers can reach it without a setting.
std::string DefaultBindAddress();

}  // namespace ckptdb

#endif  // CKPTDB_SRC_BIND_ADDRESS_H_
