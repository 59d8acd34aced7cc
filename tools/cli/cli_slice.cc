#include "cli_slice.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <future>

#include "ckptdb/checkpoint.h"
#include "ckptdb/sharded_tensor.h"
#include "ckptdb/state_dict.h"

namespace ckptdb::cli {

namespace {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(' ');
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(' ');
  return s.substr(b, e - b + 1);
}

// An optional integer; empty text means absent.
Status ParseInt(const std::string& text, const std::string& slice, std::optional<int64_t>* out) {
  std::string t = Trim(text);
  if (t.empty()) {
    out->reset();
    return Status::OK();
  }
  size_t digits_from = (t[0] == '-' || t[0] == '+') ? 1 : 0;
  if (digits_from == t.size() || t.find_first_not_of("0123456789", digits_from) != std::string::npos) {
    return Status::InvalidArgument("invalid slice '" + slice + "': '" + t + "' is not an integer");
  }
  errno = 0;
  long long v = std::strtoll(t.c_str(), nullptr, 10);
  if (errno == ERANGE) return Status::InvalidArgument("invalid slice '" + slice + "': '" + t + "' is out of range");
  *out = static_cast<int64_t>(v);
  return Status::OK();
}

}  // namespace

StatusOr<Slice> ParseSlice(const std::string& text) {
  Slice s;
  s.text = text;
  if (Trim(text).empty()) return Status::InvalidArgument("invalid slice '" + text + "': it is empty");
  size_t begin = 0;
  while (true) {
    size_t comma = text.find(',', begin);
    std::string part = text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    SliceDim d;
    std::vector<std::string> fields;
    size_t fb = 0;
    while (true) {
      size_t colon = part.find(':', fb);
      fields.push_back(part.substr(fb, colon == std::string::npos ? std::string::npos : colon - fb));
      if (colon == std::string::npos) break;
      fb = colon + 1;
    }
    if (fields.size() > 3) {
      return Status::InvalidArgument("invalid slice '" + text + "': '" + part + "' has more than two ':'");
    }
    if (fields.size() == 1) {
      std::optional<int64_t> idx;
      Status st = ParseInt(fields[0], text, &idx);
      if (!st.ok()) return st;
      if (!idx) {
        return Status::InvalidArgument("invalid slice '" + text + "': dimension " + std::to_string(s.dims.size()) +
                                       " is empty (use ':' for all of it)");
      }
      d.is_index = true;
      d.start = idx;
    } else {
      Status st = ParseInt(fields[0], text, &d.start);
      if (st.ok()) st = ParseInt(fields[1], text, &d.stop);
      if (!st.ok()) return st;
      if (fields.size() == 3) {
        std::optional<int64_t> step;
        st = ParseInt(fields[2], text, &step);
        if (!st.ok()) return st;
        if (step) {
          if (*step <= 0) {
            return Status::InvalidArgument("invalid slice '" + text + "': step " + std::to_string(*step) +
                                           " must be positive");
          }
          d.step = *step;
        }
      }
    }
    s.dims.push_back(d);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return s;
}

StatusOr<std::vector<SliceRange>> ResolveSlice(const Slice& slice, const Shape& shape, const std::string& fqn) {
  if (slice.dims.size() > shape.size()) {
    return Status::InvalidArgument("slice '" + slice.text + "' has " + std::to_string(slice.dims.size()) +
                                   " dimensions, but entry '" + fqn + "' has shape " + ShapeToString(shape));
  }
  std::vector<SliceRange> out;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t n = shape[i];
    SliceRange r;
    if (i >= slice.dims.size()) {
      r.count = n;
      out.push_back(r);
      continue;
    }
    const SliceDim& d = slice.dims[i];
    if (d.is_index) {
      int64_t idx = *d.start < 0 ? *d.start + n : *d.start;
      if (idx < 0 || idx >= n) {
        return Status::InvalidArgument("slice '" + slice.text + "': index " + std::to_string(*d.start) +
                                       " is out of range for dimension " + std::to_string(i) + " of entry '" + fqn +
                                       "' (size " + std::to_string(n) + ")");
      }
      r.start = idx;
      r.count = 1;
      r.drop = true;
    } else {
      auto clamp = [n](std::optional<int64_t> v, int64_t dflt) {
        if (!v) return dflt;
        int64_t x = *v < 0 ? *v + n : *v;
        return x < 0 ? 0 : (x > n ? n : x);
      };
      const int64_t start = clamp(d.start, 0);
      const int64_t stop = clamp(d.stop, n);
      r.start = start;
      r.step = d.step;
      r.count = stop > start ? (stop - start + d.step - 1) / d.step : 0;
    }
    out.push_back(r);
  }
  return out;
}

