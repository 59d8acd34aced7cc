// Element conversions between dtypes (include/ckptdb/dtype.h), including the
// 16- and 8-bit float formats that C++ has no type for.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "ckptdb/dtype.h"

namespace ckptdb {

namespace {

// A binary floating-point format with `ebits` exponent and `mbits` mantissa
// bits (the sign bit in front).
struct FloatFormat {
  int ebits;
  int mbits;
  bool has_inf;  // IEEE-style infinities and NaNs in the top exponent
};
constexpr FloatFormat kF16{5, 10, true};
constexpr FloatFormat kBF16{8, 7, true};
constexpr FloatFormat kE4M3{4, 3, false};  // e4m3fn: S.1111.111 is NaN, no inf
constexpr FloatFormat kE5M2{5, 2, true};

double Decode(const FloatFormat& f, uint32_t bits) {
  const int bias = (1 << (f.ebits - 1)) - 1;
  const uint32_t man_mask = (1u << f.mbits) - 1;
  const int exp_max = (1 << f.ebits) - 1;
  bool neg = (bits >> (f.ebits + f.mbits)) & 1;
  int e = static_cast<int>((bits >> f.mbits) & static_cast<uint32_t>(exp_max));
  uint32_t m = bits & man_mask;
  double v;
  if (f.has_inf && e == exp_max) {
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (!f.has_inf && e == exp_max && m == man_mask) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - bias - f.mbits);
  } else {
    v = std::ldexp(static_cast<double>(m | (1u << f.mbits)), e - bias - f.mbits);
  }
  return neg ? -v : v;
}

uint32_t Encode(const FloatFormat& f, double v) {
  const int bias = (1 << (f.ebits - 1)) - 1;
  const int exp_max = (1 << f.ebits) - 1;
  const uint32_t sign = std::signbit(v) ? 1u << (f.ebits + f.mbits) : 0;
  const uint32_t nan = f.has_inf ? (static_cast<uint32_t>(exp_max) << f.mbits) | (1u << (f.mbits - 1))
                                 : (static_cast<uint32_t>(exp_max) << f.mbits) | ((1u << f.mbits) - 1);
  const uint32_t overflow = f.has_inf ? static_cast<uint32_t>(exp_max) << f.mbits : nan;
  if (std::isnan(v)) return sign | nan;
  double a = std::fabs(v);
  if (std::isinf(a)) return sign | overflow;
  if (a == 0) return sign;
  // Largest finite magnitude's exponent field and mantissa.
  const int emax_field = f.has_inf ? exp_max - 1 : exp_max;
  const uint32_t mmax = f.has_inf ? (1u << f.mbits) - 1 : (1u << f.mbits) - 2;
  int e2;
  std::frexp(a, &e2);  // a = m * 2^e2, m in [0.5, 1)
  int field = e2 - 1 + bias;
  uint32_t m;
  if (field <= 0) {
    // Subnormal: units of 2^(1 - bias - mbits).
    double q = std::nearbyint(std::ldexp(a, f.mbits + bias - 1));
    m = static_cast<uint32_t>(q);
    field = 0;
    if (m >> f.mbits) {  // rounded up into the smallest normal
      field = 1;
      m &= (1u << f.mbits) - 1;
    }
  } else {
    double q = std::nearbyint(std::ldexp(a, f.mbits - (e2 - 1)));  // in [2^mbits, 2^(mbits+1)]
    m = static_cast<uint32_t>(q);
    if (m >> (f.mbits + 1)) {
      m >>= 1;
      ++field;
    }
    m &= (1u << f.mbits) - 1;
  }
  if (field > emax_field || (field == emax_field && m > mmax)) return sign | overflow;
  return sign | (static_cast<uint32_t>(field) << f.mbits) | m;
}

// Significant bits (the implicit leading one included) of a floating-point
// dtype; 0 for the others.
int SignificantBits(DType dtype) {
  switch (dtype) {
    case DType::kF64: return 53;
    case DType::kF32: return 24;
    case DType::kF16: return kF16.mbits + 1;
    case DType::kBF16: return kBF16.mbits + 1;
    case DType::kF8E4M3: return kE4M3.mbits + 1;
    case DType::kF8E5M2: return kE5M2.mbits + 1;
    default: return 0;
  }
}

// v rounded to nearest, ties to even, to `bits` significant bits (bits <= 53),
// in integer arithmetic. The result is exact in a double, so converting it on
// to a format with `bits` significant bits rounds no further: one rounding in
// all. (Via static_cast<double> an integer beyond 2^53 would be rounded
// twice, and be 1 ulp off when the first rounding lands on a tie.) Integers
// are never subnormal in any of the formats, so the precision is `bits`
// whatever the magnitude; overflow is left to the final conversion.
double RoundIntegerToBits(int64_t v, int bits) {
  const uint64_t a = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);  // |INT64_MIN| fits
  int len = 0;
  while (len < 64 && (a >> len) != 0) ++len;
  double r;
  if (len <= bits) {
    r = static_cast<double>(a);  // exact
  } else {
    const int shift = len - bits;
    uint64_t q = a >> shift;
    const uint64_t rest = a & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    if (rest > half || (rest == half && (q & 1) != 0)) ++q;  // q <= 2^bits
    r = std::ldexp(static_cast<double>(q), shift);
  }
  return v < 0 ? -r : r;
}

