// Formatting tensor values for people: numpy-like nested lists, summarised
// with "..." when large, one number format per dtype.
#ifndef CKPTDB_TOOLS_VALUE_FORMAT_H_
#define CKPTDB_TOOLS_VALUE_FORMAT_H_

#include <cstdint>
#include <string>

#include "ckptdb/tensor.h"

namespace ckptdb::cli {

// The element at `index` (row-major) of `t` as a double (exact for every
// dtype except i64 beyond 2^53).
double ElementAsDouble(const Tensor& t, int64_t index);

// Like numpy's repr of an array: "[[1, 2], [3, 4]]" with line breaks per row;
// when t has more than `threshold` elements, each dimension shows its first
// and last `edge` items around "...".
std::string FormatTensor(const Tensor& t, int64_t threshold = 1000, int64_t edge = 3);

// Bytes for a terminal: printable ASCII as is, other bytes as \xNN.
std::string EscapeBytes(const std::string& bytes, size_t limit = 4096);

// "12.0 MiB"
std::string HumanBytes(uint64_t n);

// A double with `digits` significant digits (%g).
std::string FormatDouble(double v, int digits = 9);
// The shortest %g text that reads back as exactly `v` (0.1, not
// 0.10000000000000001).
std::string ExactDouble(double v);

// A JSON string literal.
std::string JsonString(const std::string& s);

// Every element of `t` as nested JSON arrays (a bare value when 0-d):
// integers as integers, bool as true/false, floats with enough digits to
// round-trip the dtype; NaN and infinities as NaN, Infinity and -Infinity,
// as Python's json module writes them.
std::string FormatTensorJson(const Tensor& t);

// Whether `s` is valid UTF-8 (no overlong forms, no surrogates).
bool IsValidUtf8(const std::string& s);

// Standard base64 (RFC 4648, with '=' padding).
std::string Base64Encode(const std::string& bytes);

}  // namespace ckptdb::cli

#endif  // CKPTDB_TOOLS_VALUE_FORMAT_H_
