#include "format/chunk_codec.h"

#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_c_literalCompressionMode (checked at run time)
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "format/huffman_frame.h"
#include "util/crc32c.h"
#include "util/le_bytes.h"
#include "util/status_macros.h"

namespace ckptdb {

namespace {

void WriteHeader(char* p, ChunkCodec codec, uint32_t raw_len, uint64_t sum, ChunkFilter filter = ChunkFilter::kNone,
                 uint8_t filter_param = 0) {
  p[0] = static_cast<char>(kChunkVersion);
  p[1] = static_cast<char>(codec);
  p[2] = static_cast<char>(filter);
  p[3] = static_cast<char>(filter_param);
  PutLE32(p + 4, raw_len);
  PutLE64(p + 8, sum);
}

struct Header {
  ChunkCodec codec;
  ChunkFilter filter;
  uint8_t filter_param;
  uint32_t raw_len;
  uint64_t checksum;
};

Status ParseHeader(std::string_view value, Header* h) {
  if (value.size() < kChunkHeaderSize) {
    return Status::DataLoss("chunk value of " + std::to_string(value.size()) + " bytes is shorter than its header");
  }
  const char* p = value.data();
  if (static_cast<uint8_t>(p[0]) != kChunkVersion) {
    return Status::DataLoss("chunk has unknown format version " + std::to_string(static_cast<uint8_t>(p[0])));
  }
  uint8_t codec = static_cast<uint8_t>(p[1]);
  if (codec > static_cast<uint8_t>(ChunkCodec::kZstd)) {
    return Status::DataLoss("chunk has unknown codec " + std::to_string(codec));
  }
  const uint8_t filter = static_cast<uint8_t>(p[2]), param = static_cast<uint8_t>(p[3]);
  if (filter > static_cast<uint8_t>(ChunkFilter::kPlanesApart) || (filter == 0 && param != 0)) {
    return Status::DataLoss("chunk has unknown filter " + std::to_string(filter));
  }
  if (filter != 0 && param != 2 && param != 4 && param != 8) {
    return Status::DataLoss("chunk has byte planes of invalid width " + std::to_string(param));
  }
  h->codec = static_cast<ChunkCodec>(codec);
  h->filter = static_cast<ChunkFilter>(filter);
  h->filter_param = param;
  h->raw_len = GetLE32(p + 4);
  h->checksum = GetLE64(p + 8);
  return Status::OK();
}

// Two-byte elements into their low and high bytes, and back.
void Split2(const unsigned char* src, size_t count, unsigned char* lo, unsigned char* hi) {
  size_t i = 0;
#if defined(__SSE2__)
  // 16 elements at a time: the low bytes masked, the high ones shifted down,
  // each packed to 16 bytes.
  const __m128i mask = _mm_set1_epi16(0xff);
  for (; i + 16 <= count; i += 16) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i + 16));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lo + i), _mm_packus_epi16(_mm_and_si128(a, mask), _mm_and_si128(b, mask)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(hi + i), _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8)));
  }
#endif
  for (; i < count; ++i) {
    lo[i] = src[2 * i];
    hi[i] = src[2 * i + 1];
  }
}

void Join2(const unsigned char* lo, const unsigned char* hi, size_t count, unsigned char* dst) {
  size_t i = 0;
#if defined(__SSE2__)
  for (; i + 16 <= count; i += 16) {
    const __m128i l = _mm_loadu_si128(reinterpret_cast<const __m128i*>(lo + i));
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), _mm_unpacklo_epi8(l, h));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i + 16), _mm_unpackhi_epi8(l, h));
  }
#endif
  for (; i < count; ++i) {
    dst[2 * i] = lo[i];
    dst[2 * i + 1] = hi[i];
  }
}

std::string& PlanesTemp() {
  static thread_local std::string s;
  return s;
}

