#include "value_format.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace ckptdb::cli {

namespace {

template <typename T>
T Load(const Tensor& t, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(t.data()) + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

// Enough significant digits to tell values of the dtype apart.
int FloatDigits(DType d) { return d == DType::kF64 ? 17 : d == DType::kF32 ? 9 : 5; }

std::string FormatElement(const Tensor& t, int64_t i) {
  char buf[64];
  switch (t.dtype()) {
    case DType::kBool: return Load<uint8_t>(t, i) ? "True" : "False";
    case DType::kI64: std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(Load<int64_t>(t, i))); return buf;
    case DType::kI32: case DType::kI16: case DType::kI8: case DType::kU8:
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(ElementAsDouble(t, i)));
      return buf;
    default: {
      double v = ElementAsDouble(t, i);
      if (std::isnan(v)) return "nan";
      if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
      // Enough digits to tell values of the dtype apart.
      std::snprintf(buf, sizeof buf, "%.*g", FloatDigits(t.dtype()), v);
      return buf;
    }
  }
}

void FormatDim(const Tensor& t, size_t dim, int64_t base, bool summarise, int64_t edge, int indent, std::string* out) {
  const Shape& shape = t.shape();
  int64_t n = shape[dim];
  int64_t stride = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d) stride *= shape[d];
  out->push_back('[');
  std::vector<int64_t> idx;
  bool skip = summarise && n > 2 * edge;
  for (int64_t i = 0; i < n; ++i) {
    if (skip && i == edge) {
      idx.push_back(-1);
      i = n - edge - 1;
      continue;
    }
    idx.push_back(i);
  }
  for (size_t k = 0; k < idx.size(); ++k) {
    if (k) {
      out->push_back(',');
      if (dim + 1 == shape.size()) {
        out->push_back(' ');
      } else {
        out->append(shape.size() - dim - 1, '\n');
        out->append(indent + 1, ' ');
      }
    }
    if (idx[k] < 0) {
      out->append("...");
      continue;
    }
    if (dim + 1 == shape.size()) {
      out->append(FormatElement(t, base + idx[k]));
    } else {
      FormatDim(t, dim + 1, base + idx[k] * stride, summarise, edge, indent + 1, out);
    }
  }
  out->push_back(']');
}

std::string FormatElementJson(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kBool: return Load<uint8_t>(t, i) ? "true" : "false";
    case DType::kI64: case DType::kI32: case DType::kI16: case DType::kI8: case DType::kU8:
      return FormatElement(t, i);
    default: {
      double v = ElementAsDouble(t, i);
      if (std::isnan(v)) return "NaN";
      if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.*g", FloatDigits(t.dtype()), v);
      return buf;
    }
  }
}

void FormatDimJson(const Tensor& t, size_t dim, int64_t base, std::string* out) {
  const Shape& shape = t.shape();
  int64_t stride = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d) stride *= shape[d];
  out->push_back('[');
  for (int64_t i = 0; i < shape[dim]; ++i) {
    if (i) out->append(", ");
    if (dim + 1 == shape.size()) {
      out->append(FormatElementJson(t, base + i));
    } else {
      FormatDimJson(t, dim + 1, base + i * stride, out);
    }
  }
  out->push_back(']');
}

}  // namespace

std::string FormatTensorJson(const Tensor& t) {
  if (t.dim() == 0) return FormatElementJson(t, 0);
  std::string out;
  FormatDimJson(t, 0, 0, &out);
  return out;
}

bool IsValidUtf8(const std::string& s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

std::string Base64Encode(const std::string& bytes) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t v = (uint32_t{static_cast<unsigned char>(bytes[i])} << 16) |
                 (uint32_t{static_cast<unsigned char>(bytes[i + 1])} << 8) | static_cast<unsigned char>(bytes[i + 2]);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(kAlphabet[(v >> 6) & 63]);
    out.push_back(kAlphabet[v & 63]);
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = uint32_t{static_cast<unsigned char>(bytes[i])} << 16;
    if (rest == 2) v |= uint32_t{static_cast<unsigned char>(bytes[i + 1])} << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

double ElementAsDouble(const Tensor& t, int64_t i) {
  return ElementToDouble(t.dtype(), static_cast<const char*>(t.data()) + i * static_cast<int64_t>(DTypeSize(t.dtype())));
}

std::string FormatTensor(const Tensor& t, int64_t threshold, int64_t edge) {
  if (t.dim() == 0) return FormatElement(t, 0);
  std::string out;
  FormatDim(t, 0, 0, t.numel() > threshold, edge, 0, &out);
  return out;
}

std::string EscapeBytes(const std::string& bytes, size_t limit) {
  std::string out;
  size_t n = std::min(bytes.size(), limit);
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f)) {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (n < bytes.size()) out += "... (" + std::to_string(bytes.size() - n) + " more bytes)";
  return out;
}

std::string FormatDouble(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

std::string ExactDouble(double v) {
  for (int digits = 6; digits < 17; ++digits) {
    std::string s = FormatDouble(v, digits);
    if (std::strtod(s.c_str(), nullptr) == v) return s;
  }
  return FormatDouble(v, 17);
}

std::string HumanBytes(uint64_t n) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  return buf;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  return out + "\"";
}

}  // namespace ckptdb::cli
