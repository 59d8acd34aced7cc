#include "ckptdb/sharded_tensor.h"

#include <string>

#include "model/box_index.h"
#include "model/region.h"

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
  }
  std::vector<Box> boxes;
  boxes.reserve(local_shards.size());
  for (const Shard& s : local_shards) boxes.push_back(Box{s.offsets, s.tensor.shape()});
  std::vector<const Box*> ptrs;
  for (const Box& b : boxes) ptrs.push_back(&b);
  size_t a = 0, b = 0;
  if (FindOverlappingPair(ptrs, &a, &b)) {
    return Status::InvalidArgument("local shard " + std::to_string(b) + " " + BoxToString(boxes[b]) +
                                   " overlaps local shard " + std::to_string(a) + " " + BoxToString(boxes[a]));
  }
  ShardedTensor t;
  t.dtype_ = dtype;
  t.global_shape_ = std::move(global_shape);
  t.shards_ = std::move(local_shards);
  return t;
}

}  // namespace ckptdb
