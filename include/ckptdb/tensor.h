// Tensor: a dense, row-major (C-contiguous) n-d array of one DType.
//
// A Tensor either owns its memory (Tensor::Zeros, Tensor::Copy) or is a view
// over memory the caller owns (Tensor::View); copies of a Tensor share the
// same memory, like PyTorch tensors. A view does not keep the caller's buffer
// alive: the caller keeps it valid for as long as the view is used, including
// during a save or load that was given the view.
//
// Shapes: a 0-d tensor (shape {}) holds one element; any dimension may be 0
// (then the tensor holds no bytes). Dimensions are never negative.
//
// Thread safety: the Tensor object is a value; concurrent writes to the
// memory it refers to are the caller's to synchronise.
#ifndef CKPTDB_TENSOR_H_
#define CKPTDB_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ckptdb/device.h"
#include "ckptdb/dtype.h"
#include "ckptdb/status.h"

namespace ckptdb {

using Shape = std::vector<int64_t>;

// Number of elements of `shape` (1 for a 0-d shape), or InvalidArgument when a
// dimension is negative or the count overflows.
StatusOr<int64_t> NumElements(const Shape& shape);
// "[10, 20]"; "[]" for a 0-d shape.
std::string ShapeToString(const Shape& shape);

class Tensor {
 public:
  // An empty 0-element f32 CPU tensor of shape {0}; mostly a placeholder.
  Tensor();

  // A CPU tensor that owns zero-filled memory. Here and in Copy and View:
  // InvalidArgument when dtype is not one of DType's values or the shape is
  // invalid (NumElements).
  static StatusOr<Tensor> Zeros(DType dtype, Shape shape);
  // A CPU tensor that owns a copy of `nbytes` bytes at `data`.
  // InvalidArgument when nbytes is not exactly what dtype and shape need.
  static StatusOr<Tensor> Copy(DType dtype, Shape shape, const void* data, size_t nbytes);
  // A view over `buffer_bytes` bytes at `data`, on `device`. InvalidArgument
  // when the buffer is smaller than dtype and shape need, when data is null
  // for a non-empty tensor, or when the shape is invalid. A larger buffer is
  // fine: the tensor uses its first nbytes().
  static StatusOr<Tensor> View(DType dtype, Shape shape, void* data, size_t buffer_bytes,
                               Device device = Device::CPU());

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * DTypeSize(dtype_); }
  Device device() const { return device_; }
  bool owns_memory() const { return storage_ != nullptr; }

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const { return static_cast<T*>(data_); }

  // True when dtype, shape and every byte are equal (CPU tensors only).
  bool BitwiseEquals(const Tensor& other) const;

 private:
  DType dtype_ = DType::kF32;
  Shape shape_{0};
  int64_t numel_ = 0;
  Device device_;
  std::shared_ptr<void> storage_;  // null for views
  void* data_ = nullptr;
};

}  // namespace ckptdb

#endif  // CKPTDB_TENSOR_H_