// Byte j of element i goes to plane j: out[j * count + i] = in[i * width + j],
// a 64 KiB block at a time, each block's XXH3 taken while it is in cache
// (the checksum of the raw bytes, returned). Width 4 is
// width 2 applied twice: the even bytes of every element (0, 2) and its odd
// bytes (1, 3), each then split into their two planes.
uint64_t SplitPlanesAndChecksum(const char* in, size_t n, size_t width, char* out) {
  constexpr size_t kBlock = 64 << 10;  // a multiple of every width
  const size_t count = n / width;
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t len = std::min(kBlock, n - off), c = len / width, at = off / width;
    const auto* src = reinterpret_cast<const unsigned char*>(in + off);
    auto* dst = reinterpret_cast<unsigned char*>(out);
    if (width == 2) {
      Split2(src, c, dst + at, dst + count + at);
    } else if (width == 4) {
      std::string& t = PlanesTemp();
      t.resize(kBlock);
      auto* even = reinterpret_cast<unsigned char*>(t.data());
      Split2(src, len / 2, even, even + len / 2);
      Split2(even, c, dst + at, dst + 2 * count + at);              // planes 0 and 2
      Split2(even + len / 2, c, dst + count + at, dst + 3 * count + at);  // planes 1 and 3
    } else {
      for (size_t i = 0; i < c; ++i) {
        for (size_t j = 0; j < width; ++j) out[j * count + at + i] = in[off + i * width + j];
      }
    }
    XXH3_64bits_update(&state, in + off, len);
  }
  return XXH3_64bits_digest(&state);
}

// The inverse of SplitPlanesAndChecksum, from planes wherever they lie: plane j at
// planes[j], `count` bytes each (width at most 8).
void JoinPlaneViews(const char* const* planes, size_t count, size_t width, char* out) {
  const auto* const* p = reinterpret_cast<const unsigned char* const*>(planes);
  auto* dst = reinterpret_cast<unsigned char*>(out);
  if (width == 2) return Join2(p[0], p[1], count, dst);
  if (width == 4) {
    std::string& t = PlanesTemp();
    t.resize(4 * count);
    auto* even = reinterpret_cast<unsigned char*>(t.data());
    Join2(p[0], p[2], count, even);              // bytes 0 and 2
    Join2(p[1], p[3], count, even + 2 * count);  // bytes 1 and 3
    return Join2(even, even + 2 * count, 2 * count, dst);
  }
  for (size_t j = 0; j < width; ++j) {
    for (size_t i = 0; i < count; ++i) out[i * width + j] = planes[j][i];
  }
}

void JoinPlanes(const char* in, size_t n, size_t width, char* out) {
  const size_t count = n / width;
  const char* planes[8];
  for (size_t j = 0; j < width; ++j) planes[j] = in + j * count;
  JoinPlaneViews(planes, count, width, out);
}

// Per-thread zstd contexts and scratch: chunks are encoded and decoded on
// worker threads, each reusing its own.
ZSTD_CCtx* CCtx() {
  static thread_local std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> ctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  return ctx.get();
}
ZSTD_DCtx* DCtx() {
  static thread_local std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> ctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  return ctx.get();
}
std::string& Scratch() {
  static thread_local std::string s;
  return s;
}
std::string& PlaneScratch() {
  static thread_local std::string s;
  return s;
}

// The context that codes one byte plane under kAuto (filter 2) that
// EncodeHuffmanFrame does not take: zstd at the store's level with its match finder sped up (targetLength: the exponent
// planes of trained weights hold few distinct values and few repeats, so
// nearly all their gain is in the Huffman coding of literals, which is kept
// on). Without the experimental literal switch (another libzstd), plain
// zstd at that level.
ZSTD_CCtx* PlaneCCtx(int level) {
  struct Ctx {
    std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> ctx{ZSTD_createCCtx(), ZSTD_freeCCtx};
    int level = -1000;
  };
  static thread_local Ctx c;
  if (c.level != level) {
    ZSTD_CCtx_reset(c.ctx.get(), ZSTD_reset_session_and_parameters);
    ZSTD_CCtx_setParameter(c.ctx.get(), ZSTD_c_compressionLevel, level);
    if (!ZSTD_isError(ZSTD_CCtx_setParameter(c.ctx.get(), ZSTD_c_literalCompressionMode, ZSTD_ps_enable))) {
      ZSTD_CCtx_setParameter(c.ctx.get(), ZSTD_c_targetLength, 128);
    }
    c.level = level;
  }
  return c.ctx.get();
}

