// Base-128 varints (7 bits a byte, least significant first, the high bit set
// on every byte but the last), as protobuf and RocksDB write them: the
// bucket objects' block-starts property (bucket/block_starts.cc) and the
// entries of the blocks of their SST files (store/block_per_key_table.cc).
#ifndef CKPTDB_SRC_UTIL_VARINT_H_
#define CKPTDB_SRC_UTIL_VARINT_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace ckptdb {

// Writes v at p (VarintBytes(v) bytes); returns the byte after it.
inline char* EncodeVarint(char* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

inline void PutVarint(std::string* out, uint64_t v) {
  char buf[10];
  out->append(buf, static_cast<size_t>(EncodeVarint(buf, v) - buf));
}

// Reads one from the front of *in (and drops it); false when *in ends first
// or it runs past 64 bits.
inline bool GetVarint(std::string_view* in, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && !in->empty(); shift += 7) {
    const auto b = static_cast<unsigned char>(in->front());
    in->remove_prefix(1);
    *v |= uint64_t{b & 0x7fu} << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// The bytes PutVarint writes for v.
inline uint64_t VarintBytes(uint64_t v) {
  uint64_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}

}  // namespace ckptdb

#endif  // CKPTDB_SRC_UTIL_VARINT_H_