Shape SlicedShape(const std::vector<SliceRange>& ranges) {
  Shape s;
  for (const SliceRange& r : ranges) {
    if (!r.drop) s.push_back(r.count);
  }
  return s;
}

namespace {

// Serves the metadata of one step, already decoded, holding only one entry:
// a Load of that entry then neither decodes the step's whole metadata again
// nor indexes every entry, so reading a step entry by entry (or block by
// block) is linear in its entries.
class OneEntryReader final : public StorageReader {
 public:
  OneEntryReader(StorageReader& inner, const StepMetadata& md, const EntryMetadata& e) : inner_(inner) {
    md_.format_version = md.format_version;
    md_.step = md.step;
    md_.created_unix_ms = md.created_unix_ms;
    md_.world_size = md.world_size;
    md_.coordinator_rank = md.coordinator_rank;
    md_.save_id = md.save_id;
    md_.entries.push_back(e);
  }
  StatusOr<StepMetadata> ReadMetadata(int64_t step) override {
    if (step != md_.step) return inner_.ReadMetadata(step);
    return md_;
  }
  StatusOr<ReadStats> Read(const StepMetadata& md, const std::vector<ReadItem>& items) override {
    return inner_.Read(md, items);
  }

 private:
  StorageReader& inner_;
  StepMetadata md_;
};

}  // namespace

StatusOr<Bytes> ReadBytesEntry(StorageReader& reader, const StepMetadata& md, const EntryMetadata& e) {
  OneEntryReader one(reader, md, e);
  auto sd = LoadWhole(one, md.step, {e.fqn});
  if (!sd.ok()) return sd.status();
  return std::get<Bytes>(sd->entries().front().second);
}

namespace {

// Loads the region of `e` at `offsets` with box's shape into `box`: Load
// fetches only the chunks that cover it.
Status LoadBox(StorageReader& reader, const StepMetadata& md, const EntryMetadata& e,
               const std::vector<int64_t>& offsets, const Tensor& box) {
  auto sharded = ShardedTensor::Create(e.dtype, e.shape, {Shard{offsets, box}});
  if (!sharded.ok()) return sharded.status();
  StateDict target;
  Status st = target.Add(e.fqn, std::move(sharded).value());
  if (!st.ok()) return st;
  LoadOptions lo;
  lo.step = md.step;
  lo.no_dist = true;
  OneEntryReader one(reader, md, e);
  return Load(target, one, lo);
}

// The bounding box of a slice: its first index and extent along each
// dimension.
void BoundingBox(const std::vector<SliceRange>& ranges, std::vector<int64_t>* offsets, std::vector<int64_t>* sizes) {
  for (const SliceRange& r : ranges) {
    offsets->push_back(r.start);
    sizes->push_back((r.count - 1) * r.step + 1);
  }
}

}  // namespace

StatusOr<Tensor> ReadSlice(StorageReader& reader, const StepMetadata& md, const EntryMetadata& e,
                           const std::vector<SliceRange>& ranges) {
  // Every element of the box wanted, no dimension dropped: the box is it.
  bool whole_box = true;
  for (const SliceRange& r : ranges) whole_box = whole_box && r.step == 1 && !r.drop;
  std::vector<int64_t> offsets, sizes;
  BoundingBox(ranges, &offsets, &sizes);
  auto box = Tensor::Zeros(e.dtype, sizes);
  if (!box.ok()) return box.status();
  if (box->numel() == 0) return Tensor::Zeros(e.dtype, SlicedShape(ranges));
  Status st = LoadBox(reader, md, e, offsets, *box);
  if (!st.ok()) return st;
  if (whole_box) return *box;
  auto result = Tensor::Zeros(e.dtype, SlicedShape(ranges));
  if (!result.ok()) return result;
  // Gather every step-th element of the box into the result, row-major.
  const size_t es = DTypeSize(e.dtype);
  const size_t nd = ranges.size();
  std::vector<int64_t> box_stride(nd, 1);
  for (size_t d = nd; d-- > 1;) box_stride[d - 1] = box_stride[d] * sizes[d];
  std::vector<int64_t> idx(nd, 0);
  const char* src = static_cast<const char*>(box->data());
  char* dst = static_cast<char*>(result->data());
  for (int64_t k = 0; k < result->numel(); ++k) {
    int64_t off = 0;
    for (size_t d = 0; d < nd; ++d) off += idx[d] * ranges[d].step * box_stride[d];
    std::memcpy(dst + k * static_cast<int64_t>(es), src + off * static_cast<int64_t>(es), es);
    for (size_t d = nd; d-- > 0;) {
      if (++idx[d] < ranges[d].count) break;
      idx[d] = 0;
    }
  }
  return result;
}