// Bytes of each plane's sample that decides whether zstd codes the plane
// (when EncodeHuffmanFrame cannot).
constexpr size_t kPlaneSample = 16 << 10;

std::string& FrameScratch() {
  static thread_local std::string s;
  return s;
}

// Filter 2: each plane of `planes` (width w, n bytes in all) coded on its
// own, after the header: per plane a mode byte (0 stored, 1 zstd), its
// stored length (u32 LE) and its bytes. A plane is coded as a zstd frame of
// Huffman-coded literals (EncodeHuffmanFrame) when its sample shrinks below
// 90% and the frame below 95%; planes that coder cannot take (a single
// value, under 1 KiB, ...) go through zstd itself, judged the same way.
// False when no plane shrinks (the chunk is then better stored raw).
bool EncodePlanesApart(const char* planes, size_t n, size_t w, int level, std::string* out) {
  const size_t count = n / w;
  out->resize(kChunkHeaderSize);
  bool any = false;
  for (size_t j = 0; j < w; ++j) {
    const char* plane = planes + j * count;
    std::string& frame = FrameScratch();
    if (frame.size() < HuffmanFrameBound(count)) frame.resize(HuffmanFrameBound(count));
    size_t z = 0;
    const HuffmanFrame r = EncodeHuffmanFrame(plane, count, 0.9, frame.data(), &z);
    bool code = r == HuffmanFrame::kCoded && z < count * 95 / 100;
    if (r == HuffmanFrame::kUnsupported) {
      ZSTD_CCtx* cctx = PlaneCCtx(level);
      bool try_zstd = true;
      if (count > 2 * kPlaneSample) {
        std::string& probe = PlaneScratch();
        const size_t off = (count - kPlaneSample) / 2;  // the middle of the plane
        probe.resize(ZSTD_compressBound(kPlaneSample));
        const size_t zs = ZSTD_compress2(cctx, probe.data(), probe.size(), plane + off, kPlaneSample);
        try_zstd = !ZSTD_isError(zs) && zs < kPlaneSample * 9 / 10;
      }
      if (try_zstd) {
        if (frame.size() < ZSTD_compressBound(count)) frame.resize(ZSTD_compressBound(count));
        z = ZSTD_compress2(cctx, frame.data(), frame.size(), plane, count);
        code = !ZSTD_isError(z) && z < count * 95 / 100;
      }
    }
    // The plane's frame, or the plane itself, after its mode and length
    // (appended: growing the string by resize would zero it first).
    const size_t len = code ? z : count;
    char mode_len[5];
    mode_len[0] = static_cast<char>(code ? 1 : 0);
    PutLE32(mode_len + 1, static_cast<uint32_t>(len));
    out->append(mode_len, 5);
    out->append(code ? frame.data() : plane, len);
    any = any || code;
  }
  return any;
}

// Decodes filter 2's payload: planes[j] points at plane j, inside `payload`
// when it is stored as it is (no copy), else into `scratch` (n bytes).
Status DecodePlanesApart(std::string_view payload, size_t n, size_t w, char* scratch, const char** planes) {
  const size_t count = n / w;
  size_t at = 0;
  for (size_t j = 0; j < w; ++j) {
    if (payload.size() - at < 5) return Status::DataLoss("chunk's plane " + std::to_string(j) + " is truncated");
    const uint8_t mode = static_cast<uint8_t>(payload[at]);
    const uint32_t len = GetLE32(payload.data() + at + 1);
    at += 5;
    if (mode > 1 || payload.size() - at < len) {
      return Status::DataLoss("chunk's plane " + std::to_string(j) + " has mode " + std::to_string(mode) +
                              " and " + std::to_string(len) + " bytes, beyond its value");
    }
    char* dst = scratch + j * count;
    if (mode == 0) {
      if (len != count) {
        return Status::DataLoss("chunk's stored plane " + std::to_string(j) + " has " + std::to_string(len) +
                                " bytes, not " + std::to_string(count));
      }
      planes[j] = payload.data() + at;
    } else {
      planes[j] = dst;
      const size_t z = ZSTD_decompressDCtx(DCtx(), dst, count, payload.data() + at, len);
      if (ZSTD_isError(z) || z != count) {
        return Status::DataLoss("chunk's plane " + std::to_string(j) + " does not decode to " +
                                std::to_string(count) + " bytes");
      }
    }
    at += len;
  }
  if (at != payload.size()) return Status::DataLoss("chunk has bytes after its last plane");
  return Status::OK();
}

