#include "format/chunk_codec.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "format/huffman_frame.h"
#include "chunk_codec_fixtures.inc"

namespace ckptdb {
namespace {

std::string Compressible(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i / 64) % 4);
  return s;
}

std::string Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

std::string Decode(const std::string& value, size_t n) {
  std::string out(n, '\0');
  Status st = DecodeChunk(value, n, out.data());
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

TEST(ChunkCodec, RoundTripEveryCompression) {
  for (Compression c : {Compression::kNone, Compression::kZstd, Compression::kAuto}) {
    for (const std::string& raw : {std::string(), Compressible(100000), Random(5000, 1)}) {
      std::string v;
      EncodeChunk(raw.data(), raw.size(), c, 3, &v);
      EXPECT_EQ(Decode(v, raw.size()), raw) << static_cast<int>(c);
    }
  }
}

TEST(ChunkCodec, CompressesWhatShrinksAndAutoKeepsRandomBytesRaw) {
  std::string raw = Compressible(1 << 20), v;
  EncodeChunk(raw.data(), raw.size(), Compression::kZstd, 1, &v);
  EXPECT_LT(v.size(), raw.size() / 10);
  EXPECT_EQ(v[1], static_cast<char>(ChunkCodec::kZstd));

  std::string noise = Random(1 << 16, 2);
  EncodeChunk(noise.data(), noise.size(), Compression::kAuto, 1, &v);
  EXPECT_EQ(v[1], static_cast<char>(ChunkCodec::kRaw));
  EXPECT_EQ(v.size(), noise.size() + kChunkHeaderSize);
}

struct Corruption {
  const char* name;
  Compression compression;
  void (*mutate)(std::string*);
  const char* expect;
};

TEST(ChunkCodec, EveryKindOfCorruptionIsDataLoss) {
  const Corruption cases[] = {
      {"flipped payload byte", Compression::kNone, [](std::string* v) { (*v)[kChunkHeaderSize + 10] ^= 1; },
       "checksum mismatch"},
      {"flipped zstd byte", Compression::kZstd, [](std::string* v) { (*v)[v->size() / 2] ^= 0x55; }, ""},
      {"truncated", Compression::kNone, [](std::string* v) { v->resize(v->size() - 1); }, "payload"},
      {"shorter than header", Compression::kNone, [](std::string* v) { v->resize(5); }, "shorter than its header"},
      {"unknown version", Compression::kNone, [](std::string* v) { (*v)[0] = 9; }, "unknown format version 9"},
      {"unknown codec", Compression::kNone, [](std::string* v) { (*v)[1] = 7; }, "unknown codec 7"},
      {"unknown filter", Compression::kNone, [](std::string* v) { (*v)[2] = 7; }, "unknown filter 7"},
      {"filter on a raw chunk", Compression::kNone, [](std::string* v) { (*v)[2] = 1, (*v)[3] = 4; }, "raw chunk has a filter"},
      {"bad plane width", Compression::kZstd, [](std::string* v) { (*v)[2] = 1, (*v)[3] = 3; }, "invalid width 3"},
      {"wrong length", Compression::kNone, [](std::string* v) { (*v)[4] ^= 1; }, "metadata expects"},
      {"flipped checksum", Compression::kNone, [](std::string* v) { (*v)[12] ^= 1; }, "checksum mismatch"},
  };
  std::string raw = Compressible(4096);
  for (const Corruption& c : cases) {
    std::string v;
    EncodeChunk(raw.data(), raw.size(), c.compression, 1, &v);
    c.mutate(&v);
    std::string out(raw.size(), '\0');
    Status st = DecodeChunk(v, raw.size(), out.data());
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << c.name << ": " << st;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << c.name << ": " << st;
  }
}

// bf16 values like trained weights (sigma 0.02): the exponent plane compresses.
std::string TrainedBF16(size_t elements) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.f, 0.02f);
  std::string s(elements * 2, '\0');
  for (size_t i = 0; i < elements; ++i) {
    float f = g(rng);
    uint32_t b;
    std::memcpy(&b, &f, 4);
    uint16_t h = static_cast<uint16_t>(b >> 16);
    std::memcpy(&s[i * 2], &h, 2);
  }
  return s;
}

