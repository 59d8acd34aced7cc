#include "format/huffman_frame.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "util/le_bytes.h"

// The zstd format pieces written here (RFC 8878): frame header (3.1.1.1),
// block header (3.1.1.2), literals section (3.1.1.3.1), Huffman tree
// description (4.2.1) with FSE-coded weights (4.1), Huffman streams
// (4.2.2), and an empty sequences section (3.1.1.3.2).
namespace ckptdb {

namespace {

constexpr int kMaxBits = 11;           // zstd's longest Huffman code
constexpr size_t kBlock = 128 << 10;   // zstd's largest block
constexpr size_t kMinBytes = 1 << 10;  // below this, zstd itself
constexpr size_t kFrameHeader = 9;     // magic, descriptor, 4-byte content size

// A Huffman code over byte values: entry[s] = code << 8 | length (0: no
// code); codes as zstd assigns them from the lengths (longest first, then
// by symbol).
struct Code {
  uint32_t entry[256];
  unsigned char len[256];
  unsigned max_sym;
  int table_log;
};

// Code lengths for counts[0..255] (zero: no code), at most kMaxBits. False
// with fewer than 2 symbols.
bool BuildCode(const uint64_t* counts, Code* h) {
  int order[256], n = 0;
  for (int s = 0; s < 256; ++s) {
    if (counts[s] > 0) order[n++] = s;
  }
  if (n < 2) return false;
  std::stable_sort(order, order + n, [&](int a, int b) { return counts[a] < counts[b]; });
  // Huffman's tree with two queues: the leaves by weight, then the inner
  // nodes in the order they are made (which is by weight too).
  uint64_t weight[512];
  int parent[512];
  for (int i = 0; i < n; ++i) weight[i] = counts[order[i]];
  int leaf = 0, inner = n, made = n;
  auto take = [&]() { return leaf < n && (inner == made || weight[leaf] <= weight[inner]) ? leaf++ : inner++; };
  while (made < 2 * n - 1) {
    const int a = take(), b = take();
    weight[made] = weight[a] + weight[b];
    parent[a] = parent[b] = made;
    ++made;
  }
  int depth[512], of_len[64] = {0}, longest = 0;
  depth[2 * n - 2] = 0;
  for (int i = 2 * n - 3; i >= 0; --i) depth[i] = depth[parent[i]] + 1;
  for (int i = 0; i < n; ++i) {
    ++of_len[depth[i]];
    longest = std::max(longest, depth[i]);
  }
  // Lengths over kMaxBits moved up in pairs, the code kept complete (the
  // JPEG standard's Annex K.3 adjustment).
  for (int l = longest; l > kMaxBits; --l) {
    while (of_len[l] > 0) {
      int j = l - 2;
      while (of_len[j] == 0) --j;
      of_len[l] -= 2;
      of_len[l - 1] += 1;
      of_len[j + 1] += 2;
      of_len[j] -= 1;
    }
  }
  longest = std::min(longest, kMaxBits);
  std::memset(h->len, 0, sizeof h->len);
  int k = n - 1;  // the most frequent symbols get the shortest lengths
  for (int l = 1; l <= longest; ++l) {
    for (int c = 0; c < of_len[l]; ++c) h->len[order[k--]] = static_cast<unsigned char>(l);
  }
  // Starting value per length, longest first (zstd's HUF_buildCTable).
  uint32_t next[kMaxBits + 1] = {0};
  int per[kMaxBits + 1] = {0};
  for (int s = 0; s < 256; ++s) ++per[h->len[s]];
  uint32_t min = 0;
  for (int l = longest; l > 0; --l) {
    next[l] = min;
    min = (min + per[l]) >> 1;
  }
  std::memset(h->entry, 0, sizeof h->entry);
  for (int s = 0; s < 256; ++s) {
    if (h->len[s] == 0) continue;
    h->entry[s] = next[h->len[s]]++ << 8 | h->len[s];
    h->max_sym = static_cast<unsigned>(s);
  }
  h->table_log = longest;
  return true;
}

// Bits written forward, least significant first (zstd's BIT_CStream).
struct BitWriter {
  uint64_t acc = 0;
  unsigned bits = 0;
  char* p;
  explicit BitWriter(char* at) : p(at) {}
  void Add(uint64_t value, unsigned n) {  // n <= 24 between flushes of at most 32 bits pending
    acc |= (value & ((uint64_t{1} << n) - 1)) << bits;
    bits += n;
    if (bits >= 32) {
      PutLE32(p, static_cast<uint32_t>(acc));
      p += 4;
      acc >>= 32;
      bits -= 32;
    }
  }
  // The end mark (a 1 bit) and the last bytes; returns the end.
  char* Close() {
    Add(1, 1);
    PutLE64(p, acc);
    return p + (bits + 7) / 8;
  }
};

// zstd's FSE-coded Huffman weights (RFC 8878 4.2.1.2, zstd's
// HUF_compressWeights at table log 6, no symbol of probability below 1):
// the weights w[0..nw) (nw >= 2) at out; their size, 0 when 128 or more.
size_t WriteFseWeights(const unsigned char* w, unsigned nw, char* out) {
  constexpr int kLog = 6, kSize = 1 << kLog;
  unsigned cnt[16] = {0}, top = 0;
  for (unsigned i = 0; i < nw; ++i) {
    ++cnt[w[i]];
    top = std::max<unsigned>(top, w[i]);
  }
  // Every weight value 0..top gets at least 1 of the 64 slots.
  int norm[16], sum = 0;
  for (unsigned s = 0; s <= top; ++s) {
    norm[s] = std::max(1, static_cast<int>(uint64_t{cnt[s]} * kSize / nw));
    sum += norm[s];
  }
  while (sum != kSize) {
    int* big = std::max_element(norm, norm + top + 1);
    if (sum < kSize) {
      *big += kSize - sum;
      sum = kSize;
    } else {
      if (*big <= 1) return 0;
      --*big;
      --sum;
    }
  }
  // The normalized counts (zstd's FSE_writeNCount, no zero counts).
  char* const end_limit = out + 127;
  BitWriter bw(out);
  bw.Add(kLog - 5, 4);
  int remaining = kSize + 1, threshold = kSize, nb = kLog + 1;
  for (unsigned s = 0; s <= top && remaining > 1; ++s) {
    int count = norm[s];
    const int max = (2 * threshold - 1) - remaining;
    remaining -= count;
    ++count;
    if (count >= threshold) count += max;
    bw.Add(static_cast<uint64_t>(count), count < max ? nb - 1 : nb);
    while (remaining < threshold) {
      --nb;
      threshold >>= 1;
    }
  }
  if (remaining != 1) return 0;
  // Flush to a byte boundary: the bitstream starts on the next byte.
  char* bits_at = bw.p + (bw.bits + 7) / 8;
  PutLE64(bw.p, bw.acc);
  // The encoding table (zstd's FSE_buildCTable): symbols spread over the
  // 64 states, each state's successor, and each symbol's transform.
  unsigned char spread[kSize];
  {
    const unsigned step = (kSize >> 1) + (kSize >> 3) + 3;
    unsigned pos = 0;
    for (unsigned s = 0; s <= top; ++s) {
      for (int i = 0; i < norm[s]; ++i) {
        spread[pos] = static_cast<unsigned char>(s);
        pos = (pos + step) & (kSize - 1);
      }
    }
  }
  uint16_t state_table[kSize];
  int cumul[17];
  cumul[0] = 0;
  for (unsigned s = 0; s <= top; ++s) cumul[s + 1] = cumul[s] + norm[s];
  {
    int next[17];
    std::memcpy(next, cumul, sizeof next);
    for (int u = 0; u < kSize; ++u) state_table[next[spread[u]]++] = static_cast<uint16_t>(kSize + u);
  }
  int find_state[16];
  uint32_t delta_bits[16];
  for (unsigned s = 0; s <= top; ++s) {
    if (norm[s] == 1) {
      delta_bits[s] = (kLog << 16) - (1 << kLog);
      find_state[s] = cumul[s] - 1;
    } else {
      int hb = 31 - __builtin_clz(static_cast<unsigned>(norm[s] - 1));
      const uint32_t max_out = kLog - hb;
      delta_bits[s] = (max_out << 16) - (static_cast<uint32_t>(norm[s]) << max_out);
      find_state[s] = cumul[s] - norm[s];
    }
  }
  // Two states, the weights from last to first: w[i] in state 1 for even
  // i, state 2 for odd i; the last two only start their states.
  uint32_t state[2];
  auto init = [&](uint32_t* st, unsigned s) {
    const uint32_t out_bits = (delta_bits[s] + (1 << 15)) >> 16;
    const uint32_t v = (out_bits << 16) - delta_bits[s];
    *st = state_table[(v >> out_bits) + find_state[s]];
  };
  BitWriter fw(bits_at);
  auto encode = [&](uint32_t* st, unsigned s) {
    const uint32_t out_bits = (*st + delta_bits[s]) >> 16;
    fw.Add(*st, out_bits);
    *st = state_table[(*st >> out_bits) + find_state[s]];
  };
  init(&state[(nw - 1) & 1], w[nw - 1]);
  init(&state[(nw - 2) & 1], w[nw - 2]);
  for (unsigned i = nw - 2; i-- > 0;) encode(&state[i & 1], w[i]);
  fw.Add(state[1], kLog);  // state 2 first, as zstd flushes them
  fw.Add(state[0], kLog);
  char* end = fw.Close();
  if (end > end_limit) return 0;
  return static_cast<size_t>(end - out);
}

// The Huffman tree description (4.2.1) of h: direct 4-bit weights for
// symbols up to 128, else FSE-coded ones. Its size, 0 when it does not fit.
size_t WriteTree(const Code& h, char* out) {
  const unsigned nw = h.max_sym;  // weights of 0..max_sym-1; max_sym's is implied
  unsigned char w[256];
  for (unsigned s = 0; s < nw; ++s) w[s] = h.len[s] ? static_cast<unsigned char>(h.table_log + 1 - h.len[s]) : 0;
  if (nw <= 128) {
    out[0] = static_cast<char>(127 + nw);
    for (unsigned s = 0; s < nw; s += 2) out[1 + s / 2] = static_cast<char>(w[s] << 4 | (s + 1 < nw ? w[s + 1] : 0));
    return 1 + (nw + 1) / 2;
  }
  const size_t z = WriteFseWeights(w, nw, out + 1);
  if (z == 0) return 0;
  out[0] = static_cast<char>(z);
  return 1 + z;
}

// Pair entries: pair[a | b << 8] is a's code above b's, b added first (the
// streams are written from their last symbol back).
struct Tables {
  Code code;
  uint32_t pair[1 << 16];
};

void BuildPairs(const Code& h, const unsigned char* syms, unsigned nsyms, uint32_t* pair) {
  for (unsigned j = 0; j < nsyms; ++j) {
    const unsigned b = syms[j];
    const uint32_t eb = h.entry[b], lb = eb & 0xff;
    for (unsigned i = 0; i < nsyms; ++i) {
      const unsigned a = syms[i];
      const uint32_t ea = h.entry[a];
      pair[a | b << 8] = ((eb >> 8 | (ea >> 8) << lb) << 8) | (lb + (ea & 0xff));
    }
  }
}

#define CKPTDB_HUF_ADD(c, pos, e)                  \
  do {                                             \
    const uint32_t e_ = (e);                       \
    c |= static_cast<uint64_t>(e_ >> 8) << pos;    \
    pos += e_ & 0xff;                              \
  } while (0)
#define CKPTDB_HUF_FLUSH(c, pos, p) \
  do {                              \
    PutLE64(p, c);                  \
    p += pos >> 3;                  \
    c >>= pos & ~7u;                \
    pos &= 7;                       \
  } while (0)

inline uint32_t Load16(const unsigned char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// The 4 Huffman streams of in[0, n) (n >= kMinBytes) after their jump table
// (4.2.2), at out; tmp holds streams 2-4 while they are written. Their size.
size_t EncodeStreams(const unsigned char* in, size_t n, const Tables& t, char* out, char* tmp) {
  const size_t seg = (n + 3) / 4, last = n - 3 * seg;
  const size_t room = seg * kMaxBits / 8 + 16;
  char* const start[4] = {out + 6, tmp, tmp + room, tmp + 2 * room};
  char *p0 = start[0], *p1 = start[1], *p2 = start[2], *p3 = start[3];
  uint64_t c0 = 0, c1 = 0, c2 = 0, c3 = 0;
  unsigned q0 = 0, q1 = 0, q2 = 0, q3 = 0;
  const uint32_t* e = t.code.entry;
  const uint32_t* pe = t.pair;
  const unsigned char *s0 = in, *s1 = in + seg, *s2 = in + 2 * seg, *s3 = in + 3 * seg;
  size_t r = seg;  // symbols left in streams 1-3; stream 4 holds `last`
  for (; r > last; --r) {
    CKPTDB_HUF_ADD(c0, q0, e[s0[r - 1]]);
    CKPTDB_HUF_ADD(c1, q1, e[s1[r - 1]]);
    CKPTDB_HUF_ADD(c2, q2, e[s2[r - 1]]);
    CKPTDB_HUF_FLUSH(c0, q0, p0);
    CKPTDB_HUF_FLUSH(c1, q1, p1);
    CKPTDB_HUF_FLUSH(c2, q2, p2);
  }
  for (; r % 4 != 0; --r) {
    CKPTDB_HUF_ADD(c0, q0, e[s0[r - 1]]);
    CKPTDB_HUF_ADD(c1, q1, e[s1[r - 1]]);
    CKPTDB_HUF_ADD(c2, q2, e[s2[r - 1]]);
    CKPTDB_HUF_ADD(c3, q3, e[s3[r - 1]]);
    CKPTDB_HUF_FLUSH(c0, q0, p0);
    CKPTDB_HUF_FLUSH(c1, q1, p1);
    CKPTDB_HUF_FLUSH(c2, q2, p2);
    CKPTDB_HUF_FLUSH(c3, q3, p3);
  }
  // 4 symbols (two pairs) per stream between flushes: at most 7 + 44 bits.
  for (; r > 0; r -= 4) {
    CKPTDB_HUF_ADD(c0, q0, pe[Load16(s0 + r - 2)]);
    CKPTDB_HUF_ADD(c1, q1, pe[Load16(s1 + r - 2)]);
    CKPTDB_HUF_ADD(c2, q2, pe[Load16(s2 + r - 2)]);
    CKPTDB_HUF_ADD(c3, q3, pe[Load16(s3 + r - 2)]);
    CKPTDB_HUF_ADD(c0, q0, pe[Load16(s0 + r - 4)]);
    CKPTDB_HUF_ADD(c1, q1, pe[Load16(s1 + r - 4)]);
    CKPTDB_HUF_ADD(c2, q2, pe[Load16(s2 + r - 4)]);
    CKPTDB_HUF_ADD(c3, q3, pe[Load16(s3 + r - 4)]);
    CKPTDB_HUF_FLUSH(c0, q0, p0);
    CKPTDB_HUF_FLUSH(c1, q1, p1);
    CKPTDB_HUF_FLUSH(c2, q2, p2);
    CKPTDB_HUF_FLUSH(c3, q3, p3);
  }
  // Each stream ends with a 1 bit above its last code.
  size_t sz[4];
  CKPTDB_HUF_ADD(c0, q0, 1u << 8 | 1);
  CKPTDB_HUF_ADD(c1, q1, 1u << 8 | 1);
  CKPTDB_HUF_ADD(c2, q2, 1u << 8 | 1);
  CKPTDB_HUF_ADD(c3, q3, 1u << 8 | 1);
  PutLE64(p0, c0);
  PutLE64(p1, c1);
  PutLE64(p2, c2);
  PutLE64(p3, c3);
  sz[0] = (p0 - start[0]) + (q0 + 7) / 8;
  sz[1] = (p1 - start[1]) + (q1 + 7) / 8;
  sz[2] = (p2 - start[2]) + (q2 + 7) / 8;
  sz[3] = (p3 - start[3]) + (q3 + 7) / 8;
  char* p = out + 6 + sz[0];
  for (int k = 1; k < 4; ++k) {
    std::memcpy(p, start[k], sz[k]);
    p += sz[k];
  }
  for (int k = 0; k < 3; ++k) {
    out[2 * k] = static_cast<char>(sz[k]);
    out[2 * k + 1] = static_cast<char>(sz[k] >> 8);
  }
  return 6 + sz[0] + sz[1] + sz[2] + sz[3];
}

void PutLE24(char* p, uint32_t v) {
  p[0] = static_cast<char>(v);
  p[1] = static_cast<char>(v >> 8);
  p[2] = static_cast<char>(v >> 16);
}

// The least and greatest byte value below 128 (lo[0], hi[0]) and at or
// above it (lo[1], hi[1]); lo > hi for a half without bytes.
struct ByteRanges {
  unsigned lo[2] = {255, 255};
  unsigned hi[2] = {0, 0};
};

// Widens *r to cover in[0, n).
void AddByteRanges(const void* data, size_t n, ByteRanges* r) {
  const auto* in = static_cast<const unsigned char*>(data);
  size_t i = 0;
  // The least and greatest of x and of x ^ 0x80 (which swaps the halves):
  // min(x) is the low half's least if it has any byte, max(x ^ 0x80) ^ 0x80
  // its greatest; max(x) and min(x ^ 0x80) ^ 0x80 likewise for the high half.
  unsigned min_x = 255, max_x = 0, min_y = 255, max_y = 0;
#if defined(__SSE2__)
  if (n >= 32) {
    const __m128i flip = _mm_set1_epi8(static_cast<char>(0x80));
    __m128i mnx[2], mxx[2], mny[2], mxy[2];
    for (int k = 0; k < 2; ++k) {
      mnx[k] = mny[k] = _mm_set1_epi8(static_cast<char>(0xff));
      mxx[k] = mxy[k] = _mm_setzero_si128();
    }
    for (; i + 32 <= n; i += 32) {
      for (int k = 0; k < 2; ++k) {
        const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 16 * k));
        const __m128i y = _mm_xor_si128(x, flip);
        mnx[k] = _mm_min_epu8(mnx[k], x);
        mxx[k] = _mm_max_epu8(mxx[k], x);
        mny[k] = _mm_min_epu8(mny[k], y);
        mxy[k] = _mm_max_epu8(mxy[k], y);
      }
    }
    alignas(16) unsigned char v[4][16];
    _mm_store_si128(reinterpret_cast<__m128i*>(v[0]), _mm_min_epu8(mnx[0], mnx[1]));
    _mm_store_si128(reinterpret_cast<__m128i*>(v[1]), _mm_max_epu8(mxx[0], mxx[1]));
    _mm_store_si128(reinterpret_cast<__m128i*>(v[2]), _mm_min_epu8(mny[0], mny[1]));
    _mm_store_si128(reinterpret_cast<__m128i*>(v[3]), _mm_max_epu8(mxy[0], mxy[1]));
    for (int k = 0; k < 16; ++k) {
      min_x = std::min<unsigned>(min_x, v[0][k]);
      max_x = std::max<unsigned>(max_x, v[1][k]);
      min_y = std::min<unsigned>(min_y, v[2][k]);
      max_y = std::max<unsigned>(max_y, v[3][k]);
    }
  }
#endif
  for (; i < n; ++i) {
    min_x = std::min<unsigned>(min_x, in[i]);
    max_x = std::max<unsigned>(max_x, in[i]);
    min_y = std::min<unsigned>(min_y, in[i] ^ 0x80u);
    max_y = std::max<unsigned>(max_y, in[i] ^ 0x80u);
  }
  if (n > 0 && min_x < 128) {  // bytes below 128
    r->lo[0] = std::min(r->lo[0], min_x);
    r->hi[0] = std::max(r->hi[0], max_y ^ 0x80u);
  }
  if (n > 0 && max_x >= 128) {  // bytes of 128 or more
    r->lo[1] = std::min(r->lo[1], min_y ^ 0x80u);
    r->hi[1] = std::max(r->hi[1], max_x);
  }
}

Tables& ThreadTables() {
  static thread_local std::unique_ptr<Tables> t(new Tables);
  return *t;
}

std::string& StreamScratch() {
  static thread_local std::string s;
  return s;
}

}  // namespace