// Copies n bytes and returns the XXH3-64 of them, a cache-sized block at a
// time: each block is hashed right after it was copied, while it is still in
// cache, instead of a separate pass over the whole buffer.
uint64_t CopyAndChecksum(char* dst, const char* src, size_t n) {
  constexpr size_t kBlock = 64 << 10;
  if (n <= kBlock) {
    std::memcpy(dst, src, n);
    return XXH3_64bits(dst, n);
  }
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t len = std::min(kBlock, n - off);
    std::memcpy(dst + off, src + off, len);
    XXH3_64bits_update(&state, dst + off, len);
  }
  return XXH3_64bits_digest(&state);
}

// Bytes of a sample that kAuto compresses to decide whether a chunk is worth
// compressing at all.
constexpr size_t kAutoSample = 64 << 10;

}  // namespace

uint64_t Checksum(const void* data, size_t n) { return XXH3_64bits(data, n); }

Status ValidateCompression(Compression c, const std::string& name) {
  switch (c) {
    case Compression::kNone: case Compression::kZstd: case Compression::kAuto: return Status::OK();
  }
  return Status::InvalidArgument(name + " " + std::to_string(static_cast<int>(c)) +
                                 " is not a Compression (kNone = 0, kZstd = 1, kAuto = 2)");
}

namespace {

// The chunk (or its planes, `filter`) as one zstd frame, into *out after the
// header. False when kAuto finds it not worth it (a sample does not shrink,
// or the frame is not smaller).
bool EncodeWhole(const char* src, size_t n, Compression compression, int zstd_level, ChunkFilter filter,
                 size_t plane_width, std::string* out) {
  if (compression == Compression::kAuto && n > 2 * kAutoSample) {
    // The sample takes an equal slice of every plane.
    const size_t w = filter == ChunkFilter::kNone ? 1 : plane_width;
    const size_t slice = kAutoSample / w, plane = n / w;
    std::string sample(slice * w, '\0');
    for (size_t j = 0; j < w; ++j) std::memcpy(&sample[j * slice], src + j * plane, slice);
    std::string probe(ZSTD_compressBound(sample.size()), '\0');
    size_t z = ZSTD_compressCCtx(CCtx(), probe.data(), probe.size(), sample.data(), sample.size(), zstd_level);
    if (ZSTD_isError(z) || z >= sample.size() * 98 / 100) return false;
  }
  size_t bound = ZSTD_compressBound(n);
  out->resize(kChunkHeaderSize + bound);
  size_t z = ZSTD_compressCCtx(CCtx(), &(*out)[kChunkHeaderSize], bound, src, n, zstd_level);
  if (ZSTD_isError(z) || (compression == Compression::kAuto && z >= n)) return false;
  out->resize(kChunkHeaderSize + z);
  return true;
}

}  // namespace

