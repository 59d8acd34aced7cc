#include "comm/descriptor_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ckptdb {

namespace {

uint64_t FromRlim(rlim_t v) { return v == RLIM_INFINITY ? UINT64_MAX : static_cast<uint64_t>(v); }

}  // namespace

DescriptorLimits CurrentDescriptorLimits() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return {};
  return DescriptorLimits{FromRlim(r.rlim_cur), FromRlim(r.rlim_max)};
}

Status EnsureDescriptorsFor(uint64_t connections, const std::string& who) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return Status::OK();  // (nothing to go by: connecting will tell)
  const uint64_t need = connections + kDescriptorReserve;
  const uint64_t soft = FromRlim(r.rlim_cur), hard = FromRlim(r.rlim_max);
  if (soft >= need) return Status::OK();
  const std::string needs = who + " needs " + std::to_string(need) + " open files (" + std::to_string(connections) +
                            " connections to other ranks and " + std::to_string(kDescriptorReserve) +
                            " for the store), but ";
  const uint64_t to = std::min(need, hard);
  if (to > soft) {
    rlimit raised = r;
    raised.rlim_cur = static_cast<rlim_t>(to);
    if (setrlimit(RLIMIT_NOFILE, &raised) != 0) {
      return Status::FailedPrecondition(needs + "raising its limit from " + std::to_string(soft) +
                                        " failed: " + std::strerror(errno));
    }
  }
  if (hard >= connections + kDescriptorMinimumSpare) return Status::OK();
  return Status::FailedPrecondition(
      needs + "its hard limit is " + std::to_string(hard) +
      " (`ulimit -Hn`); raise it where the job's processes start (`ulimit -n " + std::to_string(need) +
      "` as root, /etc/security/limits.conf, systemd's LimitNOFILE or the scheduler's settings)");
}

}  // namespace ckptdb
