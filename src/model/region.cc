#include "model/region.h"

#include <algorithm>
#include <cstring>

namespace ckptdb {

std::string BoxToString(const Box& box) {
  std::string s = "[";
  for (size_t i = 0; i < box.sizes.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(box.offsets[i]) + ":" + std::to_string(box.offsets[i] + box.sizes[i]);
  }
  return s + "]";
}

int64_t BoxNumel(const Box& box) {
  int64_t n = 1;
  for (int64_t s : box.sizes) n *= s;
  return n;
}

Status CheckBoxWithin(const Box& box, const Shape& shape) {
  if (box.offsets.size() != shape.size() || box.sizes.size() != shape.size()) {
    return Status::InvalidArgument("region with " + std::to_string(box.offsets.size()) + " offsets and " +
                                   std::to_string(box.sizes.size()) + " sizes does not match the " +
                                   std::to_string(shape.size()) + "-d shape " + ShapeToString(shape));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (box.offsets[d] < 0 || box.sizes[d] < 0 || box.offsets[d] > shape[d] ||
        box.sizes[d] > shape[d] - box.offsets[d]) {
      return Status::InvalidArgument("region " + BoxToString(box) + " does not lie within shape " +
                                     ShapeToString(shape) + " (dimension " + std::to_string(d) + ")");
    }
  }
  return Status::OK();
}

bool Intersect(const Box& a, const Box& b, Box* out) {
  size_t n = a.sizes.size();
  out->offsets.assign(n, 0);
  out->sizes.assign(n, 0);
  for (size_t d = 0; d < n; ++d) {
    int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    int64_t hi = std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]);
    if (hi <= lo) return false;
    out->offsets[d] = lo;
    out->sizes[d] = hi - lo;
  }
  return true;
}

bool BoxesOverlap(const Box& a, const Box& b) {
  Box tmp;
  return a.sizes.size() == b.sizes.size() && Intersect(a, b, &tmp);
}

namespace {
// Row-major linear index, within `box`, of the global coordinate `idx`.
uint64_t LinearIndex(const Box& box, const std::vector<int64_t>& idx) {
  uint64_t lin = 0;
  for (size_t d = 0; d < box.sizes.size(); ++d) {
    lin = lin * static_cast<uint64_t>(box.sizes[d]) + static_cast<uint64_t>(idx[d] - box.offsets[d]);
  }
  return lin;
}
}  // namespace

void ByteSpan(const Box& outer, const Box& inner, size_t elem_size, uint64_t* begin, uint64_t* end) {
  if (BoxNumel(inner) == 0) {
    *begin = *end = 0;
    return;
  }
  std::vector<int64_t> last(inner.offsets);
  for (size_t d = 0; d < last.size(); ++d) last[d] += inner.sizes[d] - 1;
  *begin = LinearIndex(outer, inner.offsets) * elem_size;
  *end = (LinearIndex(outer, last) + 1) * elem_size;
}

bool RunsOfBox(const Box& outer, const Box& inner, size_t elem_size, uint64_t* begin, uint64_t* run_bytes,
               uint64_t* stride) {
  const size_t n = inner.sizes.size();
  if (n == 0 || outer.sizes.size() != n || BoxNumel(inner) == 0) return false;
  uint64_t end = 0;
  ByteSpan(outer, inner, elem_size, begin, &end);
  // Dimensions after j are whole in inner: a run spans them and inner's
  // extent in j.
  size_t j = n - 1;
  while (j > 0 && inner.sizes[j] == outer.sizes[j]) --j;
  uint64_t whole = elem_size;
  for (size_t d = j + 1; d < n; ++d) whole *= static_cast<uint64_t>(outer.sizes[d]);
  *run_bytes = static_cast<uint64_t>(inner.sizes[j]) * whole;
  *stride = *run_bytes;
  // The runs step along at most one of the dimensions before j.
  int stepping = -1;
  for (size_t d = 0; d < j; ++d) {
    if (inner.sizes[d] == 1) continue;
    if (stepping >= 0) return false;
    stepping = static_cast<int>(d);
  }
  if (stepping >= 0) {
    *stride = elem_size;
    for (size_t d = static_cast<size_t>(stepping) + 1; d < n; ++d) *stride *= static_cast<uint64_t>(outer.sizes[d]);
  }
  return true;
}

