// ShardedTensor: one rank's part of a tensor that is split across ranks.
//
// A ShardedTensor has a global shape and dtype and this rank's local shards:
// each shard is a dense Tensor placed at `offsets` inside the global tensor
// (its sizes are the shard tensor's shape). Together, the local shards of
// every rank must cover the global tensor exactly once; a save checks that
// across ranks. A rank may hold zero, one or several shards.
//
// Thread safety: a value, like Tensor.
#ifndef CKPTDB_SHARDED_TENSOR_H_
#define CKPTDB_SHARDED_TENSOR_H_

#include <cstdint>
#include <vector>

#include "ckptdb/status.h"
#include "ckptdb/tensor.h"

namespace ckptdb {

struct Shard {
  std::vector<int64_t> offsets;  // one per global dimension
  Tensor tensor;                 // shape = the shard's sizes
};

class ShardedTensor {
 public:
  ShardedTensor() = default;

  // Checks that every shard has the global dtype and rank (number of
  // dimensions), lies within the global shape, and that the local shards do
  // not overlap each other. InvalidArgument naming the shard otherwise.
  static StatusOr<ShardedTensor> Create(DType dtype, Shape global_shape, std::vector<Shard> local_shards);

  DType dtype() const { return dtype_; }
  const Shape& global_shape() const { return global_shape_; }
  const std::vector<Shard>& local_shards() const { return shards_; }

 private:
  DType dtype_ = DType::kF32;
  Shape global_shape_;
  std::vector<Shard> shards_;
};

}  // namespace ckptdb

#endif  // CKPTDB_SHARDED_TENSOR_H_
