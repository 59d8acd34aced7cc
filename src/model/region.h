// Boxes (n-d regions of a global tensor) and copying the overlap of two
// row-major boxes: the arithmetic behind sharding and resharding.
#ifndef CKPTDB_SRC_REGION_H_
#define CKPTDB_SRC_REGION_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ckptdb/dtype.h"
#include "ckptdb/status.h"
#include "ckptdb/tensor.h"

namespace ckptdb {

// offsets.size() == sizes.size() == the number of dimensions; a 0-d box
// (both empty) holds one element.
struct Box {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
};

std::string BoxToString(const Box& box);  // "[0:5, 2:4]"
int64_t BoxNumel(const Box& box);
// InvalidArgument unless `box` has the rank of `shape`, non-negative sizes and
// offsets, and lies within it.
Status CheckBoxWithin(const Box& box, const Shape& shape);
// True when both boxes hold at least one common element.
bool BoxesOverlap(const Box& a, const Box& b);
// The common region of a and b (same rank). False when it holds no element.
bool Intersect(const Box& a, const Box& b, Box* out);

// Byte range [*begin, *end) inside `outer`'s row-major bytes that holds every
// element of `inner` (which lies within outer): from inner's first element to
// just past its last.
void ByteSpan(const Box& outer, const Box& inner, size_t elem_size, uint64_t* begin, uint64_t* end);

// Where `inner`'s row-major bytes (it lies within outer) lie in outer's: in
// runs of *run_bytes, run k at byte *begin + k * *stride (one run when they
// lie together). False when no one stride places them: the runs are strided
// in more than one dimension (or inner is empty).
bool RunsOfBox(const Box& outer, const Box& inner, size_t elem_size, uint64_t* begin, uint64_t* run_bytes,
               uint64_t* stride);

// Copies the elements of `region` whose bytes in src lie in the window
// [src_base, src_base + src_len) from src (row-major elements of `src_dtype`
// over box `src_box`; src_data holds exactly the window's bytes) into dst
// (row-major elements of `dst_dtype` over box `dst_box`), converting when the
// dtypes differ (ConvertElements). Used to scatter one chunk of a saved piece
// at a time; windows that together cover ByteSpan(src_box, region) copy the
// whole region. REQUIRES: region lies within both boxes; src_base and
// src_len are multiples of the source element size.
void CopyRegionWindow(const Box& src_box, const void* src_data, uint64_t src_base, uint64_t src_len, DType src_dtype,
                      const Box& dst_box, void* dst_data, DType dst_dtype, const Box& region);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_REGION_H_