void CopyRegionWindow(const Box& src_box, const void* src_data, uint64_t src_base, uint64_t src_len, DType src_dtype,
                      const Box& dst_box, void* dst_data, DType dst_dtype, const Box& region) {
  const size_t n = region.sizes.size();
  if (BoxNumel(region) == 0 || src_len == 0) return;
  const size_t ses = DTypeSize(src_dtype), des = DTypeSize(dst_dtype);
  const uint64_t lo = src_base / ses, hi = (src_base + src_len) / ses;  // element window in src
  const char* src = static_cast<const char*>(src_data);
  char* dst = static_cast<char*>(dst_data);
  // Copies the run [s_elem, s_elem + elements) of src elements to d_elem on,
  // clipped to the window.
  auto copy_run = [&](uint64_t s_elem, uint64_t d_elem, uint64_t elements) {
    const uint64_t b = std::max(s_elem, lo), e = std::min(s_elem + elements, hi);
    if (b >= e) return;
    const char* from = src + (b - lo) * ses;
    char* to = dst + (d_elem + (b - s_elem)) * des;
    if (src_dtype == dst_dtype) {
      std::memcpy(to, from, (e - b) * ses);
    } else {
      ConvertElements(src_dtype, from, dst_dtype, to, e - b);
    }
  };
  if (n == 0) {
    copy_run(0, 0, 1);
    return;
  }
  // Trailing dimensions that the region spans fully in both boxes are one
  // contiguous run; fold them into the innermost copy.
  size_t inner = n - 1;
  uint64_t run = static_cast<uint64_t>(region.sizes[n - 1]);
  while (inner > 0 && region.sizes[inner] == src_box.sizes[inner] && region.sizes[inner] == dst_box.sizes[inner]) {
    --inner;
    run *= static_cast<uint64_t>(region.sizes[inner]);
  }
  // Iterate over dimensions [0, inner) of the region; dimension `inner` and
  // everything after it form one run. Start at the first run that can reach
  // the window (runs advance monotonically in src): walking from the
  // region's origin for every window made a load quadratic in its chunks.
  std::vector<int64_t> idx(region.offsets);
  if (inner > 0 && lo > 0) {
    // The window's first element as an index into src_box.
    std::vector<int64_t> m(n);
    uint64_t rest = lo;
    for (size_t d = n; d-- > 0;) {
      const uint64_t size = static_cast<uint64_t>(src_box.sizes[d]);
      m[d] = src_box.offsets[d] + static_cast<int64_t>(size == 0 ? 0 : rest % size);
      rest = size == 0 ? 0 : rest / size;
    }
    // The smallest region index (over dimensions [0, inner), row-major)
    // that is not before m.
    for (size_t d = 0; d < inner; ++d) {
      if (m[d] < region.offsets[d]) break;  // idx[d..] stay at the region's start
      if (m[d] < region.offsets[d] + region.sizes[d]) {
        idx[d] = m[d];
        continue;
      }
      // Past the region along d under this prefix: the next prefix.
      size_t c = d;
      while (true) {
        if (c == 0) return;  // the window lies after the whole region
        --c;
        if (++idx[c] < region.offsets[c] + region.sizes[c]) break;
        idx[c] = region.offsets[c];
      }
      break;
    }
  }
  while (true) {
    const uint64_t s_elem = LinearIndex(src_box, idx);
    // Runs advance monotonically in src: stop once past the window.
    if (s_elem >= hi) return;
    copy_run(s_elem, LinearIndex(dst_box, idx), run);
    size_t d = inner;
    while (d > 0) {
      --d;
      if (++idx[d] < region.offsets[d] + region.sizes[d]) break;
      idx[d] = region.offsets[d];
      if (d == 0) return;
    }
    if (inner == 0) return;
  }
}

}  // namespace ckptdb
