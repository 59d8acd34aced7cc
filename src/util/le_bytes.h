// Little-endian fixed-width integers in byte buffers: the chunk header
// (format/chunk_codec.cc) and the messages ranks send each other
// (comm/gloo_communicator.cc, comm/transfer.cc, store/remote_reader.cc), and
// the bucket store's records (bucket/).
#ifndef CKPTDB_SRC_UTIL_LE_BYTES_H_
#define CKPTDB_SRC_UTIL_LE_BYTES_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace ckptdb {

inline void PutLE32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
inline void PutLE64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
inline uint32_t GetLE32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
inline uint64_t GetLE64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// Appends v to *out.
inline void AppendLE32(std::string* out, uint32_t v) {
  char b[4];
  PutLE32(b, v);
  out->append(b, 4);
}
inline void AppendLE64(std::string* out, uint64_t v) {
  char b[8];
  PutLE64(b, v);
  out->append(b, 8);
}
// Takes a u32 off the front of *in; false when fewer than 4 bytes are left.
inline bool ConsumeLE32(std::string_view* in, uint32_t* v) {
  if (in->size() < 4) return false;
  *v = GetLE32(in->data());
  in->remove_prefix(4);
  return true;
}
// Takes a u64 off the front of *in; false when fewer than 8 bytes are left.
inline bool ConsumeLE64(std::string_view* in, uint64_t* v) {
  if (in->size() < 8) return false;
  *v = GetLE64(in->data());
  in->remove_prefix(8);
  return true;
}

// Appends a u32 length and the bytes of s.
inline void AppendLEString(std::string* out, std::string_view s) {
  AppendLE32(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}

// Reads what the functions above append, front to back; each call returns
// false (consuming nothing more) when the bytes left are too few.
class LECursor {
 public:
  explicit LECursor(std::string_view s) : s_(s) {}
  bool U32(uint32_t* v) { return ConsumeLE32(&s_, v); }
  bool U64(uint64_t* v) { return ConsumeLE64(&s_, v); }
  // A u32 length and that many bytes (AppendLEString).
  bool String(std::string* out) {
    uint32_t n = 0;
    if (!U32(&n) || n > s_.size()) return false;
    out->assign(s_.substr(0, n));
    s_.remove_prefix(n);
    return true;
  }
  bool Bytes(size_t n, std::string_view* out) {
    if (n > s_.size()) return false;
    *out = s_.substr(0, n);
    s_.remove_prefix(n);
    return true;
  }
  bool empty() const { return s_.empty(); }

 private:
  std::string_view s_;
};

}  // namespace ckptdb

#endif  // CKPTDB_SRC_UTIL_LE_BYTES_H_
