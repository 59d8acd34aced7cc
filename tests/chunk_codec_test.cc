#include "format/chunk_codec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

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

}  // namespace
}  // namespace ckptdb
