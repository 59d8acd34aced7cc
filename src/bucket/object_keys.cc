#include "bucket/object_keys.h"

#include <cinttypes>
#include <cstdio>

namespace ckptdb {
namespace bucket {
namespace {

bool ParseStep20(std::string_view s, int64_t* step) {
  if (s.size() != 20 || s.find_first_not_of("0123456789") != std::string_view::npos) return false;
  *step = static_cast<int64_t>(std::stoull(std::string(s)));
  return true;
}

}  // namespace

std::string Step20(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%020" PRId64, step);
  return buf;
}

std::string Hex16(uint64_t v) {
  char id[17];
  std::snprintf(id, sizeof(id), "%016" PRIx64, v);
  return id;
}

bool ParseHex16(std::string_view s, uint64_t* v) {
  if (s.size() != 16 || s.find_first_not_of("0123456789abcdef") != std::string_view::npos) return false;
  *v = std::stoull(std::string(s), nullptr, 16);
  return true;
}

bool ParseSaveRef(std::string_view s, char sep, SaveRef* ref) {
  return s.size() >= 37 && s[20] == sep && ParseStep20(s.substr(0, 20), &ref->step) &&
         ParseHex16(s.substr(21, 16), &ref->save_id);
}

std::string StepRecordKey(const std::string& prefix, int64_t step, uint64_t save_id) {
  return prefix + "steps/" + Step20(step) + "/" + Hex16(save_id);
}

std::string SaveDataPrefix(const std::string& prefix, int64_t step, uint64_t save_id) {
  return prefix + "data/" + Step20(step) + "/" + Hex16(save_id) + "/";
}

std::string PendingKey(const std::string& prefix, int64_t step, uint64_t save_id, int64_t unix_ms) {
  return prefix + "pending/" + Step20(step) + "-" + Hex16(save_id) + "-" + std::to_string(unix_ms);
}

std::string RewriteDataPrefix(const std::string& prefix, const SaveRef& save, uint64_t rewrite_id) {
  return SaveDataPrefix(prefix, save.step, save.save_id) + Hex16(rewrite_id) + "/";
}

std::string RewriteMarkerKey(const std::string& prefix, const SaveRef& save, uint64_t rewrite_id) {
  return prefix + "rewrites/" + Step20(save.step) + "-" + Hex16(save.save_id) + "-" + Hex16(rewrite_id);
}

bool SaveOfDataObject(const std::string& prefix, std::string_view key, SaveRef* save) {
  const std::string data = prefix + "data/";
  if (key.size() <= data.size() || key.compare(0, data.size(), data) != 0) return false;
  key.remove_prefix(data.size());
  return key.size() > 38 && key[37] == '/' && ParseSaveRef(key, '/', save);
}

}  // namespace bucket
}  // namespace ckptdb
