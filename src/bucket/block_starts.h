// Where each chunk's data block starts in an SST object: a table property
// that SST objects carry (SstObjectWriteOptions() adds its collector), read
// with the object's cached tail, so that a load can fetch the blocks of
// adjacent chunks by one ranged GET instead of one each (SstObjectSource's
// PlanRuns).
//
// The property "ckptdb.block-starts" lists every key of the file in order
// with the offset of the data block that holds it: RocksDB's table builder
// hands a properties collector each key with the file's size at that moment,
// which is where the key's block starts once the block before it is closed
// (every key is a block of its own in an SST object; keys that share a
// block, as in the local store's files, share its offset). A block ends
// where the next one starts; the last one at the table's data_size. Layout:
// one format byte (1), then per key varint32 bytes shared with the previous
// key, varint32 bytes not shared, those bytes, and varint64 the offset's
// increase over the previous key's.
//
// Nothing relies on it for correctness: a read still goes through RocksDB's
// own index and block checksums, and bytes fetched ahead are used only where
// the block RocksDB asks for lies inside them (ObjectFileSystem's windows).
// A wrong or missing property costs requests, never data.
#ifndef CKPTDB_SRC_BUCKET_BLOCK_STARTS_H_
#define CKPTDB_SRC_BUCKET_BLOCK_STARTS_H_

#include <rocksdb/table_properties.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckptdb {
namespace bucket {

inline constexpr char kBlockStartsProperty[] = "ckptdb.block-starts";

// The collector's factory, for Options::table_properties_collector_factories.
std::shared_ptr<rocksdb::TablePropertiesCollectorFactory> NewBlockStartsCollectorFactory();

// A file's keys and the byte range of the block that holds each.
class BlockStarts {
 public:
  // The property's value, checked against the table's data_size (its data
  // blocks are [0, data_size)): nullopt when it is malformed, out of order
  // or outside the data blocks.
  static std::optional<BlockStarts> Parse(std::string_view property, uint64_t data_size);

  // The index of `key` among the file's keys, or -1 when it holds none.
  int64_t Find(std::string_view key) const;
  // The block holding key i: [begin, end).
  const std::string& Key(size_t i) const { return keys_[i]; }
  uint64_t Begin(size_t i) const { return offsets_[i]; }
  uint64_t End(size_t i) const;
  size_t size() const { return keys_.size(); }

 private:
  std::vector<std::string> keys_;
  std::vector<uint64_t> offsets_;
  uint64_t data_size_ = 0;
};

}  // namespace bucket
}  // namespace ckptdb

#endif  // CKPTDB_SRC_BUCKET_BLOCK_STARTS_H_
