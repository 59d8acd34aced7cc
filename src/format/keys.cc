#include "format/keys.h"

namespace ckptdb {

void PutBigEndian64(std::string* out, uint64_t v) {
  for (int i = 7; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutBigEndian32(std::string* out, uint32_t v) {
  for (int i = 3; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetBigEndian64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint32_t GetBigEndian32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string MetadataKey(int64_t step) {
  std::string k(1, kMetadataPrefix);
  PutBigEndian64(&k, static_cast<uint64_t>(step));
  return k;
}

bool ParseMetadataKey(std::string_view key, int64_t* step) {
  if (key.size() != kMetadataKeySize || key[0] != kMetadataPrefix) return false;
  *step = static_cast<int64_t>(GetBigEndian64(key.data() + 1));
  return true;
}

std::string SummaryKey(int64_t step) {
  std::string k(1, kSummaryPrefix);
  PutBigEndian64(&k, static_cast<uint64_t>(step));
  return k;
}

bool ParseSummaryKey(std::string_view key, int64_t* step) {
  if (key.size() != kMetadataKeySize || key[0] != kSummaryPrefix) return false;
  *step = static_cast<int64_t>(GetBigEndian64(key.data() + 1));
  return true;
}

std::string ReferencesKey(int64_t step) {
  std::string k(1, kReferencesPrefix);
  PutBigEndian64(&k, static_cast<uint64_t>(step));
  return k;
}

bool ParseReferencesKey(std::string_view key, int64_t* step) {
  if (key.size() != kMetadataKeySize || key[0] != kReferencesPrefix) return false;
  *step = static_cast<int64_t>(GetBigEndian64(key.data() + 1));
  return true;
}

std::string PendingKey(int64_t step, uint64_t save_id) {
  std::string k(1, kPendingPrefix);
  PutBigEndian64(&k, static_cast<uint64_t>(step));
  PutBigEndian64(&k, save_id);
  return k;
}

bool ParsePendingKey(std::string_view key, int64_t* step, uint64_t* save_id) {
  if (key.size() != 17 || key[0] != kPendingPrefix) return false;
  *step = static_cast<int64_t>(GetBigEndian64(key.data() + 1));
  *save_id = GetBigEndian64(key.data() + 9);
  return true;
}

std::string PiecesStepBegin(int64_t step) {
  std::string k(1, kPiecesPrefix);
  PutBigEndian64(&k, static_cast<uint64_t>(step));
  return k;
}

std::string PiecesStepEnd(int64_t step) {
  if (static_cast<uint64_t>(step) == UINT64_MAX) return std::string(1, kPiecesPrefix + 1);
  return PiecesStepBegin(step + 1);
}

std::string PiecesKey(int64_t step, uint32_t entry) {
  std::string k = PiecesStepBegin(step);
  PutBigEndian32(&k, entry);
  return k;
}

std::string PiecesPageKey(int64_t step, uint32_t entry, uint32_t page) {
  std::string k = PiecesKey(step, entry);
  PutBigEndian32(&k, page);
  return k;
}

bool ParsePiecesKey(std::string_view key, int64_t* step, uint32_t* entry, std::optional<uint32_t>* page) {
  if ((key.size() != kPiecesKeySize && key.size() != kPiecesKeySize + 4) || key[0] != kPiecesPrefix) return false;
  *step = static_cast<int64_t>(GetBigEndian64(key.data() + 1));
  *entry = GetBigEndian32(key.data() + 9);
  if (page != nullptr) {
    *page = key.size() == kPiecesKeySize ? std::nullopt : std::optional<uint32_t>(GetBigEndian32(key.data() + 13));
  }
  return true;
}

std::string TagKey(std::string_view name) {
  std::string k(1, kTagPrefix);
  k.append(name);
  return k;
}

bool ParseTagKey(std::string_view key, std::string* name) {
  if (key.size() < 2 || key[0] != kTagPrefix) return false;
  name->assign(key.substr(1));
  return true;
}

std::string EncodeDataKey(const DataKey& k) {
  std::string s(1, kDataPrefix);
  s.reserve(kDataKeySize);
  PutBigEndian64(&s, static_cast<uint64_t>(k.step));
  PutBigEndian64(&s, k.save_id);
  PutBigEndian32(&s, k.rank);
  PutBigEndian32(&s, k.item);
  PutBigEndian32(&s, k.chunk);
  return s;
}

bool ParseDataKey(std::string_view key, DataKey* out) {
  if (key.size() != kDataKeySize || key[0] != kDataPrefix) return false;
  const char* p = key.data() + 1;
  out->step = static_cast<int64_t>(GetBigEndian64(p));
  out->save_id = GetBigEndian64(p + 8);
  out->rank = GetBigEndian32(p + 16);
  out->item = GetBigEndian32(p + 20);
  out->chunk = GetBigEndian32(p + 24);
  return true;
}

std::string DataSaveBegin(int64_t step, uint64_t save_id) {
  std::string s(1, kDataPrefix);
  PutBigEndian64(&s, static_cast<uint64_t>(step));
  PutBigEndian64(&s, save_id);
  return s;
}

std::string DataSaveEnd(int64_t step, uint64_t save_id) {
  // The next (step, save_id) pair in key order; save_id may be the maximum.
  if (save_id == UINT64_MAX) {
    std::string s(1, kDataPrefix);
    PutBigEndian64(&s, static_cast<uint64_t>(step) + 1);
    PutBigEndian64(&s, 0);
    return s;
  }
  return DataSaveBegin(step, save_id + 1);
}

}  // namespace ckptdb
