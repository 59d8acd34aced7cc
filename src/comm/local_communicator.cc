// The world-size-1 communicator behind `no_dist`.
#include "ckptdb/communicator.h"

#include "util/status_macros.h"

namespace ckptdb {

namespace {

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  Status Broadcast(std::string* data, int root) override { return CheckRoot(root); }
  Status Gather(const std::string& mine, int root, std::vector<std::string>* out) override {
    Status st = CheckRoot(root);
    if (!st.ok()) return st;
    out->assign(1, mine);
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

std::unique_ptr<Communicator> NewLocalCommunicator() { return std::make_unique<LocalCommunicator>(); }

}  // namespace ckptdb
