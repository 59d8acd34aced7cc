// StateDict: an ordered map from fully qualified name (FQN) to an entry.
//
// An entry is a Tensor (replicated: every rank holds the same value, only the
// coordinator writes it), a ShardedTensor (every rank writes its own local
// shards) or Bytes (opaque bytes, written by the coordinator). Insertion
// order is kept and is the order of the saved metadata.
//
// For a load, the state dict is the target: tensors are filled in place
// (their memory must already have the saved dtype and shape), Bytes entries
// are replaced with the saved bytes and the encoding the step recorded.
//
// Thread safety: not thread-safe for mutation; const access may be shared.
#ifndef CKPTDB_STATE_DICT_H_
#define CKPTDB_STATE_DICT_H_

#include <cstddef>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/sharded_tensor.h"
#include "ckptdb/status.h"
#include "ckptdb/tensor.h"

namespace ckptdb {

struct Bytes {
  std::string data;
  // How `data` encodes the value (stored with the entry; ckptdb never
  // decodes it; a save refuses a number BytesEncoding does not name with
  // InvalidArgument). After a load: what the step recorded (kUnrecorded
  // for a step written before encodings were recorded).
  BytesEncoding encoding = BytesEncoding::kRaw;
};

using Entry = std::variant<Tensor, ShardedTensor, Bytes>;

// "tensor", "sharded_tensor" or "bytes".
const char* EntryKindName(const Entry& entry);

class StateDict {
 public:
  // Each adds an entry at the end. InvalidArgument for an empty FQN or one
  // holding a NUL byte; AlreadyExists when the FQN is already present (the
  // state dict is left unchanged).
  Status Add(std::string fqn, Tensor tensor);
  Status Add(std::string fqn, ShardedTensor tensor);
  Status Add(std::string fqn, Bytes bytes);
  Status AddBytes(std::string fqn, std::string data, BytesEncoding encoding = BytesEncoding::kRaw) {
    return Add(std::move(fqn), Bytes{std::move(data), encoding});
  }
  Status AddEntry(std::string fqn, Entry entry);

  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  // In insertion order.
  const std::vector<std::pair<std::string, Entry>>& entries() const { return entries_; }
  std::vector<std::pair<std::string, Entry>>& mutable_entries() { return entries_; }

  // Null when absent.
  const Entry* Find(const std::string& fqn) const;
  Entry* Find(const std::string& fqn);

 private:
  std::vector<std::pair<std::string, Entry>> entries_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace ckptdb

#endif  // CKPTDB_STATE_DICT_H_
