#include "ckptdb/tensor.h"

#include <cstdlib>
#include <cstring>
#include <limits>

namespace ckptdb {

StatusOr<int64_t> NumElements(const Shape& shape) {
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t d = shape[i];
    if (d < 0) {
      return Status::InvalidArgument("shape " + ShapeToString(shape) + " has a negative dimension " +
                                     std::to_string(d) + " at index " + std::to_string(i));
    }
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
      return Status::InvalidArgument("shape " + ShapeToString(shape) + " has too many elements");
    }
    n *= d;
  }
  return n;
}

std::string ShapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {
// Checks the dtype (one of the enum's values), the shape, and that numel *
// element size fits in memory sizes.
StatusOr<int64_t> CheckedNumel(DType dtype, const Shape& shape) {
  auto known = DTypeFromNumber(static_cast<int>(dtype));
  if (!known.ok()) return known.status().WithContext("tensor of shape " + ShapeToString(shape));
  auto n = NumElements(shape);
  if (!n.ok()) return n.status();
  if (*n > static_cast<int64_t>(std::numeric_limits<int64_t>::max() / 8)) {
    return Status::InvalidArgument("shape " + ShapeToString(shape) + " needs more bytes than can be addressed");
  }
  return *n;
}
}  // namespace

Tensor::Tensor() = default;

StatusOr<Tensor> Tensor::Zeros(DType dtype, Shape shape) {
  auto n = CheckedNumel(dtype, shape);
  if (!n.ok()) return n.status();
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = *n;
  size_t bytes = t.nbytes();
  // calloc: zero pages are mapped lazily, so large zero tensors are cheap.
  void* p = std::calloc(bytes == 0 ? 1 : bytes, 1);
  if (p == nullptr) {
    return Status::Unavailable("cannot allocate " + std::to_string(bytes) + " bytes for a tensor of shape " +
                               ShapeToString(t.shape_));
  }
  t.storage_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  t.data_ = p;
  return t;
}

StatusOr<Tensor> Tensor::Copy(DType dtype, Shape shape, const void* data, size_t nbytes) {
  auto t = Zeros(dtype, std::move(shape));
  if (!t.ok()) return t.status();
  if (nbytes != t->nbytes()) {
    return Status::InvalidArgument("Tensor::Copy: " + std::to_string(nbytes) + " bytes given, but " +
                                   DTypeName(dtype) + ShapeToString(t->shape()) + " needs " +
                                   std::to_string(t->nbytes()));
  }
  if (nbytes) std::memcpy(t->data(), data, nbytes);
  return t;
}

StatusOr<Tensor> Tensor::View(DType dtype, Shape shape, void* data, size_t buffer_bytes, Device device) {
  auto n = CheckedNumel(dtype, shape);
  if (!n.ok()) return n.status();
  size_t need = static_cast<size_t>(*n) * DTypeSize(dtype);
  if (buffer_bytes < need) {
    return Status::InvalidArgument("buffer of " + std::to_string(buffer_bytes) + " bytes is smaller than the " +
                                   std::to_string(need) + " bytes a " + DTypeName(dtype) + " tensor of shape " +
                                   ShapeToString(shape) + " needs");
  }
  if (data == nullptr && need > 0) {
    return Status::InvalidArgument(std::string("null data pointer for a ") + DTypeName(dtype) + " tensor of shape " +
                                   ShapeToString(shape));
  }
  if (device.kind == Device::Kind::kCUDA && device.index < 0) {
    return Status::InvalidArgument("invalid device " + device.ToString());
  }
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = *n;
  t.device_ = device;
  t.data_ = data;
  return t;
}

bool Tensor::BitwiseEquals(const Tensor& other) const {
  if (dtype_ != other.dtype_ || shape_ != other.shape_) return false;
  if (!device_.is_cpu() || !other.device_.is_cpu()) return false;
  size_t n = nbytes();
  return n == 0 || std::memcmp(data_, other.data_, n) == 0;
}

}  // namespace ckptdb