void EncodeChunk(const void* raw, size_t n, Compression compression, int zstd_level, std::string* out,
                 size_t plane_width, const char* content_hash) {
  if (compression != Compression::kNone && n > 0) {
    const char* src = static_cast<const char*>(raw);
    ChunkFilter filter = ChunkFilter::kNone;
    uint64_t sum = 0;
    if ((plane_width == 2 || plane_width == 4 || plane_width == 8) && n % plane_width == 0) {
      std::string& planes = Scratch();
      planes.resize(n);
      sum = SplitPlanesAndChecksum(src, n, plane_width, planes.data());
      src = planes.data();
      filter = ChunkFilter::kBytePlanes;
    } else {
      sum = content_hash != nullptr ? ChecksumFromContentHash(content_hash, raw, n) : Checksum(raw, n);
    }
    // kAuto codes each plane of a floating-point chunk on its own (filter
    // 2): only the planes that shrink cost compression time, at the speed of
    // a Huffman coder. Everything else is one zstd frame.
    if (compression == Compression::kAuto && filter == ChunkFilter::kBytePlanes) {
      if (EncodePlanesApart(src, n, plane_width, zstd_level, out)) {
        WriteHeader(&(*out)[0], ChunkCodec::kZstd, static_cast<uint32_t>(n), sum, ChunkFilter::kPlanesApart,
                    static_cast<uint8_t>(plane_width));
        return;
      }
    } else if (EncodeWhole(src, n, compression, zstd_level, filter, plane_width, out)) {
      WriteHeader(&(*out)[0], ChunkCodec::kZstd, static_cast<uint32_t>(n), sum, filter,
                  filter == ChunkFilter::kNone ? 0 : static_cast<uint8_t>(plane_width));
      return;
    }
  }
  // Raw: nothing to compress, or compressing did not pay.
  out->resize(kChunkHeaderSize + n);
  EncodeRawChunkAt(raw, n, out->data(), content_hash);
}

void EncodeRawChunkAt(const void* raw, size_t n, char* value, const char* content_hash) {
  if (content_hash != nullptr) {
    if (n > 0) std::memcpy(value + kChunkHeaderSize, raw, n);
    WriteHeader(value, ChunkCodec::kRaw, static_cast<uint32_t>(n), ChecksumFromContentHash(content_hash, raw, n));
    return;
  }
  const uint64_t copied_sum = CopyAndChecksum(value + kChunkHeaderSize, static_cast<const char*>(raw), n);
  WriteHeader(value, ChunkCodec::kRaw, static_cast<uint32_t>(n), copied_sum);
}

Status DecodeChunk(std::string_view value, uint64_t expected_raw, void* dest) {
  Header h;
  Status st = ParseHeader(value, &h);
  if (!st.ok()) return st;
  if (h.raw_len != expected_raw) {
    return Status::DataLoss("chunk holds " + std::to_string(h.raw_len) + " bytes, metadata expects " +
                            std::to_string(expected_raw));
  }
  std::string_view payload = value.substr(kChunkHeaderSize);
  if (h.codec == ChunkCodec::kRaw) {
    if (h.filter != ChunkFilter::kNone) return Status::DataLoss("raw chunk has a filter");
    if (payload.size() != h.raw_len) {
      return Status::DataLoss("raw chunk payload is " + std::to_string(payload.size()) + " bytes, header says " +
                              std::to_string(h.raw_len));
    }
    // Copy and verify in one pass over the bytes.
    if (CopyAndChecksum(static_cast<char*>(dest), payload.data(), h.raw_len) != h.checksum) {
      return Status::DataLoss("chunk checksum mismatch");
    }
    return Status::OK();
  } else if (h.filter == ChunkFilter::kPlanesApart) {
    if (h.raw_len % h.filter_param != 0) {
      return Status::DataLoss("chunk of " + std::to_string(h.raw_len) + " bytes does not split into planes of " +
                              std::to_string(h.filter_param));
    }
    std::string& scratch = Scratch();
    scratch.resize(h.raw_len);
    const char* planes[8];
    st = DecodePlanesApart(payload, h.raw_len, h.filter_param, scratch.data(), planes);
    if (!st.ok()) return st;
    JoinPlaneViews(planes, h.raw_len / h.filter_param, h.filter_param, static_cast<char*>(dest));
  } else {
    const bool planes = h.filter == ChunkFilter::kBytePlanes;
    if (planes && h.raw_len % h.filter_param != 0) {
      return Status::DataLoss("chunk of " + std::to_string(h.raw_len) + " bytes does not split into planes of " +
                              std::to_string(h.filter_param));
    }
    char* target = static_cast<char*>(dest);
    if (planes) {
      Scratch().resize(h.raw_len);
      target = Scratch().data();
    }
    size_t z = ZSTD_decompressDCtx(DCtx(), target, h.raw_len, payload.data(), payload.size());
    if (ZSTD_isError(z)) return Status::DataLoss(std::string("zstd chunk does not decode: ") + ZSTD_getErrorName(z));
    if (z != h.raw_len) {
      return Status::DataLoss("zstd chunk decodes to " + std::to_string(z) + " bytes, header says " +
                              std::to_string(h.raw_len));
    }
    if (planes) JoinPlanes(target, h.raw_len, h.filter_param, static_cast<char*>(dest));
  }
  if (Checksum(dest, h.raw_len) != h.checksum) return Status::DataLoss("chunk checksum mismatch");
  return Status::OK();
}