template <typename T>
T Load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
void Store(void* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

template <typename I>
I Saturate(double v) {
  if (std::isnan(v)) return 0;
  double t = std::trunc(v);
  if (t <= static_cast<double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (t >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(t);
}

void FromDouble(DType dtype, double v, void* out) {
  switch (dtype) {
    case DType::kF64: Store<double>(out, v); break;
    case DType::kF32: Store<float>(out, static_cast<float>(v)); break;
    case DType::kF16: Store<uint16_t>(out, static_cast<uint16_t>(Encode(kF16, v))); break;
    case DType::kBF16: Store<uint16_t>(out, static_cast<uint16_t>(Encode(kBF16, v))); break;
    case DType::kF8E4M3: Store<uint8_t>(out, static_cast<uint8_t>(Encode(kE4M3, v))); break;
    case DType::kF8E5M2: Store<uint8_t>(out, static_cast<uint8_t>(Encode(kE5M2, v))); break;
    case DType::kI64: Store<int64_t>(out, Saturate<int64_t>(v)); break;
    case DType::kI32: Store<int32_t>(out, Saturate<int32_t>(v)); break;
    case DType::kI16: Store<int16_t>(out, Saturate<int16_t>(v)); break;
    case DType::kI8: Store<int8_t>(out, Saturate<int8_t>(v)); break;
    case DType::kU8: Store<uint8_t>(out, Saturate<uint8_t>(v)); break;
    case DType::kBool: Store<uint8_t>(out, v != 0 ? 1 : 0); break;
  }
}

}  // namespace

double ElementToDouble(DType dtype, const void* p) {
  switch (dtype) {
    case DType::kF64: return Load<double>(p);
    case DType::kF32: return Load<float>(p);
    case DType::kF16: return Decode(kF16, Load<uint16_t>(p));
    case DType::kBF16: return Decode(kBF16, Load<uint16_t>(p));
    case DType::kF8E4M3: return Decode(kE4M3, Load<uint8_t>(p));
    case DType::kF8E5M2: return Decode(kE5M2, Load<uint8_t>(p));
    case DType::kI64: return static_cast<double>(Load<int64_t>(p));
    case DType::kI32: return Load<int32_t>(p);
    case DType::kI16: return Load<int16_t>(p);
    case DType::kI8: return Load<int8_t>(p);
    case DType::kU8: return Load<uint8_t>(p);
    case DType::kBool: return Load<uint8_t>(p) != 0 ? 1 : 0;
  }
  return 0;
}

void ConvertElements(DType from, const void* src, DType to, void* dst, size_t n) {
  const size_t fs = DTypeSize(from), ts = DTypeSize(to);
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  if (from == to) {
    std::memcpy(d, s, n * fs);
    return;
  }
  if (from == DType::kI64 && to == DType::kI32) {
    // Keep integers exact where a double would round (beyond 2^53).
    for (size_t i = 0; i < n; ++i) {
      int64_t v = Load<int64_t>(s + i * 8);
      Store<int32_t>(d + i * 4, static_cast<int32_t>(std::max<int64_t>(INT32_MIN, std::min<int64_t>(INT32_MAX, v))));
    }
    return;
  }
  if (from == DType::kI64 && IsFloatingPoint(to)) {
    const int bits = SignificantBits(to);
    for (size_t i = 0; i < n; ++i) FromDouble(to, RoundIntegerToBits(Load<int64_t>(s + i * 8), bits), d + i * ts);
    return;
  }
  // Every other source value is exact in a double: one rounding, in FromDouble.
  for (size_t i = 0; i < n; ++i) FromDouble(to, ElementToDouble(from, s + i * fs), d + i * ts);
}

}  // namespace ckptdb
