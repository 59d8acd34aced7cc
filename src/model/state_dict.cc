#include "ckptdb/state_dict.h"

#include "ckptdb/metadata.h"

namespace ckptdb {

const char* EntryKindName(const Entry& entry) {
  switch (entry.index()) {
    case 0: return "tensor";
    case 1: return "sharded_tensor";
    default: return "bytes";
  }
}

const char* EntryKindName(EntryKind kind) {
  switch (kind) {
    case EntryKind::kTensor: return "tensor";
    case EntryKind::kShardedTensor: return "sharded_tensor";
    case EntryKind::kBytes: return "bytes";
  }
  return "unknown";
}

Status StateDict::Add(std::string fqn, Tensor tensor) { return AddEntry(std::move(fqn), std::move(tensor)); }
Status StateDict::Add(std::string fqn, ShardedTensor tensor) { return AddEntry(std::move(fqn), std::move(tensor)); }
Status StateDict::Add(std::string fqn, Bytes bytes) { return AddEntry(std::move(fqn), std::move(bytes)); }

Status StateDict::AddEntry(std::string fqn, Entry entry) {
  if (fqn.empty()) return Status::InvalidArgument("empty FQN");
  if (fqn.find('\0') != std::string::npos) return Status::InvalidArgument("FQN contains a NUL byte");
  if (index_.count(fqn)) return Status::AlreadyExists("duplicate FQN '" + fqn + "'");
  index_.emplace(fqn, entries_.size());
  entries_.emplace_back(std::move(fqn), std::move(entry));
  return Status::OK();
}

const Entry* StateDict::Find(const std::string& fqn) const {
  auto it = index_.find(fqn);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

Entry* StateDict::Find(const std::string& fqn) {
  auto it = index_.find(fqn);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

}  // namespace ckptdb