Status DecodeChunkView(std::string_view value, uint64_t expected_raw, std::string* scratch, std::string_view* out) {
  Header h;
  Status st = ParseHeader(value, &h);
  if (!st.ok()) return st;
  if (h.codec == ChunkCodec::kRaw && h.filter == ChunkFilter::kNone && h.raw_len == expected_raw &&
      value.size() == kChunkHeaderSize + h.raw_len) {
    std::string_view payload = value.substr(kChunkHeaderSize);
    if (Checksum(payload.data(), payload.size()) != h.checksum) return Status::DataLoss("chunk checksum mismatch");
    *out = payload;
    return Status::OK();
  }
  // Everything else (and every malformed raw chunk, for its precise error).
  scratch->resize(expected_raw);
  st = DecodeChunk(value, expected_raw, scratch->data());
  if (st.ok()) *out = std::string_view(scratch->data(), expected_raw);
  return st;
}

Status VisitChunk(std::string_view value, uint64_t expected_raw, std::string* scratch,
                  const std::function<Status(uint64_t begin, const char* data, uint64_t n)>& visit) {
  Header h;
  Status st = ParseHeader(value, &h);
  if (!st.ok()) return st;
  // Block by block: each block is checksummed and visited while it is in
  // the cache, so its bytes are read from memory once. block_at(off, len)
  // gives the raw bytes [off, off + len).
  constexpr uint64_t kBlock = 64 << 10;  // a multiple of every plane width
  auto visit_blocks = [&](const std::function<const char*(uint64_t off, uint64_t len)>& block_at) -> Status {
    XXH3_state_t state;
    XXH3_64bits_reset(&state);
    for (uint64_t off = 0; off < h.raw_len; off += kBlock) {
      const uint64_t len = std::min<uint64_t>(kBlock, h.raw_len - off);
      const char* data = block_at(off, len);
      XXH3_64bits_update(&state, data, len);
      RETURN_IF_ERROR(visit(off, data, len));
    }
    if (XXH3_64bits_digest(&state) != h.checksum) return Status::DataLoss("chunk checksum mismatch");
    return Status::OK();
  };
  if (h.codec == ChunkCodec::kRaw && h.filter == ChunkFilter::kNone && h.raw_len == expected_raw &&
      value.size() == kChunkHeaderSize + h.raw_len) {
    const char* payload = value.data() + kChunkHeaderSize;
    return visit_blocks([&](uint64_t off, uint64_t) { return payload + off; });
  }
  if (h.codec == ChunkCodec::kZstd && h.filter == ChunkFilter::kPlanesApart && h.raw_len == expected_raw &&
      h.filter_param > 1 && h.filter_param <= 8 && h.raw_len % h.filter_param == 0) {
    // Byte planes: decoded whole, then joined a block at a time into a
    // cache-sized buffer (not into a chunk-sized one copied again).
    const size_t w = h.filter_param;
    std::string& planes_scratch = Scratch();
    planes_scratch.resize(h.raw_len);
    const char* planes[8];
    st = DecodePlanesApart(value.substr(kChunkHeaderSize), h.raw_len, w, planes_scratch.data(), planes);
    if (!st.ok()) return st;
    std::string& block = PlaneScratch();
    block.resize(kBlock);
    return visit_blocks([&](uint64_t off, uint64_t len) {
      const char* views[8];
      for (size_t k = 0; k < w; ++k) views[k] = planes[k] + off / w;
      JoinPlaneViews(views, len / w, w, block.data());
      return static_cast<const char*>(block.data());
    });
  }
  std::string_view whole;
  RETURN_IF_ERROR(DecodeChunkView(value, expected_raw, scratch, &whole));
  return whole.empty() ? Status::OK() : visit(0, whole.data(), whole.size());
}

