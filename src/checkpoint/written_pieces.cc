#include "checkpoint/written_pieces.h"

#include <algorithm>
#include <functional>
#include <string>
#include <utility>

#include "format/metadata_codec.h"

namespace ckptdb {

WrittenPieces::WrittenPieces(StepMetadata* md, int world_size) : md_(md), by_rank_(world_size) {
  std::vector<size_t> count(by_rank_.size(), 0);
  for (const EntryMetadata& e : md->entries) {
    for (const StoredPiece& p : e.pieces) {
      if (p.key.rank < count.size()) ++count[p.key.rank];
    }
  }
  for (size_t r = 0; r < by_rank_.size(); ++r) by_rank_[r].reserve(count[r]);
  for (EntryMetadata& e : md->entries) {
    for (StoredPiece& p : e.pieces) {
      if (p.key.rank < by_rank_.size()) by_rank_[p.key.rank].push_back(Slot{&p, p.key.item, false});
    }
  }
  for (std::vector<Slot>& slots : by_rank_) {
    std::sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) { return a.item < b.item; });
  }
}

StatusOr<StoredPiece*> WrittenPieces::Take(int rank, const StorageKey& key) {
  const std::string item = "its write report has item " + std::to_string(key.rank) + "/" + std::to_string(key.item);
  if (key.rank != static_cast<uint32_t>(rank)) return Status::Internal(item + ", of another rank");
  std::vector<Slot>& slots = by_rank_[rank];
  auto it = std::lower_bound(slots.begin(), slots.end(), key.item,
                             [](const Slot& s, uint32_t i) { return s.item < i; });
  if (it == slots.end() || it->item != key.item) return Status::Internal(item + ", which it did not plan to write");
  if (it->filled) return Status::Internal(item + " twice");
  it->filled = true;
  return it->piece;
}

Status WrittenPieces::Fill(int rank, const google::protobuf::RepeatedPtrField<proto::WrittenItem>& items) {
  for (const proto::WrittenItem& w : items) {
    StatusOr<StoredPiece*> p = Take(rank, StorageKey{w.key().rank(), w.key().item()});
    if (!p.ok()) return p.status();
    SetWrittenFields(w, *p);
  }
  return Status::OK();
}

Status WrittenPieces::Fill(int rank, std::vector<WrittenItem>&& items) {
  for (WrittenItem& w : items) {
    StatusOr<StoredPiece*> p = Take(rank, w.key);
    if (!p.ok()) return p.status();
    MoveWrittenFields(std::move(w), *p);
  }
  std::vector<WrittenItem>().swap(items);
  return Status::OK();
}

Status WrittenPieces::Complete(int rank) const {
  for (const Slot& s : by_rank_[rank]) {
    if (s.filled) continue;
    std::string fqn;  // (found by address: the error path only)
    const std::less<const StoredPiece*> before;
    for (const EntryMetadata& e : md_->entries) {
      if (!e.pieces.empty() && !before(s.piece, &e.pieces.front()) && !before(&e.pieces.back(), s.piece)) fqn = e.fqn;
    }
    return Status::Internal("its write report lacks item " + std::to_string(rank) + "/" + std::to_string(s.item) +
                            " (a piece of '" + fqn + "')");
  }
  return Status::OK();
}

}  // namespace ckptdb