TEST(ChunkCodec, BytePlanesRoundTripAndShrinkTrainedWeights) {
  std::string raw = TrainedBF16(1 << 20);
  std::string plain, planes;
  EncodeChunk(raw.data(), raw.size(), Compression::kZstd, 1, &plain);
  EncodeChunk(raw.data(), raw.size(), Compression::kZstd, 1, &planes, 2);
  EXPECT_EQ(planes[2], static_cast<char>(ChunkFilter::kBytePlanes));
  EXPECT_EQ(planes[3], 2);
  EXPECT_LT(planes.size(), plain.size());
  EXPECT_LT(planes.size(), raw.size() * 3 / 4) << "bf16 sigma=0.02 should compress below 0.75";
  EXPECT_EQ(Decode(planes, raw.size()), raw);
  for (size_t width : {4u, 8u}) {
    std::string r = Random(1 << 16, 9), v;
    EncodeChunk(r.data(), r.size(), Compression::kZstd, 1, &v, width);
    EXPECT_EQ(Decode(v, r.size()), r) << width;
  }
  // kAuto keeps a filtered chunk when it shrinks, and random floats raw.
  std::string v;
  EncodeChunk(raw.data(), raw.size(), Compression::kAuto, 1, &v, 2);
  EXPECT_EQ(v[1], static_cast<char>(ChunkCodec::kZstd));
  std::string noise = Random(1 << 20, 4);
  EncodeChunk(noise.data(), noise.size(), Compression::kAuto, 1, &v, 4);
  EXPECT_EQ(v[1], static_cast<char>(ChunkCodec::kRaw));
  EXPECT_EQ(v[2], 0);
}

// kAuto on floating point: each plane coded or stored on its own (filter 2).
TEST(ChunkCodec, AutoCodesOnlyThePlanesThatShrink) {
  std::string raw = TrainedBF16(1 << 20), v;
  EncodeChunk(raw.data(), raw.size(), Compression::kAuto, 1, &v, 2);
  EXPECT_EQ(v[1], static_cast<char>(ChunkCodec::kZstd));
  EXPECT_EQ(v[2], static_cast<char>(ChunkFilter::kPlanesApart));
  EXPECT_EQ(v[3], 2);
  // The low (mantissa) plane is stored as it is, the high one coded.
  const size_t count = raw.size() / 2;
  EXPECT_EQ(v[kChunkHeaderSize], 0) << "plane 0 stored";
  EXPECT_EQ(v[kChunkHeaderSize + 5 + count], 1) << "plane 1 coded";
  EXPECT_LT(v.size(), raw.size() * 70 / 100) << "bf16 sigma=0.02 should stay below 0.70";
  EXPECT_EQ(Decode(v, raw.size()), raw);
  // Widths 4 and 8: a constant high half codes, random low bytes are stored.
  for (size_t width : {4u, 8u}) {
    std::string r = Random(1 << 18, 11);
    for (size_t i = 0; i < r.size(); i += width) std::memset(&r[i + width / 2], 0x3f, width / 2);
    EncodeChunk(r.data(), r.size(), Compression::kAuto, 1, &v, width);
    EXPECT_EQ(v[2], static_cast<char>(ChunkFilter::kPlanesApart)) << width;
    EXPECT_LT(v.size(), r.size() * 6 / 10) << width;
    EXPECT_EQ(Decode(v, r.size()), r) << width;
  }
  // Damage in any part of a filter-2 value is DataLoss, never wrong bytes.
  EncodeChunk(raw.data(), raw.size(), Compression::kAuto, 1, &v, 2);
  std::string out(raw.size(), '\0');
  for (size_t at : {kChunkHeaderSize, kChunkHeaderSize + 1, kChunkHeaderSize + 100, kChunkHeaderSize + 5 + count,
                    kChunkHeaderSize + 5 + count + 2, v.size() - 1}) {
    std::string bad = v;
    bad[at] ^= 0x41;
    Status st = DecodeChunk(bad, raw.size(), out.data());
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << "byte " << at << ": " << st;
  }
  EXPECT_EQ(DecodeChunk(v.substr(0, v.size() - 3), raw.size(), out.data()).code(), StatusCode::kDataLoss);
  EXPECT_EQ(DecodeChunk(v + "x", raw.size(), out.data()).code(), StatusCode::kDataLoss);
}

