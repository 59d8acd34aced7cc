#include "ckptdb/dtype.h"

#include "ckptdb/device.h"

namespace ckptdb {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF64: case DType::kI64: return 8;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: case DType::kI16: return 2;
    case DType::kF8E4M3: case DType::kF8E5M2: case DType::kI8: case DType::kU8: case DType::kBool: return 1;
  }
  return 1;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF64: return "f64";
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF8E4M3: return "f8e4m3";
    case DType::kF8E5M2: return "f8e5m2";
    case DType::kI64: return "i64";
    case DType::kI32: return "i32";
    case DType::kI16: return "i16";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kBool: return "bool";
  }
  return "unknown";
}

StatusOr<DType> ParseDType(std::string_view name) {
  struct Alias { const char* name; DType dtype; };
  static constexpr Alias kAliases[] = {
      {"float64", DType::kF64},      {"double", DType::kF64},       {"float32", DType::kF32},
      {"float", DType::kF32},        {"float16", DType::kF16},      {"half", DType::kF16},
      {"bfloat16", DType::kBF16},    {"float8_e4m3fn", DType::kF8E4M3}, {"float8_e5m2", DType::kF8E5M2},
      {"int64", DType::kI64},        {"long", DType::kI64},         {"int32", DType::kI32},
      {"int", DType::kI32},          {"int16", DType::kI16},        {"short", DType::kI16},
      {"int8", DType::kI8},          {"uint8", DType::kU8},         {"bool", DType::kBool},
  };
  for (DType d : kAllDTypes) {
    if (name == DTypeName(d)) return d;
  }
  for (const Alias& a : kAliases) {
    if (name == a.name) return a.dtype;
  }
  return Status::InvalidArgument("unknown dtype '" + std::string(name) +
                                 "' (expected one of f64 f32 f16 bf16 f8e4m3 f8e5m2 i64 i32 i16 i8 u8 bool)");
}

StatusOr<DType> DTypeFromNumber(int value) {
  for (DType d : kAllDTypes) {
    if (static_cast<int>(d) == value) return d;
  }
  return Status::InvalidArgument("unknown dtype " + std::to_string(value) + " (DType values are 1 (f64) to 12 (bool))");
}

bool IsFloatingPoint(DType dtype) {
  switch (dtype) {
    case DType::kF64: case DType::kF32: case DType::kF16: case DType::kBF16:
    case DType::kF8E4M3: case DType::kF8E5M2: return true;
    default: return false;
  }
}

std::string Device::ToString() const {
  return kind == Kind::kCPU ? std::string("cpu") : "cuda:" + std::to_string(index);
}

}  // namespace ckptdb
