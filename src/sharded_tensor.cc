#include "ckptdb/sharded_tensor.h"

#include <string>

#include "region.h"

namespace ckptdb {

StatusOr<ShardedTensor> ShardedTensor::Create(DType dtype, Shape global_shape, std::vector<Shard> local_shards) {
  auto known = DTypeFromNumber(static_cast<int>(dtype));
  if (!known.ok()) return known.status().WithContext("sharded tensor");
  auto n = NumElements(global_shape);
  if (!n.ok()) return n.status().WithContext("sharded tensor global shape");
  for (size_t i = 0; i < local_shards.size(); ++i) {
    const Shard& s = local_shards[i];
    const std::string name = "local shard " + std::to_string(i);
    if (s.tensor.dtype() != dtype) {
      return Status::InvalidArgument(name + " has dtype " + DTypeName(s.tensor.dtype()) +
                                     " but the sharded tensor has dtype " + DTypeName(dtype));
    }
    Box box{s.offsets, s.tensor.shape()};
    Status st = CheckBoxWithin(box, global_shape);
    if (!st.ok()) return st.WithContext(name);
    for (size_t j = 0; j < i; ++j) {
      Box other{local_shards[j].offsets, local_shards[j].tensor.shape()};
      if (BoxesOverlap(box, other)) {
        return Status::InvalidArgument(name + " " + BoxToString(box) + " overlaps local shard " + std::to_string(j) +
                                       " " + BoxToString(other));
      }
    }
  }
  ShardedTensor t;
  t.dtype_ = dtype;
  t.global_shape_ = std::move(global_shape);
  t.shards_ = std::move(local_shards);
  return t;
}

}  // namespace ckptdb