// The raw bytes of the fixtures in chunk_codec_fixtures.inc: elements shaped
// like trained weights (a random sign, an exponent near 2^-6, random
// mantissa bytes), from a 32-bit LCG so that they never change.
std::string FixtureRaw(size_t count, size_t width) {
  std::string s(count * width, '\0');
  uint32_t x = 12345;
  for (size_t i = 0; i < count; ++i) {
    for (size_t b = 0; b < width; ++b) {
      x = x * 1664525u + 1013904223u;
      unsigned char c = static_cast<unsigned char>(x >> 24);
      if (b == width - 1) c = static_cast<unsigned char>((c & 0x80) | (0x3c + ((x >> 16) & 0xff) % 3 / 2 + ((x >> 20) & 1)));
      s[i * width + b] = static_cast<char>(c);
    }
  }
  return s;
}

std::string FromHex(const char* hex) {
  std::string out;
  for (const char* p = hex; p[0] != '\0' && p[1] != '\0'; p += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(p, 2), nullptr, 16)));
  }
  return out;
}

// Values written before the planes were Huffman-coded here still decode,
// and damage to them is still DataLoss.
TEST(ChunkCodec, ValuesOfTheEarlierPlaneCoderStillDecode) {
  for (auto [hex, width, size] : {std::tuple{kOldAutoBF16Hex, size_t{2}, size_t{1400}},
                                  std::tuple{kOldAutoF32Hex, size_t{4}, size_t{3459}}}) {
    SCOPED_TRACE(width);
    const std::string old = FromHex(hex), raw = FixtureRaw(1024, width);
    ASSERT_EQ(old.size(), size);
    EXPECT_EQ(old[1], static_cast<char>(ChunkCodec::kZstd));
    EXPECT_EQ(old[2], static_cast<char>(ChunkFilter::kPlanesApart));
    EXPECT_EQ(Decode(old, raw.size()), raw);
    std::string seen, scratch;
    ASSERT_TRUE(VisitChunk(old, raw.size(), &scratch, [&](uint64_t, const char* d, uint64_t n) {
                  seen.append(d, n);
                  return Status::OK();
                }).ok());
    EXPECT_EQ(seen, raw);
    std::string out(raw.size(), '\0');
    for (size_t at = kChunkHeaderSize; at < old.size(); at += 37) {
      std::string bad = old;
      bad[at] ^= 0x08;
      EXPECT_EQ(DecodeChunk(bad, raw.size(), out.data()).code(), StatusCode::kDataLoss) << "byte " << at;
    }
    // Encoded now, the same bytes come back too.
    std::string v;
    EncodeChunk(raw.data(), raw.size(), Compression::kAuto, 1, &v, width);
    EXPECT_EQ(v[2], static_cast<char>(ChunkFilter::kPlanesApart));
    EXPECT_EQ(Decode(v, raw.size()), raw);
  }
}

