#include "util/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace ckptdb {

namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78u;

std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1) ? kPolyReflected : 0);
    t[i] = c;
  }
  return t;
}

uint32_t Software(const unsigned char* p, size_t n, uint32_t c) {
  static const std::array<uint32_t, 256> table = MakeTable();
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
// One stream of 8-byte steps: the instruction's 3-cycle latency bounds it
// at ~8 GB/s here, 0.03 s for 256 MiB (the SHA-256 it replaces: ~2 GB/s).
__attribute__((target("sse4.2"))) uint32_t Hardware(const unsigned char* p, size_t n, uint32_t c) {
  uint64_t c64 = c;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c64 = _mm_crc32_u8(static_cast<uint32_t>(c64), *p++);
    --n;
  }
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c64);
  while (n > 0) {
    c32 = _mm_crc32_u8(c32, *p++);
    --n;
  }
  return c32;
}

bool HasSse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  if (HasSse42()) return ~Hardware(p, n, c);
#endif
  return ~Software(p, n, c);
}

std::string Crc32cBase64(std::string_view data) {
  const uint32_t c = Crc32c(data.data(), data.size());
  const unsigned char b[4] = {static_cast<unsigned char>(c >> 24), static_cast<unsigned char>(c >> 16),
                              static_cast<unsigned char>(c >> 8), static_cast<unsigned char>(c)};
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  // 4 bytes: one full group of 3 and one of 1 ("==").
  const uint32_t g = (uint32_t{b[0]} << 16) | (uint32_t{b[1]} << 8) | b[2];
  out += kAlphabet[(g >> 18) & 63];
  out += kAlphabet[(g >> 12) & 63];
  out += kAlphabet[(g >> 6) & 63];
  out += kAlphabet[g & 63];
  out += kAlphabet[b[3] >> 2];
  out += kAlphabet[(b[3] & 3) << 4];
  out += "==";
  return out;
}

}  // namespace ckptdb
