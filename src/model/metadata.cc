#include "ckptdb/metadata.h"

namespace ckptdb {

uint64_t EntryMetadata::logical_bytes() const {
  uint64_t n = 0;
  for (const StoredPiece& p : pieces) n += p.nbytes;
  return n;
}

uint64_t EntryMetadata::stored_bytes() const {
  uint64_t n = 0;
  for (const StoredPiece& p : pieces) n += p.stored_bytes;
  return n;
}

const EntryMetadata* StepMetadata::Find(const std::string& fqn) const {
  for (const EntryMetadata& e : entries) {
    if (e.fqn == fqn) return &e;
  }
  return nullptr;
}

uint64_t StepMetadata::logical_bytes() const {
  uint64_t n = 0;
  for (const EntryMetadata& e : entries) n += e.logical_bytes();
  return n;
}

uint64_t StepMetadata::stored_bytes() const {
  uint64_t n = 0;
  for (const EntryMetadata& e : entries) n += e.stored_bytes();
  return n;
}

}  // namespace ckptdb