// EncodeHuffmanFrame's frames are zstd frames: ZSTD_decompress gives the
// bytes back, through both kinds of tree description (direct 4-bit weights
// for values up to 128, FSE-coded ones above), blocks that did not shrink
// stored raw between coded ones, and values that the sample missed.
TEST(HuffmanFrame, FramesAreZstdFramesOfTheSameBytes) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.f, 0.02f);
  std::geometric_distribution<int> geo(0.05);
  struct Case {
    std::string name, bytes;
    int tree;  // 1 direct weights, 2 FSE-coded weights
  };
  std::vector<Case> cases;
  for (size_t n : {size_t{1024}, size_t{1025}, size_t{4099}, size_t{131072}, size_t{131073}, size_t{(2 << 20) + 7}}) {
    std::string sign_exp(n, '\0'), exp(n, '\0');
    for (size_t i = 0; i < n; ++i) {
      const float f = g(rng);
      uint32_t b;
      std::memcpy(&b, &f, 4);
      sign_exp[i] = static_cast<char>(b >> 24);  // bf16's high byte: values on both sides of 128
      exp[i] = static_cast<char>((b >> 24) & 0x7f);
    }
    cases.push_back({"sign and exponent " + std::to_string(n), sign_exp, 2});
    cases.push_back({"exponent " + std::to_string(n), exp, 1});
  }
  std::string wide(300000, '\0');  // up to 256 values, most common at 255
  for (char& c : wide) c = static_cast<char>(255 - std::min(255, geo(rng)));
  cases.push_back({"geometric over 256 values", wide, 2});
  std::string rare(500000, 'a');  // values outside the sample's slices
  for (size_t i = 0; i < rare.size(); i += 3) rare[i] = 'b';
  rare[777] = static_cast<char>(0xff);
  rare[123457] = '\0';
  rare[rare.size() - 1] = 'z';
  cases.push_back({"outliers the sample misses", rare, 0});
  std::string mixed(600000, '\0');  // blocks 2-3 do not shrink
  for (size_t i = 0; i < mixed.size(); ++i) {
    mixed[i] = static_cast<char>(i >= 200000 && i < 400000 ? rng() : 60 + rng() % 3);
  }
  cases.push_back({"a raw block between coded ones", mixed, 2});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string frame(HuffmanFrameBound(c.bytes.size()), '\0'), back(c.bytes.size(), '\0');
    size_t z = 0;
    ASSERT_EQ(EncodeHuffmanFrame(c.bytes.data(), c.bytes.size(), 1.0, frame.data(), &z), HuffmanFrame::kCoded);
    EXPECT_LT(z, c.bytes.size());
    const size_t d = ZSTD_decompress(back.data(), back.size(), frame.data(), z);
    ASSERT_FALSE(ZSTD_isError(d)) << ZSTD_getErrorName(d);
    EXPECT_EQ(d, c.bytes.size());
    EXPECT_TRUE(back == c.bytes);
    // The first block's tree description follows the frame header (9
    // bytes), the block header (3) and the literals header (5).
    if (c.tree != 0) {
      EXPECT_EQ(static_cast<unsigned char>(frame[17]) >= 128 ? 1 : 2, c.tree);
    }
  }
  // Trained bf16's high bytes (the largest case) code near their entropy
  // (2.7 bits).
  const std::string& big = cases[2 * 5].bytes;
  std::string frame(HuffmanFrameBound(big.size()), '\0');
  size_t z = 0;
  ASSERT_EQ(EncodeHuffmanFrame(big.data(), big.size(), 0.9, frame.data(), &z), HuffmanFrame::kCoded);
  EXPECT_LT(z, big.size() * 36 / 100);
}

TEST(HuffmanFrame, SaysWhatItDoesNotCode) {
  std::string frame(HuffmanFrameBound(1 << 16), '\0');
  size_t z = 0;
  EXPECT_EQ(EncodeHuffmanFrame(Random(1 << 16, 6).data(), 1 << 16, 0.9, frame.data(), &z), HuffmanFrame::kNotWorth);
  const std::string same(1 << 16, 'q'), small = Compressible(1000);
  EXPECT_EQ(EncodeHuffmanFrame(same.data(), same.size(), 0.9, frame.data(), &z), HuffmanFrame::kUnsupported);
  EXPECT_EQ(EncodeHuffmanFrame(small.data(), small.size(), 0.9, frame.data(), &z), HuffmanFrame::kUnsupported);
  // Two values code to 1 bit each: not worth it below 1/10 of the size.
  std::string two(1 << 16, 'a');
  for (size_t i = 0; i < two.size(); i += 2) two[i] = 'b';
  EXPECT_EQ(EncodeHuffmanFrame(two.data(), two.size(), 0.1, frame.data(), &z), HuffmanFrame::kNotWorth);
  EXPECT_EQ(EncodeHuffmanFrame(two.data(), two.size(), 0.9, frame.data(), &z), HuffmanFrame::kCoded);
}

