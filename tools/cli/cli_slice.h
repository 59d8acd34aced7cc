// `ckptdb cat --slice`: numpy-style basic indexing of a stored tensor
// ("0:4,:", "1", "::2,-3:"), read from only the chunks the slice touches.
#ifndef CKPTDB_TOOLS_CLI_SLICE_H_
#define CKPTDB_TOOLS_CLI_SLICE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/state_dict.h"
#include "ckptdb/status.h"
#include "ckptdb/storage.h"
#include "ckptdb/tensor.h"

namespace ckptdb::cli {

// One comma-separated part: an index ("3", "-1") or start:stop[:step] with
// each part optional, as in Python.
struct SliceDim {
  bool is_index = false;
  std::optional<int64_t> start, stop;
  int64_t step = 1;  // > 0
};

struct Slice {
  std::string text;
  std::vector<SliceDim> dims;  // may be fewer than the tensor has: the rest are ':'
};

// InvalidArgument quoting the text and saying what is wrong.
StatusOr<Slice> ParseSlice(const std::string& text);

// A slice resolved against a shape: the elements start + i*step for
// i < count, along each dimension; `drop` for an index (the dimension goes).
struct SliceRange {
  int64_t start = 0;
  int64_t count = 0;
  int64_t step = 1;
  bool drop = false;
};

// InvalidArgument naming the entry when the slice has more dimensions than
// the shape or an index is out of range. Ranges clamp, as in Python.
StatusOr<std::vector<SliceRange>> ResolveSlice(const Slice& slice, const Shape& shape, const std::string& fqn);

// The shape of the result (dropped dimensions removed).
Shape SlicedShape(const std::vector<SliceRange>& ranges);

// Reads the slice of tensor entry `e` of step `md`: only the chunks covering
// its bounding box are fetched (and verified).
StatusOr<Tensor> ReadSlice(StorageReader& reader, const StepMetadata& md, const EntryMetadata& e,
                           const std::vector<SliceRange>& ranges);

// Reads bytes entry `e` of step `md` (without decoding the step's metadata
// again).
StatusOr<Bytes> ReadBytesEntry(StorageReader& reader, const StepMetadata& md, const EntryMetadata& e);

// Cuts tensor entry `e` into boxes of at most max_bytes (or one element,
// when an element is larger) and calls fn with each box's ranges, in
// row-major order, so that the boxes' bytes one after the other are the
// tensor's: blocks of whole rows (along dimension 0) while a row fits, else
// parts of one row (cut along the first dimension whose index fits), so a
// [1, N] tensor streams in bounded blocks too. A 0-d or empty tensor is one
// block. No dimension is dropped (the boxes keep sizes of 1).
Status ForEachRowRange(const EntryMetadata& e, uint64_t max_bytes,
                       const std::function<Status(const std::vector<SliceRange>& ranges)>& fn);

// Streams tensor entry `e` of step `md` in row-major order, in the blocks
// of ForEachRowRange (at most max_bytes, or one element), so that memory
// stays bounded whatever the tensor's size and shape (two blocks: the next
// one is loaded, on a thread of its own, while fn takes this one): fn gets
// each block's bytes in order, on the calling thread. When fn fails, that is
// the result, and no block after it is given.
Status ForEachRowBlock(StorageReader& reader, const StepMetadata& md, const EntryMetadata& e, uint64_t max_bytes,
                       const std::function<Status(const Tensor& block)>& fn);

}  // namespace ckptdb::cli

#endif  // CKPTDB_TOOLS_CLI_SLICE_H_
