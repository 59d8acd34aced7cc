#include "bucket/block_landing.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <utility>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "format/chunk_codec.h"
#include "util/le_bytes.h"
#include "store/block_per_key_table.h"

namespace ckptdb {
namespace bucket {

namespace {

constexpr uint64_t kSequenceBytes = 8;  // the internal key's sequence and type
constexpr uint8_t kNoCompression = 0;

}  // namespace

struct BlockLanding::Hashes {
  XXH3_state_t block;  // the block's contents
  XXH3_state_t chunk;  // the chunk's raw bytes
};

BlockLanding::BlockLanding(std::vector<LandingBlock> blocks, std::function<char*()> spill)
    : blocks_(std::move(blocks)),
      state_(blocks_.size()),
      spill_fn_(std::move(spill)),
      hashes_(std::make_unique<Hashes>()) {
  for (size_t i = 0; i < blocks_.size(); ++i) state_[i].head = HeadBytes(blocks_[i]);
}

BlockLanding::~BlockLanding() = default;

uint64_t BlockLanding::HeadBytes(const LandingBlock& b) {
  if (b.dest == nullptr || b.end < b.begin || b.run_bytes == 0 || b.stride < b.run_bytes) return 0;
  const uint64_t value = kChunkHeaderSize + b.raw_bytes;
  if (value > UINT32_MAX || b.key.size() + kSequenceBytes > UINT32_MAX) return 0;
  // (The layout BlockPerKeyTableWriter's blocks have: store/block_per_key_table.h.)
  const uint64_t head = DataBlockHeadSize(b.key.size(), value) + kChunkHeaderSize;
  if (b.end - b.begin != head + b.raw_bytes + kDataBlockTailBytes) return 0;
  return head;
}

char* BlockLanding::Spill() {
  if (spill_ == nullptr) spill_ = spill_fn_();
  return spill_;
}

void BlockLanding::Reset() {
  pos_ = 0;
  cur_ = 0;  // (Take starts each block's head and tail afresh)
  for (State& s : state_) s.landed = false;
}

bool BlockLanding::Write(uint64_t at, const char* data, size_t n) {
  if (at == 0 && pos_ != 0) Reset();
  if (at != pos_) {
    why_ = "bytes from " + std::to_string(at) + " came after " + std::to_string(pos_) + " of them";
    return false;
  }
  try {
    Consume(data, n);
  } catch (const std::bad_alloc&) {
    why_ = "no memory for the blocks that do not land";
    return false;
  }
  return true;
}

void BlockLanding::Consume(const char* data, size_t n) {
  const uint64_t run_begin = blocks_.front().begin;
  while (n > 0 && cur_ < blocks_.size()) {
    const LandingBlock& b = blocks_[cur_];
    const uint64_t from = run_begin + pos_ - b.begin;
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n, b.end - b.begin - from));
    Take(from, data, take);
    pos_ += take;
    data += take;
    n -= take;
    if (from + take == b.end - b.begin) {
      Finish();
      ++cur_;
    }
  }
}

void BlockLanding::Take(uint64_t from, const char* data, size_t n) {
  const LandingBlock& b = blocks_[cur_];
  const State& s = state_[cur_];
  if (s.head == 0) {  // not one raw chunk of its size: spilled whole
    std::memcpy(Spill() + (b.begin - blocks_.front().begin) + from, data, n);
    return;
  }
  if (from == 0) {
    head_.clear();
    tail_.clear();
    XXH3_64bits_reset(&hashes_->block);
    XXH3_64bits_reset(&hashes_->chunk);
  }
  const uint64_t raw_end = s.head + b.raw_bytes;
  const uint64_t contents_end = b.end - b.begin - kBlockTrailerBytes;
  while (n > 0) {
    size_t k;
    if (from < s.head) {
      k = static_cast<size_t>(std::min<uint64_t>(n, s.head - from));
      head_.append(data, k);
      XXH3_64bits_update(&hashes_->block, data, k);
    } else if (from < raw_end) {
      k = static_cast<size_t>(std::min<uint64_t>(n, raw_end - from));
      Place(from - s.head, data, k);
      XXH3_64bits_update(&hashes_->block, data, k);
      XXH3_64bits_update(&hashes_->chunk, data, k);
    } else {
      k = n;
      tail_.append(data, k);
      if (from < contents_end) {
        XXH3_64bits_update(&hashes_->block, data, static_cast<size_t>(std::min<uint64_t>(k, contents_end - from)));
      }
    }
    from += k;
    data += k;
    n -= k;
  }
}

void BlockLanding::Place(uint64_t x, const char* data, size_t n) const {
  const LandingBlock& b = blocks_[cur_];
  while (n > 0) {
    const uint64_t within = x % b.run_bytes;
    const size_t m = static_cast<size_t>(std::min<uint64_t>(n, b.run_bytes - within));
    std::memcpy(b.dest + (x / b.run_bytes) * b.stride + within, data, m);
    x += m;
    data += m;
    n -= m;
  }
}

void BlockLanding::Gather(char* out) const {
  const LandingBlock& b = blocks_[cur_];
  for (uint64_t x = 0; x < b.raw_bytes; x += b.run_bytes) {
    std::memcpy(out + x, b.dest + (x / b.run_bytes) * b.stride, std::min(b.run_bytes, b.raw_bytes - x));
  }
}

void BlockLanding::Finish() {
  const LandingBlock& b = blocks_[cur_];
  State& s = state_[cur_];
  if (s.head == 0) return;  // spilled as it came
  bool ok = head_.size() == s.head && tail_.size() == kDataBlockTailBytes;
  if (ok) {
    // The entry's lengths, key, sequence number and type: the bytes a save
    // writes for this key and value (store/block_per_key_table.h).
    const size_t entry = s.head - kChunkHeaderSize;
    std::string expected(entry, '\0');
    WriteDataBlockHead(b.key, kChunkHeaderSize + b.raw_bytes, expected.data());
    ok = std::memcmp(head_.data(), expected.data(), entry) == 0;
    if (ok) {
      // The chunk header as DecodeChunk wants a raw chunk's (chunk_codec.h).
      const char* header = head_.data() + entry;
      ok = static_cast<uint8_t>(header[0]) == kChunkVersion && header[1] == static_cast<char>(ChunkCodec::kRaw) &&
           header[2] == static_cast<char>(ChunkFilter::kNone) && header[3] == 0 && GetLE32(header + 4) == b.raw_bytes &&
           GetLE64(header + 8) == XXH3_64bits_digest(&hashes_->chunk);
    }
  }
  if (ok) {
    const char* t = tail_.data();
    ok = GetLE32(t) == 0 && GetLE32(t + 4) == 1 && static_cast<uint8_t>(t[kDataBlockRestartBytes]) == kNoCompression &&
         GetLE32(t + kDataBlockRestartBytes + 1) == static_cast<uint32_t>(XXH3_64bits_digest(&hashes_->block));
  }
  s.landed = ok;
  if (ok) return;
  // Not landed: the block as it came goes where RocksDB will read it.
  char* at = Spill() + (b.begin - blocks_.front().begin);
  std::memcpy(at, head_.data(), head_.size());
  Gather(at + head_.size());
  std::memcpy(at + head_.size() + b.raw_bytes, tail_.data(), tail_.size());
}

}  // namespace bucket
}  // namespace ckptdb
