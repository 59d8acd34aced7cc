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
// One stream of 8-byte steps: each waits for the one before (the
// instruction's 3-cycle latency), ~8 GB/s here.
__attribute__((target("sse4.2"))) uint32_t OneStream(const unsigned char* p, size_t n, uint32_t c) {
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

// Three streams at once, over the thirds of each stripe of 3 x kStripe
// bytes: the instruction issues one a cycle, so three chains keep it busy
// (about 3x one stream's rate). The thirds' CRCs are joined by the CRC
// register's linearity: feeding bytes d to a register r leaves Zeros(r) ^
// (d fed to 0), where Zeros(r) is r after kStripe zero bytes, a linear map
// of r's 32 bits (kept as four byte tables).
// Shorter inputs (a box's rows of a few KiB, lent to an upload part one by
// one) go three streams at once over stripes of kShortStripe.
constexpr size_t kStripe = 4096;
constexpr size_t kShortStripe = 256;

struct ZerosTable {
  uint32_t t[4][256];
};

__attribute__((target("sse4.2"))) ZerosTable MakeZerosTable(size_t stripe) {
  ZerosTable z{};
  static const unsigned char zeros[kStripe] = {};
  uint32_t basis[32];
  for (int b = 0; b < 32; ++b) basis[b] = OneStream(zeros, stripe, 1u << b);
  for (int k = 0; k < 4; ++k) {
    for (uint32_t v = 0; v < 256; ++v) {
      uint32_t r = 0;
      for (int b = 0; b < 8; ++b) {
        if ((v >> b) & 1) r ^= basis[8 * k + b];
      }
      z.t[k][v] = r;
    }
  }
  return z;
}

uint32_t Zeros(const ZerosTable& z, uint32_t r) {
  return z.t[0][r & 0xFF] ^ z.t[1][(r >> 8) & 0xFF] ^ z.t[2][(r >> 16) & 0xFF] ^ z.t[3][r >> 24];
}

// Feeds the whole stripes of 3 x `stripe` bytes at p to c, three streams at
// once; advances p and n past them.
template <size_t stripe>
__attribute__((target("sse4.2"), always_inline)) inline uint32_t Stripes(const ZerosTable& zeros,
                                                                         const unsigned char*& p, size_t& n,
                                                                         uint32_t c) {
  while (n >= 3 * stripe) {
    uint64_t a = c, b = 0, d = 0;
    for (size_t i = 0; i < stripe; i += 8) {
      uint64_t x, y, w;
      std::memcpy(&x, p + i, 8);
      std::memcpy(&y, p + stripe + i, 8);
      std::memcpy(&w, p + 2 * stripe + i, 8);
      a = _mm_crc32_u64(a, x);
      b = _mm_crc32_u64(b, y);
      d = _mm_crc32_u64(d, w);
    }
    c = Zeros(zeros, Zeros(zeros, static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b)) ^ static_cast<uint32_t>(d);
    p += 3 * stripe;
    n -= 3 * stripe;
  }
  return c;
}

__attribute__((target("sse4.2"))) uint32_t Hardware(const unsigned char* p, size_t n, uint32_t c) {
  static const ZerosTable zeros = MakeZerosTable(kStripe);
  static const ZerosTable short_zeros = MakeZerosTable(kShortStripe);
  c = Stripes<kStripe>(zeros, p, n, c);
  c = Stripes<kShortStripe>(short_zeros, p, n, c);
  return OneStream(p, n, c);
}

bool HasSse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#else
uint32_t (*const OneStream)(const unsigned char*, size_t, uint32_t) = nullptr;
uint32_t (*const Hardware)(const unsigned char*, size_t, uint32_t) = nullptr;
#endif

// The CRC of data[0, n) after `crc`: by `hardware` where the CPU has the
// instruction, else by the table.
uint32_t Compute(const void* data, size_t n, uint32_t crc,
                 [[maybe_unused]] uint32_t (*hardware)(const unsigned char*, size_t, uint32_t)) {
  const auto* p = static_cast<const unsigned char*>(data);
  const uint32_t c = ~crc;
#if defined(__x86_64__)
  if (HasSse42()) return ~hardware(p, n, c);
#endif
  return ~Software(p, n, c);
}

// a * b modulo the polynomial, both as reflected polynomials (bit 31 is
// x^0): zlib's multmodp.
uint32_t MultModP(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPolyReflected : b >> 1;
  }
  return p;
}

// x^(8 n) modulo the polynomial: what n zero bytes do to a register.
uint32_t ZeroBytesOperator(uint64_t n) {
  static const std::array<uint32_t, 64> x2k = [] {  // x^(2^k)
    std::array<uint32_t, 64> t{};
    t[0] = 1u << 30;  // x^1
    for (size_t k = 1; k < t.size(); ++k) t[k] = MultModP(t[k - 1], t[k - 1]);
    return t;
  }();
  uint32_t p = 1u << 31;  // x^0
  for (size_t k = 3; n != 0; n >>= 1, ++k) {
    if (n & 1) p = MultModP(x2k[k], p);
  }
  return p;
}

}  // namespace

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  // (Pieces come in runs of one length, a box's rows: the operator of the
  // last length is kept.)
  thread_local uint64_t last_len = 0;
  thread_local uint32_t last_op = 1u << 31;
  if (len_b != last_len) {
    last_op = ZeroBytesOperator(len_b);
    last_len = len_b;
  }
  return MultModP(last_op, crc_a) ^ crc_b;
}

uint32_t Crc32cOneStream(const void* data, size_t n, uint32_t crc) { return Compute(data, n, crc, OneStream); }

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) { return Compute(data, n, crc, Hardware); }

std::string Crc32cBase64(std::string_view data) { return Crc32cToBase64(Crc32c(data.data(), data.size())); }

std::string Crc32cToBase64(uint32_t c) {
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
