// The open-file limit a rank's connections need. A rank holds a TCP
// connection (one descriptor) per rank it exchanges messages with: rank 0
// one per other rank (W-1), as does a coordinator other than rank 0 from its
// first rooted call (comm/gloo_communicator.cc), on top of the descriptors
// of the store (RocksDB's files, S3 connections) and the application.
// Clusters often start processes with a soft limit of 1,024 open files
// (`ulimit -n`) under a far higher hard limit: rank 0 of a job of a thousand
// ranks would then fail with "Too many open files" while connecting.
#ifndef CKPTDB_SRC_COMM_DESCRIPTOR_LIMIT_H_
#define CKPTDB_SRC_COMM_DESCRIPTOR_LIMIT_H_

#include <cstdint>
#include <string>

#include "ckptdb/status.h"

namespace ckptdb {

// Descriptors made room for beside the connections, for the store and the
// application; and the fewest a rank is refused below.
inline constexpr uint64_t kDescriptorReserve = 256;
inline constexpr uint64_t kDescriptorMinimumSpare = 64;

// The process's open-file limits (RLIMIT_NOFILE).
struct DescriptorLimits {
  uint64_t soft = 0;
  uint64_t hard = 0;  // UINT64_MAX: unlimited
};
DescriptorLimits CurrentDescriptorLimits();

// Makes room for `connections` connections plus kDescriptorReserve: raises
// this process's soft limit to that many descriptors when it is lower, up
// to the hard limit, and never lowers it. FailedPrecondition, for `who`
// ("rank 0 of job 'x'"), naming the limits and how to raise them, when even
// the hard limit leaves fewer than kDescriptorMinimumSpare beside the
// connections (the soft limit is then raised to the hard limit all the
// same).
Status EnsureDescriptorsFor(uint64_t connections, const std::string& who);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_COMM_DESCRIPTOR_LIMIT_H_
