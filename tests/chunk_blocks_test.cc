// How the store lays chunks out in RocksDB data blocks (DatabaseOptions()):
// a small chunk never shares its block with a large one, so that reading it
// reads its own bytes, not its neighbour's.
#include <gtest/gtest.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/table.h>
#include <rocksdb/table_properties.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "ckptdb/ckptdb.h"
#include "format/keys.h"
#include "store/rocksdb_options.h"
#include "test_util.h"

namespace ckptdb {
namespace {

using testing::TempDir;

// Writes values of these sizes under consecutive data keys into one SST
// file with `o` and returns the file's number of data blocks.
uint64_t DataBlocksOf(const TempDir& dir, const std::vector<size_t>& sizes, const rocksdb::Options& o) {
  const std::string path = dir.Sub("blocks.sst");
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), o);
  EXPECT_TRUE(writer.Open(path).ok());
  for (size_t i = 0; i < sizes.size(); ++i) {
    DataKey k;
    k.step = 1;
    k.item = static_cast<uint32_t>(i);
    EXPECT_TRUE(writer.Put(EncodeDataKey(k), std::string(sizes[i], static_cast<char>('a' + i))).ok());
  }
  EXPECT_TRUE(writer.Finish().ok());
  rocksdb::SstFileReader reader(o);
  EXPECT_TRUE(reader.Open(path).ok());
  return reader.GetTableProperties()->num_data_blocks;
}

TEST(ChunkBlocks, ASmallChunkNeverSharesABlockWithALargeOne) {
  TempDir dir;
  // small, large, two small ones, large: blocks [s] [L] [s s] [L].
  const std::vector<size_t> sizes = {20, 1 << 20, 100, 200, 1 << 20};
  EXPECT_EQ(DataBlocksOf(dir, sizes, DatabaseOptions()), 4u);
  // RocksDB's default rule (a block closes once 90% full) puts each small
  // run in the large chunk's block: [s L] [s s L].
  rocksdb::Options defaults = DatabaseOptions();
  defaults.table_factory.reset(rocksdb::NewBlockBasedTableFactory(rocksdb::BlockBasedTableOptions()));
  EXPECT_EQ(DataBlocksOf(dir, sizes, defaults), 2u);
  // Small chunks still share blocks of up to 4 KiB among themselves (100
  // chunks of 60 bytes: about 6 KiB with their keys): a step of many tiny
  // pieces keeps a small index.
  EXPECT_LE(DataBlocksOf(dir, std::vector<size_t>(100, 60), DatabaseOptions()), 3u);
}

// Bytes this process has read through read(2) and pread(2) so far
// (/proc/self/io rchar).
uint64_t BytesReadByThisProcess() {
  std::ifstream in("/proc/self/io");
  std::string name;
  uint64_t value = 0;
  while (in >> name >> value) {
    if (name == "rchar:") return value;
  }
  ADD_FAILURE() << "no rchar in /proc/self/io";
  return 0;
}

// A scalar saved between two large tensors (as Adam's "step" sits between
// one parameter's moments and the next's): loading it alone reads its own
// block, not the next tensor's 4 MiB chunk.
TEST(ChunkBlocks, LoadingASmallEntryReadsItsOwnBytes) {
  TempDir dir;
  const std::string store = dir.Sub("store");
  StateDict saved;
  ASSERT_OK(saved.Add("a.exp_avg", testing::PatternTensor(DType::kF32, {1024, 1024}, 1)));
  ASSERT_OK(saved.Add("a.step", testing::PatternTensor(DType::kF32, {}, 2)));
  ASSERT_OK(saved.Add("b.exp_avg", testing::PatternTensor(DType::kF32, {1024, 1024}, 3)));
  {
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_OK(testing::SaveNoDist(saved, **w, 1));
  }
  ReaderOptions ro;
  ro.mmap_reads = false;  // reads go through pread and are counted
  auto r = OpenStoreReader(store, ro);
  ASSERT_TRUE(r.ok()) << r.status();
  StateDict step_only;
  ASSERT_OK(step_only.Add("a.step", testing::ZerosLike(std::get<Tensor>(*saved.Find("a.step")))));
  const uint64_t before = BytesReadByThisProcess();
  ASSERT_OK(testing::LoadNoDist(step_only, **r, 1));
  const uint64_t read = BytesReadByThisProcess() - before;
  EXPECT_TRUE(std::get<Tensor>(*step_only.Find("a.step")).BitwiseEquals(std::get<Tensor>(*saved.Find("a.step"))));
  // The step's records and the scalar's block: kilobytes, not the 4 MiB
  // chunk after it.
  EXPECT_LT(read, 256u << 10) << "loading a 4-byte entry read " << read << " bytes";
}

}  // namespace
}  // namespace ckptdb
