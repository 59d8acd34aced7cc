#include "store/unused_chunk_filter.h"

#include <algorithm>

namespace ckptdb {

void UnusedChunkFilter::Arm(std::vector<KeyRange> ranges) {
  std::lock_guard<std::mutex> lock(mu_);
  ranges_ = std::move(ranges);
}

void UnusedChunkFilter::Disarm() {
  std::lock_guard<std::mutex> lock(mu_);
  ranges_.clear();
}

rocksdb::CompactionFilter::Decision UnusedChunkFilter::FilterV2(int /*level*/, const rocksdb::Slice& key,
                                                                ValueType value_type,
                                                                const rocksdb::Slice& /*existing_value*/,
                                                                std::string* /*new_value*/,
                                                                std::string* skip_until) const {
  if (value_type != ValueType::kValue) return Decision::kKeep;
  std::lock_guard<std::mutex> lock(mu_);
  if (ranges_.empty()) return Decision::kKeep;
  const std::string_view k = key.ToStringView();
  // The last range starting at or before `key`.
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), k,
                             [](std::string_view v, const KeyRange& r) { return v < r.first; });
  if (it == ranges_.begin()) return Decision::kKeep;
  --it;
  if (k >= it->second) return Decision::kKeep;
  // The rest of the range goes unread: its values are never needed.
  *skip_until = it->second;
  return Decision::kRemoveAndSkipUntil;
}

}  // namespace ckptdb
