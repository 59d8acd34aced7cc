// Element types of tensors.
//
// The numeric values of DType are persisted in every step's metadata
// (proto/ckptdb.proto mirrors them): they never change, new types get new
// numbers.
#ifndef CKPTDB_DTYPE_H_
#define CKPTDB_DTYPE_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "ckptdb/status.h"

namespace ckptdb {

enum class DType : int {
  kF64 = 1,
  kF32 = 2,
  kF16 = 3,
  kBF16 = 4,
  kF8E4M3 = 5,  // float8 e4m3fn (no infinities, as in PyTorch's float8_e4m3fn)
  kF8E5M2 = 6,
  kI64 = 7,
  kI32 = 8,
  kI16 = 9,
  kI8 = 10,
  kU8 = 11,
  kBool = 12,
};

// Every DType, in the order above.
inline constexpr DType kAllDTypes[] = {
    DType::kF64, DType::kF32,    DType::kF16,    DType::kBF16, DType::kF8E4M3, DType::kF8E5M2,
    DType::kI64, DType::kI32,    DType::kI16,    DType::kI8,   DType::kU8,     DType::kBool};

// Bytes per element.
size_t DTypeSize(DType dtype);
// Short name: "f64" "f32" "f16" "bf16" "f8e4m3" "f8e5m2" "i64" "i32" "i16"
// "i8" "u8" "bool".
const char* DTypeName(DType dtype);
// Inverse of DTypeName; also accepts PyTorch-style names ("float32",
// "bfloat16", "int64", ...). InvalidArgument naming `name` otherwise.
StatusOr<DType> ParseDType(std::string_view name);
// The DType with persisted number `value`, or InvalidArgument ("unknown dtype
// 42 (...)"). Also how a DType argument is checked: a value cast from an
// integer outside the enum is refused by every function that takes a DType
// and returns a Status.
StatusOr<DType> DTypeFromNumber(int value);
bool IsFloatingPoint(DType dtype);

// The value of one element of `dtype` at `element` as a double (exact for
// every dtype except i64 beyond 2^53).
double ElementToDouble(DType dtype, const void* element);

// Converts `n` elements from `from` at src to `to` at dst (the buffers do not
// overlap). Floating-point targets round to nearest, ties to even, once
// (an i64 beyond 2^53 is rounded straight to the target's precision, not
// through f64 first); values beyond the target's range become +-inf (f8e4m3,
// which has no infinity: NaN, as PyTorch does). Integer targets truncate
// toward zero and saturate; NaN becomes 0. bool: any non-zero value is true.
void ConvertElements(DType from, const void* src, DType to, void* dst, size_t n);

}  // namespace ckptdb

#endif  // CKPTDB_DTYPE_H_