// kAuto's three kinds of plane, each round trip, and damage anywhere in a
// Huffman-coded plane is DataLoss.
TEST(ChunkCodec, EveryKindOfPlaneRoundTripsAndDamageIsDataLoss) {
  // f32 whose top two bytes are trained bf16 weights: planes 0-2 random
  // (stored), plane 3 Huffman-coded.
  std::string r = Random(1 << 18, 12);
  const std::string bf = TrainedBF16(1 << 16);
  for (size_t i = 0; i < r.size() / 4; ++i) {
    r[4 * i + 2] = bf[2 * i];      // bf16's low byte: stored
    r[4 * i + 3] = bf[2 * i + 1];  // its high byte: Huffman-coded
  }
  std::string v;
  EncodeChunk(r.data(), r.size(), Compression::kAuto, 1, &v, 4);
  ASSERT_EQ(v[2], static_cast<char>(ChunkFilter::kPlanesApart));
  const size_t count = r.size() / 4;
  size_t at = kChunkHeaderSize, coded_at = 0, coded_len = 0;
  std::vector<int> modes;
  for (int j = 0; j < 4; ++j) {
    modes.push_back(v[at]);
    uint32_t len;
    std::memcpy(&len, &v[at + 1], 4);
    if (j == 3) coded_at = at + 5, coded_len = len;
    at += 5 + len;
  }
  EXPECT_EQ(modes, (std::vector<int>{0, 0, 0, 1}));
  EXPECT_LT(coded_len, count * 36 / 100);
  EXPECT_EQ(Decode(v, r.size()), r);
  // A plane of one value goes through zstd (a frame of a few bytes).
  std::string c = r;
  for (size_t i = 0; i < count; ++i) c[4 * i + 3] = 0x3f;
  EncodeChunk(c.data(), c.size(), Compression::kAuto, 1, &v, 4);
  const size_t last_plane = kChunkHeaderSize + 3 * (5 + count);
  EXPECT_EQ(v[last_plane], 1);
  EXPECT_LT(v.size() - last_plane, 100u);
  EXPECT_EQ(Decode(v, c.size()), c);
  std::string out(r.size(), '\0');
  EncodeChunk(r.data(), r.size(), Compression::kAuto, 1, &v, 4);
  for (size_t k = coded_at; k < coded_at + coded_len; k += 211) {
    std::string bad = v;
    bad[k] ^= static_cast<char>(1 << (k % 8));
    Status st = DecodeChunk(bad, r.size(), out.data());
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << "byte " << k << ": " << st;
  }
}

TEST(ChunkCodec, DecodeViewVerifiesRawChunksInPlace) {
  std::string raw = Random(10000, 5), v, scratch;
  EncodeChunk(raw.data(), raw.size(), Compression::kNone, 1, &v);
  std::string_view out;
  ASSERT_TRUE(DecodeChunkView(v, raw.size(), &scratch, &out).ok());
  EXPECT_EQ(out.data(), v.data() + kChunkHeaderSize);  // no copy
  EXPECT_EQ(out, raw);
  v[kChunkHeaderSize + 77] ^= 4;
  Status st = DecodeChunkView(v, raw.size(), &scratch, &out);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("checksum mismatch"), std::string::npos);
  // Compressed chunks go through the scratch buffer.
  std::string c = Compressible(50000), cv;
  EncodeChunk(c.data(), c.size(), Compression::kZstd, 1, &cv);
  ASSERT_TRUE(DecodeChunkView(cv, c.size(), &scratch, &out).ok());
  EXPECT_EQ(out, c);
  EXPECT_EQ(out.data(), scratch.data());
  // A raw chunk of the wrong length is reported as such.
  EXPECT_NE(DecodeChunkView(v.substr(0, v.size() - 1), raw.size(), &scratch, &out).message().find("payload"),
            std::string::npos);
}

