// Lands the raw chunks of a run of an SST object's data blocks (one ranged
// GET: SstObjectSource's runs) straight in their destinations as the bytes
// arrive, instead of fetching the run into a window that RocksDB then parses
// and the reader copies out of: a load of raw chunks from a bucket writes
// each byte once, where it belongs, and faults in no window's pages.
//
// An SST object holds one chunk a data block (SstObjectWriteOptions), and
// its block-starts property says where each block lies, so a raw chunk of a
// known size has a known layout (RocksDB 7's block-based table, format
// version 5, binary-search data blocks; proto/FORMAT.md §9):
//
//   block contents: varint32 0 (bytes shared with the previous key)
//                   varint32 key bytes, varint32 value bytes
//                   the internal key: the chunk's key, then 8 bytes
//                   (sequence number << 8 | type, little-endian; type 1)
//                   the value: the chunk's 16-byte header, its raw bytes
//                   fixed32 0, fixed32 1 (one restart point, at 0)
//   trailer:        1 byte 0 (no compression), fixed32 the low 32 bits of
//                   the contents' XXH3-64 (a kXXH3 block checksum)
//
// The bytes before a chunk's raw bytes and after them are kept here; the raw
// bytes go to the destination. A chunk counts as landed only once all of it
// checks out: the layout above, its key, the chunk header (raw, no filter,
// the size asked for), the block checksum and the chunk's own checksum
// (XXH3-64 of its raw bytes), both computed as the bytes pass. Anything else
// (a compressed chunk, a block of another size or layout, a damaged byte, a
// property that misplaced the block) is not landed: its block's bytes, as
// they came, go to the run's spill buffer at their place in the run, where
// RocksDB reads and verifies them as from any window (ObjectFileSystem's),
// and the reader then delivers that chunk as any other. A destination may so
// hold bytes of a chunk that did not land: the reader writes the chunk there
// again.
#ifndef CKPTDB_SRC_BUCKET_BLOCK_LANDING_H_
#define CKPTDB_SRC_BUCKET_BLOCK_LANDING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "s3/http_client.h"

namespace ckptdb {
namespace bucket {

// A data block of the run, and where its chunk's raw bytes go.
struct LandingBlock {
  uint64_t begin = 0, end = 0;  // the block in the object, trailer included
  std::string key;              // the chunk's key (EncodeDataKey)
  uint64_t raw_bytes = 0;
  // Raw byte x goes to dest + (x / run_bytes) * stride + x % run_bytes
  // (ChunkLanding's place).
  char* dest = nullptr;
  uint64_t run_bytes = 0, stride = 0;
};

class BlockLanding : public s3::HttpBodyStream {
 public:
  // `blocks`: adjacent and in the object's order, each with a destination
  // or none (a null dest: spilled whole); the run is [blocks.front().begin,
  // blocks.back().end). `spill` is called
  // at most once, when the first block that does not land needs room: it
  // returns a buffer of the run's size, indexed from the run's first byte.
  BlockLanding(std::vector<LandingBlock> blocks, std::function<char*()> spill);
  ~BlockLanding() override;

  // The run's bytes [at, at + n), in order; `at` 0 again starts over (a
  // retried GET). False (the GET is stopped and fails, Why() saying why)
  // when they come out of order or room for them cannot be had.
  bool Write(uint64_t at, const char* data, size_t n) override;
  std::string Why() const override { return why_; }

  // After the whole run was written: whether block i's chunk landed (see
  // above). A block that did not lies in the spill buffer, as it came.
  bool Landed(size_t i) const { return state_[i].landed; }

 private:
  // Where block i's raw bytes begin in it (the bytes before them), or 0 when
  // its size is not that of one raw chunk of raw_bytes under its key.
  static uint64_t HeadBytes(const LandingBlock& b);
  // Hands the next n bytes of the run to the blocks they belong to.
  void Consume(const char* data, size_t n);
  // Hands block `cur_` the bytes [from, from + n) of it.
  void Take(uint64_t from, const char* data, size_t n);
  // Copies block cur_'s raw bytes [x, x + n) to their places, or (back)
  // from them into `out`.
  void Place(uint64_t x, const char* data, size_t n) const;
  void Gather(char* out) const;
  // Block cur_ has all its bytes: checks it; a block that fails goes to the
  // spill buffer.
  void Finish();
  char* Spill();
  void Reset();

  struct State {
    uint64_t head = 0;  // bytes before the raw ones; 0: the block is spilled whole
    bool landed = false;
  };
  std::vector<LandingBlock> blocks_;
  std::vector<State> state_;
  std::function<char*()> spill_fn_;
  char* spill_ = nullptr;
  std::string why_;   // what stopped Write
  uint64_t pos_ = 0;  // run bytes written so far
  size_t cur_ = 0;    // the block pos_ lies in
  std::string head_, tail_;  // cur_'s bytes before and after its raw ones
  struct Hashes;
  std::unique_ptr<Hashes> hashes_;  // cur_'s block and chunk XXH3 states
};

}  // namespace bucket
}  // namespace ckptdb

#endif  // CKPTDB_SRC_BUCKET_BLOCK_LANDING_H_