// Room for blocks coded before they turn out not to shrink: 11 bits a byte,
// each block's headers, tree and stream ends.
size_t HuffmanFrameBound(size_t n) { return kFrameHeader + n * kMaxBits / 8 + (n / kBlock + 1) * 600 + 64; }

HuffmanFrame EncodeHuffmanFrame(const void* data, size_t n, double keep_below, char* out, size_t* size) {
  const auto* in = static_cast<const unsigned char*>(data);
  if (n < kMinBytes || n > 0xffffffffu) return HuffmanFrame::kUnsupported;
  // The sample's histogram, 4 tables apart to break store-to-load chains.
  uint32_t hist[4][256] = {};
  size_t sampled = 0;
  auto count = [&](const unsigned char* p, size_t len) {
    size_t i = 0;
    for (; i + 4 <= len; i += 4) {
      ++hist[0][p[i]];
      ++hist[1][p[i + 1]];
      ++hist[2][p[i + 2]];
      ++hist[3][p[i + 3]];
    }
    for (; i < len; ++i) ++hist[0][p[i]];
    sampled += len;
  };
  if (n <= (32u << 10)) {
    count(in, n);
  } else {
    constexpr size_t kSlices = 16, kSlice = 1 << 10;
    for (size_t k = 0; k < kSlices; ++k) count(in + (n - kSlice) * k / (kSlices - 1), kSlice);
  }
  uint64_t sample_counts[256];
  for (int s = 0; s < 256; ++s) sample_counts[s] = uint64_t{hist[0][s]} + hist[1][s] + hist[2][s] + hist[3][s];
  Tables& t = ThreadTables();
  // Bits of the sample under code h, against keep_below of its size.
  auto pays = [&](const Code& h) {
    uint64_t bits = 0;
    for (int s = 0; s < 256; ++s) bits += sample_counts[s] * h.len[s];
    return static_cast<double>(bits) < keep_below * 8.0 * static_cast<double>(sampled);
  };
  // The sample's own code first: when even that does not pay, the plane is
  // not worth a pass over all of it.
  if (!BuildCode(sample_counts, &t.code)) return HuffmanFrame::kUnsupported;
  if (!pays(t.code)) return HuffmanFrame::kNotWorth;
  // The plane's code: sampled values weigh 64 times a value the sample
  // missed, which still gets a code (every value in the two ranges).
  ByteRanges ranges;
  AddByteRanges(in, n, &ranges);
  uint64_t counts[256] = {};
  unsigned char syms[256];
  unsigned nsyms = 0;
  for (int h = 0; h < 2; ++h) {
    for (unsigned s = ranges.lo[h]; s <= ranges.hi[h]; ++s) {
      counts[s] = 64 * sample_counts[s] + 1;
      syms[nsyms++] = static_cast<unsigned char>(s);
    }
  }
  if (!BuildCode(counts, &t.code)) return HuffmanFrame::kUnsupported;
  if (!pays(t.code)) return HuffmanFrame::kNotWorth;
  char tree[512];  // room for a description that turns out too long
  const size_t tree_size = WriteTree(t.code, tree);
  if (tree_size == 0) return HuffmanFrame::kUnsupported;
  BuildPairs(t.code, syms, nsyms, t.pair);

  std::string& scratch = StreamScratch();
  scratch.resize(3 * ((kBlock / 4 + 1) * kMaxBits / 8 + 16));
  char* p = out;
  PutLE32(p, 0xFD2FB528u);               // magic
  p[4] = static_cast<char>(0x80 | 0x20);  // 4-byte content size, single segment
  PutLE32(p + 5, static_cast<uint32_t>(n));
  p += kFrameHeader;
  bool described = false;  // a block before this one described the code
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t len = std::min(kBlock, n - off);
    const bool last = off + len == n;
    char* const block = p;
    if (len >= kMinBytes) {
      // Literals header of 5 bytes (size format 3: 4 streams, 18-bit sizes).
      char* const lit = block + 3;
      size_t tree_here = 0;
      if (!described) {
        std::memcpy(lit + 5, tree, tree_size);
        tree_here = tree_size;
      }
      const size_t csize = tree_here + EncodeStreams(in + off, len, t, lit + 5 + tree_here, scratch.data());
      const size_t content = 5 + csize + 1;
      if (content < len) {
        const uint64_t header = (described ? 3u : 2u) | 3u << 2 | uint64_t{len} << 4 | uint64_t{csize} << 22;
        PutLE32(lit, static_cast<uint32_t>(header));
        lit[4] = static_cast<char>(header >> 32);
        lit[5 + csize] = 0;  // no sequences
        PutLE24(block, (last ? 1u : 0u) | 2u << 1 | static_cast<uint32_t>(content) << 3);
        p = block + 3 + content;
        described = true;
        continue;
      }
    }
    // A raw block: too short to code, or it did not shrink.
    PutLE24(block, (last ? 1u : 0u) | static_cast<uint32_t>(len) << 3);
    std::memcpy(block + 3, in + off, len);
    p = block + 3 + len;
  }
  *size = static_cast<size_t>(p - out);
  return *size < n ? HuffmanFrame::kCoded : HuffmanFrame::kNotWorth;
}

}  // namespace ckptdb