Status ForEachRowRange(const EntryMetadata& e, uint64_t max_bytes,
                       const std::function<Status(const std::vector<SliceRange>& ranges)>& fn) {
  const size_t nd = e.shape.size();
  std::vector<SliceRange> ranges;
  for (int64_t d : e.shape) ranges.push_back(SliceRange{0, d, 1, false});
  if (nd == 0 || e.logical_bytes() == 0) return fn(ranges);
  // inner[d]: the bytes of one index along dimension d (everything after it).
  std::vector<uint64_t> inner(nd);
  uint64_t bytes = DTypeSize(e.dtype);
  for (size_t d = nd; d-- > 0;) {
    inner[d] = bytes;
    bytes *= static_cast<uint64_t>(e.shape[d]);
  }
  // Cut along the first dimension whose single index fits in max_bytes
  // (down to one element); the dimensions before it go one index at a time.
  size_t cut = 0;
  while (cut + 1 < nd && inner[cut] > max_bytes) ++cut;
  const int64_t per = std::max<int64_t>(1, static_cast<int64_t>(max_bytes / inner[cut]));
  std::vector<int64_t> prefix(cut, 0);
  while (true) {
    for (size_t d = 0; d < cut; ++d) ranges[d] = SliceRange{prefix[d], 1, 1, false};
    for (int64_t i = 0; i < e.shape[cut]; i += per) {
      ranges[cut] = SliceRange{i, std::min(per, e.shape[cut] - i), 1, false};
      Status st = fn(ranges);
      if (!st.ok()) return st;
    }
    size_t d = cut;
    while (d > 0 && ++prefix[d - 1] == e.shape[d - 1]) prefix[--d] = 0;
    if (d == 0) break;
  }
  return Status::OK();
}

Status ForEachRowBlock(StorageReader& reader, const StepMetadata& md, const EntryMetadata& e, uint64_t max_bytes,
                       const std::function<Status(const Tensor& block)>& fn) {
  // The blocks first (a few per max_bytes of the tensor), so that the next
  // one can be loaded while fn writes this one.
  struct Block {
    std::vector<int64_t> offsets, sizes;
    Shape shape;  // the block, its dropped dimensions gone
    size_t bytes = 0;
  };
  std::vector<Block> blocks;
  Status listed = ForEachRowRange(e, max_bytes, [&](const std::vector<SliceRange>& ranges) -> Status {
    Block b;
    BoundingBox(ranges, &b.offsets, &b.sizes);
    b.shape = SlicedShape(ranges);
    auto numel = NumElements(b.sizes);
    if (!numel.ok()) return numel.status();
    b.bytes = static_cast<size_t>(*numel) * DTypeSize(e.dtype);
    blocks.push_back(std::move(b));
    return Status::OK();
  });
  if (!listed.ok()) return listed;
  // Two buffers, each reused for every other block: their pages are faulted
  // in once, not once per block (a fresh allocation per block made
  // streaming 4x slower than a load). Block i + 1 loads into one on a
  // thread of its own while fn takes block i from the other: export and
  // cat wait for the slower of reading and writing, not for their sum.
  Tensor buffers[2];
  auto load = [&](size_t i) -> Status {
    const Block& b = blocks[i];
    Tensor& buffer = buffers[i % 2];
    if (buffer.nbytes() < b.bytes) {
      auto fresh = Tensor::Zeros(DType::kU8, {static_cast<int64_t>(b.bytes)});
      if (!fresh.ok()) return fresh.status();
      buffer = std::move(fresh).value();
    }
    if (b.bytes == 0) return Status::OK();
    auto box = Tensor::View(e.dtype, b.sizes, buffer.data(), buffer.nbytes());
    if (!box.ok()) return box.status();
    return LoadBox(reader, md, e, b.offsets, *box);
  };
  Status st = blocks.empty() ? Status::OK() : load(0);
  for (size_t i = 0; st.ok() && i < blocks.size(); ++i) {
    std::future<Status> next;
    if (i + 1 < blocks.size()) next = std::async(std::launch::async, load, i + 1);
    auto block = Tensor::View(e.dtype, blocks[i].shape, buffers[i % 2].data(), buffers[i % 2].nbytes());
    st = block.ok() ? fn(*block) : block.status();
    // Joined before anything returns: the thread uses the buffers and the
    // reader.
    Status loaded = next.valid() ? next.get() : Status::OK();
    if (st.ok()) st = loaded;
  }
  return st;
}

}  // namespace ckptdb::cli