// VisitChunk hands over every byte in order, in windows, for raw chunks,
// byte planes coded apart and plain zstd alike; damage is DataLoss (after
// the windows of a raw or planes chunk were seen), and a visitor's error
// stops it.
TEST(ChunkCodec, VisitChunkHandsOverEveryByteInWindows) {
  const std::string weights = TrainedBF16(300000);  // 600,000 bytes: 10 windows
  struct Case {
    const char* name;
    std::string raw;
    Compression compression;
    size_t planes;
  };
  for (const Case& c : {Case{"raw", Random(200000, 3), Compression::kNone, 0},
                        Case{"planes apart", weights, Compression::kAuto, 2},
                        Case{"zstd", Compressible(150000), Compression::kZstd, 0}}) {
    SCOPED_TRACE(c.name);
    std::string v, scratch;
    EncodeChunk(c.raw.data(), c.raw.size(), c.compression, 1, &v, c.planes);
    std::string seen;
    size_t windows = 0;
    Status visited = VisitChunk(v, c.raw.size(), &scratch, [&](uint64_t begin, const char* data, uint64_t n) {
      EXPECT_EQ(begin, seen.size());
      seen.append(data, n);
      ++windows;
      return Status::OK();
    });
    ASSERT_TRUE(visited.ok()) << visited;
    EXPECT_EQ(seen, c.raw);
    EXPECT_EQ(windows, c.compression == Compression::kZstd ? 1u : (c.raw.size() + 65535) / 65536);
    // The last byte of the value damaged.
    std::string bad = v;
    bad.back() ^= 0x10;
    Status st = VisitChunk(bad, c.raw.size(), &scratch, [](uint64_t, const char*, uint64_t) { return Status::OK(); });
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
    // The wrong length, and a visitor that fails.
    EXPECT_EQ(VisitChunk(v, c.raw.size() + 1, &scratch, [](uint64_t, const char*, uint64_t) { return Status::OK(); })
                  .code(),
              StatusCode::kDataLoss);
    st = VisitChunk(v, c.raw.size(), &scratch,
                    [](uint64_t, const char*, uint64_t) { return Status::Internal("sink full"); });
    EXPECT_EQ(st.code(), StatusCode::kInternal) << st;
  }
}

TEST(ChunkCodec, DecodeToStringNeedsNoLength) {
  std::string raw = "metadata bytes", v;
  EncodeChunk(raw.data(), raw.size(), Compression::kNone, 1, &v);
  auto s = DecodeChunkToString(v);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, raw);
}

// A deduplicating save hashes each chunk's content first; the chunk's own
// checksum is then read from that hash instead of hashing the bytes again.
// The values are the same bytes as without it, whatever the length (XXH3's
// short inputs, up to 240 bytes, take other paths and are hashed) and the
// compression, and they decode.
TEST(ChunkCodec, AValueMadeWithItsContentHashIsTheSameBytes) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{16}, size_t{129}, size_t{240}, size_t{241}, size_t{4096},
                   size_t{(1 << 20) + 4}}) {
    for (const std::string& raw : {Random(n, static_cast<uint32_t>(n)), Compressible(n)}) {
      char hash[kChunkHashBytes];
      ChunkContentHash(raw.data(), raw.size(), hash);
      EXPECT_EQ(ChecksumFromContentHash(hash, raw.data(), raw.size()), Checksum(raw.data(), raw.size())) << n;
      for (Compression c : {Compression::kNone, Compression::kZstd, Compression::kAuto}) {
        for (size_t width : {size_t{0}, size_t{4}}) {
          if (width != 0 && n % width != 0) continue;
          std::string plain, hashed;
          EncodeChunk(raw.data(), raw.size(), c, 1, &plain, width);
          EncodeChunk(raw.data(), raw.size(), c, 1, &hashed, width, hash);
          EXPECT_TRUE(hashed == plain) << "length " << n << " compression " << static_cast<int>(c) << " width "
                                       << width;
          EXPECT_EQ(Decode(hashed, raw.size()), raw);
        }
      }
      std::string finished(kChunkHeaderSize, '\0'), plain;
      finished += raw;
      std::string unhashed = finished;
      FinishRawChunk(&finished, hash);
      FinishRawChunk(&unhashed);
      EncodeChunk(raw.data(), raw.size(), Compression::kNone, 1, &plain);
      EXPECT_TRUE(finished == plain && unhashed == plain) << n;
    }
  }
  // A hash that is not the bytes' gives a checksum the bytes fail: a value
  // is never made valid by a wrong hash.
  const std::string raw = Random(4096, 9);
  char wrong[kChunkHashBytes];
  ChunkContentHash(Random(4096, 10).data(), 4096, wrong);
  std::string v;
  EncodeChunk(raw.data(), raw.size(), Compression::kNone, 1, &v, 0, wrong);
  std::string out(raw.size(), '\0');
  EXPECT_EQ(DecodeChunk(v, raw.size(), out.data()).code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace ckptdb
