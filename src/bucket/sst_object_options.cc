#include "bucket/sst_object_options.h"

#include <rocksdb/flush_block_policy.h>
#include <rocksdb/table.h>

#include "bucket/block_starts.h"
#include "store/rocksdb_options.h"

namespace ckptdb {
namespace bucket {

namespace {

// Closes the data block before every key but a file's first (RocksDB's own
// EveryKey policy is not in its public headers). The table builder asks
// before adding each key; the first key finds the block empty, and flushing
// an empty block is not asked for.
class EveryKeyPolicy : public rocksdb::FlushBlockPolicy {
 public:
  bool Update(const rocksdb::Slice& /*key*/, const rocksdb::Slice& /*value*/) override {
    const bool flush = !first_;
    first_ = false;
    return flush;
  }

 private:
  bool first_ = true;
};

class EveryKeyPolicyFactory : public rocksdb::FlushBlockPolicyFactory {
 public:
  const char* Name() const override { return "CkptdbEveryKeyPolicyFactory"; }
  rocksdb::FlushBlockPolicy* NewFlushBlockPolicy(const rocksdb::BlockBasedTableOptions& /*table_options*/,
                                                 const rocksdb::BlockBuilder& /*data_block_builder*/) const override {
    return new EveryKeyPolicy();
  }
};

rocksdb::BlockBasedTableOptions TableOptionsOf(const rocksdb::Options& o) {
  const auto* table = o.table_factory->GetOptions<rocksdb::BlockBasedTableOptions>();
  return table != nullptr ? *table : rocksdb::BlockBasedTableOptions();
}

}  // namespace

rocksdb::Options SstObjectWriteOptions() {
  rocksdb::Options o = DatabaseOptions();
  rocksdb::BlockBasedTableOptions table = TableOptionsOf(o);
  table.flush_block_policy_factory = std::make_shared<EveryKeyPolicyFactory>();
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  o.table_properties_collector_factories.push_back(NewBlockStartsCollectorFactory());
  return o;
}

rocksdb::Options SstObjectReadOptions(rocksdb::Env* env) {
  rocksdb::Options o = DatabaseOptions();
  rocksdb::BlockBasedTableOptions table = TableOptionsOf(o);
  table.max_auto_readahead_size = 0;
  table.no_block_cache = true;
  table.block_cache.reset();
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  o.env = env;
  return o;
}

}  // namespace bucket
}  // namespace ckptdb
