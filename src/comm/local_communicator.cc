// The world-size-1 communicator behind `no_dist`.
#include "ckptdb/communicator.h"

#include "util/le_bytes.h"
#include "util/status_macros.h"

namespace ckptdb {

namespace {

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  Status Broadcast(std::string* data, int root) override { return CheckRoot(root); }
  Status Gather(const std::string& mine, int root, std::vector<std::string>* out,
                std::map<int, Status>* missing) override {
    Status st = CheckRoot(root);
    if (!st.ok()) return st;
    out->assign(1, mine);
    missing->clear();
    return Status::OK();
  }
  Status Scatter(const std::vector<std::string>& parts, int root, std::string* mine) override {
    RETURN_IF_ERROR(CheckRoot(root));
    if (parts.size() != 1) return Status::InvalidArgument("scatter: " + std::to_string(parts.size()) + " parts for 1 rank");
    *mine = parts[0];
    return Status::OK();
  }
  Status AllGather(const std::string& mine, std::vector<std::string>* out) override {
    out->assign(1, mine);
    return Status::OK();
  }
  Status Barrier() override { return Status::OK(); }

 private:
  static Status CheckRoot(int root) {
    if (root != 0) return Status::InvalidArgument("root rank " + std::to_string(root) + " is not in a world of size 1");
    return Status::OK();
  }
};

}  // namespace

Status Communicator::Send(int peer, const void*, size_t) {
  return Status::FailedPrecondition("this communicator cannot send point to point (to rank " + std::to_string(peer) +
                               "): it serves only stores that every rank sees");
}

Status Communicator::Recv(int peer, void*, size_t) {
  return Status::FailedPrecondition("this communicator cannot receive point to point (from rank " +
                               std::to_string(peer) + "): it serves only stores that every rank sees");
}

Status Communicator::SendParts(int peer, const std::vector<Part>& parts) {
  for (const Part& p : parts) RETURN_IF_ERROR(Send(peer, p.data, p.n));
  return Status::OK();
}

Status Communicator::RecvParts(int peer, const std::vector<MutablePart>& parts) {
  for (const MutablePart& p : parts) RETURN_IF_ERROR(Recv(peer, p.data, p.n));
  return Status::OK();
}

Status Communicator::Scatter(const std::vector<std::string>& parts, int root, std::string* mine) {
  std::string all;
  if (rank() == root) {
    if (parts.size() != static_cast<size_t>(world_size())) {
      return Status::InvalidArgument("scatter: " + std::to_string(parts.size()) + " parts for " +
                                     std::to_string(world_size()) + " ranks");
    }
    for (const std::string& p : parts) {
      AppendLE64(&all, p.size());
      all += p;
    }
  }
  RETURN_IF_ERROR(Broadcast(&all, root));
  std::string_view in = all;
  for (int r = 0; r <= rank(); ++r) {
    uint64_t n = 0;
    if (!ConsumeLE64(&in, &n) || in.size() < n) return Status::Internal("scatter: the root's message is malformed");
    if (r == rank()) mine->assign(in.data(), n);
    in.remove_prefix(n);
  }
  return Status::OK();
}

std::unique_ptr<Communicator> NewLocalCommunicator() { return std::make_unique<LocalCommunicator>(); }

}  // namespace ckptdb