void FinishRawChunk(std::string* value, const char* content_hash) {
  FinishRawChunkAt(value->data(), value->size() - kChunkHeaderSize, content_hash);
}

void FinishRawChunkAt(char* value, size_t n, const char* content_hash) {
  const char* raw = value + kChunkHeaderSize;
  WriteHeader(value, ChunkCodec::kRaw, static_cast<uint32_t>(n),
              content_hash != nullptr ? ChecksumFromContentHash(content_hash, raw, n) : Checksum(raw, n));
}

void HashRawChunkPieces(const std::vector<std::string_view>& pieces, char* content_hash,
                        std::vector<uint32_t>* crc32cs, char* header) {
  // (XXH3's streaming digests equal its one-shot hashes, short inputs too;
  // its 128-bit and 64-bit states take the same updates.)
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state(XXH3_createState(), XXH3_freeState);
  if (content_hash != nullptr) {
    XXH3_128bits_reset(state.get());
  } else {
    XXH3_64bits_reset(state.get());
  }
  constexpr size_t kSlice = 64 << 10;
  size_t n = 0;
  if (crc32cs != nullptr) crc32cs->assign(pieces.size(), 0);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::string_view p = pieces[i];
    for (size_t at = 0; at < p.size(); at += kSlice) {
      const size_t k = std::min(kSlice, p.size() - at);
      if (content_hash != nullptr) {
        XXH3_128bits_update(state.get(), p.data() + at, k);
      } else {
        XXH3_64bits_update(state.get(), p.data() + at, k);
      }
      if (crc32cs != nullptr) (*crc32cs)[i] = Crc32c(p.data() + at, k, (*crc32cs)[i]);
    }
    n += p.size();
  }
  uint64_t sum = 0;
  if (content_hash != nullptr) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(state.get()));
    std::memcpy(content_hash, c.digest, kChunkHashBytes);
    if (n <= 240) {  // (XXH3_MIDSIZE_MAX: the 64-bit hash is not the 128's low half)
      std::string joined;
      for (std::string_view p : pieces) joined.append(p);
      sum = Checksum(joined.data(), n);
    } else {
      sum = ChecksumFromContentHash(content_hash, nullptr, n);
    }
  } else {
    sum = XXH3_64bits_digest(state.get());
  }
  if (header != nullptr) WriteHeader(header, ChunkCodec::kRaw, static_cast<uint32_t>(n), sum);
}

StatusOr<std::string> DecodeChunkToString(std::string_view value) {
  Header h;
  Status st = ParseHeader(value, &h);
  if (!st.ok()) return st;
  std::string out(h.raw_len, '\0');
  st = DecodeChunk(value, h.raw_len, out.data());
  if (!st.ok()) return st;
  return out;
}

uint64_t ChecksumFromContentHash(const char* content_hash, const void* data, size_t n) {
  if (n <= 240) return Checksum(data, n);  // (XXH3_MIDSIZE_MAX: its short paths differ)
  XXH128_canonical_t c;
  std::memcpy(c.digest, content_hash, kChunkHashBytes);
  return XXH128_hashFromCanonical(&c).low64;
}

void ChunkContentHash(const char* data, size_t n, char* out) {
  const XXH128_hash_t h = XXH3_128bits(data, n);
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);  // big-endian high, then low
  std::memcpy(out, c.digest, kChunkHashBytes);
}

uint32_t PieceEncoding(Compression compression, int zstd_level) {
  const uint32_t level = compression == Compression::kNone ? 0 : static_cast<uint32_t>(zstd_level) & 0xff;
  return (static_cast<uint32_t>(compression) + 1) << 8 | level;
}

}  // namespace ckptdb
