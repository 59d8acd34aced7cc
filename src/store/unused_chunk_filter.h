// A RocksDB compaction filter that drops the data keys of chunks no step
// uses any more, while the writer rewrites a file that still holds chunks
// kept steps share (StoreWriter::ReclaimSpace; proto/FORMAT.md, "Reclaiming
// the space of unused chunks").
//
// A compaction sees only the range tombstones of its own input files; those
// of a delete sit in the small files flushed from the memtable, which span
// every data file, so a compaction that took them in would rewrite the whole
// store. Instead the writer compacts one data file alone and arms this filter
// with the key ranges of its unused chunks: keys that the delete which left
// them unused already range-deleted, so dropping them changes nothing a
// reader can see. Disarmed, it keeps every key.
#ifndef CKPTDB_SRC_STORE_UNUSED_CHUNK_FILTER_H_
#define CKPTDB_SRC_STORE_UNUSED_CHUNK_FILTER_H_

#include <rocksdb/compaction_filter.h>

#include <mutex>
#include <string>
#include <vector>

#include "store/shared_chunks.h"

namespace ckptdb {

// Thread-safe: RocksDB calls Filter from its compaction threads.
class UnusedChunkFilter final : public rocksdb::CompactionFilter {
 public:
  // From now on, drops every key inside `ranges` (sorted, disjoint). REQUIRES:
  // every key in them is invisible (range-deleted by a committed batch).
  void Arm(std::vector<KeyRange> ranges);
  // Keeps every key again.
  void Disarm();

  Decision FilterV2(int level, const rocksdb::Slice& key, ValueType value_type, const rocksdb::Slice& existing_value,
                    std::string* new_value, std::string* skip_until) const override;
  const char* Name() const override { return "ckptdb.UnusedChunkFilter"; }

 private:
  mutable std::mutex mu_;
  std::vector<KeyRange> ranges_;  // armed: sorted and disjoint
};

}  // namespace ckptdb

#endif  // CKPTDB_SRC_STORE_UNUSED_CHUNK_FILTER_H_
