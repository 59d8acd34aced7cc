// Bytes as lowercase hex, two digits a byte: SigV4's hashes and signatures
// (s3/sigv4.cc), keys in a bucket store's upload records and in errors.
#ifndef CKPTDB_SRC_UTIL_HEX_H_
#define CKPTDB_SRC_UTIL_HEX_H_

#include <string>
#include <string_view>

namespace ckptdb {

inline std::string HexEncode(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

}  // namespace ckptdb

#endif  // CKPTDB_SRC_UTIL_HEX_H_
