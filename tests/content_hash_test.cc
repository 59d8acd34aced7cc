// Chunk content hashes (StoredPiece::chunk_hashes): every chunk of a save
// records XXH3-128 of its raw bytes; an unchanged chunk keeps its hash from
// step to step and a changed one does not; StoreOptions::content_hashes off
// records none; metadata whose hashes do not match its chunks is refused;
// `ckptdb diff` finds entries equal by their hashes without reading them.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <string>

#include "ckptdb/ckptdb.h"
#include "format/metadata_codec.h"
#include "test_util.h"

namespace ckptdb {
namespace {

std::string ExpectedHash(const char* data, size_t n) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(data, n));
  return std::string(reinterpret_cast<const char*>(c.digest), sizeof c.digest);
}

class ContentHashTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = tmp_.path(); }

  // Saves {"w": f32 [rows, 1024] from `t`, "b": bytes} as `step`.
  void SaveStep(const std::string& store, int64_t step, const Tensor& t, bool hashes = true,
                ChunkLayout layout = ChunkLayout::kRows) {
    StoreOptions o;
    o.chunk_bytes = 64 << 10;
    o.chunk_layout = layout;
    o.content_hashes = hashes;
    o.deduplicate = hashes;  // deduplication needs the hashes
    auto writer = OpenStoreWriter(store, o);
    ASSERT_TRUE(writer.ok()) << writer.status();
    StateDict sd;
    ASSERT_TRUE(sd.Add("w", t).ok());
    ASSERT_TRUE(sd.AddBytes("b", "some opaque bytes").ok());
    SaveOptions so;
    so.step = step;
    so.no_dist = true;
    ASSERT_TRUE(Save(sd, **writer, so).ok());
  }

  StepMetadata Metadata(const std::string& store, int64_t step) {
    auto reader = OpenStoreReader(store);
    EXPECT_TRUE(reader.ok()) << reader.status();
    auto md = (*reader)->ReadMetadata(step);
    EXPECT_TRUE(md.ok()) << md.status();
    return *md;
  }

  testing::TempDir tmp_;
  std::string dir_;
};

TEST_F(ContentHashTest, EveryChunkRecordsTheHashOfItsRawBytes) {
  const std::string store = dir_ + "/s";
  Tensor a = testing::PatternTensor(DType::kF32, {64, 1024}, 1);  // 256 KiB: 4 chunks of 64 KiB
  SaveStep(store, 1, a);
  Tensor b = Tensor::Copy(DType::kF32, {64, 1024}, a.data(), a.nbytes()).value();
  b.data_as<float>()[20 * 1024] += 1.0f;  // in chunk 1 (rows 16..31)
  SaveStep(store, 2, b);

  StepMetadata m1 = Metadata(store, 1), m2 = Metadata(store, 2);
  const StoredPiece& p1 = m1.entries.at(0).pieces.at(0);
  const StoredPiece& p2 = m2.entries.at(0).pieces.at(0);
  ASSERT_EQ(p1.num_chunks, 4u);
  ASSERT_EQ(p1.chunk_hashes.size(), 4 * kChunkHashBytes);
  for (uint32_t c = 0; c < 4; ++c) {
    const char* raw = static_cast<const char*>(a.data()) + uint64_t{c} * p1.chunk_bytes;
    EXPECT_EQ(p1.chunk_hashes.substr(c * kChunkHashBytes, kChunkHashBytes), ExpectedHash(raw, p1.chunk_bytes))
        << "chunk " << c;
    const bool changed = c == 1;
    EXPECT_EQ(p1.chunk_hashes.substr(c * kChunkHashBytes, kChunkHashBytes) !=
                  p2.chunk_hashes.substr(c * kChunkHashBytes, kChunkHashBytes),
              changed)
        << "chunk " << c;
  }
  // A bytes entry is hashed too, and equal bytes give equal hashes.
  EXPECT_EQ(m1.entries.at(1).pieces.at(0).chunk_hashes, m2.entries.at(1).pieces.at(0).chunk_hashes);
  EXPECT_EQ(m1.entries.at(1).pieces.at(0).chunk_hashes, ExpectedHash("some opaque bytes", 17));
}

// A chunk cut as a box records the hash of the box's elements, gathered in
// row-major order.
TEST_F(ContentHashTest, ABoxChunkRecordsTheHashOfItsBoxsElements) {
  const std::string store = dir_ + "/s";
  Tensor a = testing::PatternTensor(DType::kF32, {64, 1024}, 1);  // 256 KiB: 4 boxes of 64 x 256
  SaveStep(store, 1, a, true, ChunkLayout::kBoxes);
  const StepMetadata md = Metadata(store, 1);
  const StoredPiece& p = md.entries.at(0).pieces.at(0);
  ASSERT_EQ(p.chunk_shape, (std::vector<int64_t>{64, 256}));
  ASSERT_EQ(p.chunk_hashes.size(), 4 * kChunkHashBytes);
  for (uint32_t c = 0; c < 4; ++c) {
    std::string box;
    for (int64_t row = 0; row < 64; ++row) {
      box.append(static_cast<const char*>(a.data()) + (row * 1024 + c * 256) * 4, 256 * 4);
    }
    EXPECT_EQ(p.chunk_hashes.substr(c * kChunkHashBytes, kChunkHashBytes), ExpectedHash(box.data(), box.size()))
        << "chunk " << c;
  }
}

TEST_F(ContentHashTest, TurnedOffRecordsNoneAndStepsStillLoad) {
  const std::string store = dir_ + "/s";
  Tensor a = testing::PatternTensor(DType::kF32, {64, 1024}, 2);
  SaveStep(store, 1, a, /*hashes=*/false);
  StepMetadata m = Metadata(store, 1);
  EXPECT_TRUE(m.entries.at(0).pieces.at(0).chunk_hashes.empty());
  auto reader = OpenStoreReader(store);
  ASSERT_TRUE(reader.ok());
  auto whole = LoadWhole(**reader, 1);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(std::get<Tensor>(*whole->Find("w")).BitwiseEquals(a));
}

TEST_F(ContentHashTest, MetadataWhoseHashesDoNotFitItsChunksIsRefused) {
  const std::string store = dir_ + "/s";
  SaveStep(store, 1, testing::PatternTensor(DType::kF32, {64, 1024}, 3));
  StepMetadata m = Metadata(store, 1);
  EXPECT_TRUE(ValidateStepMetadata(m).ok());
  m.entries.at(0).pieces.at(0).chunk_hashes.resize(3 * kChunkHashBytes);
  Status st = ValidateStepMetadata(m);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("48 bytes of chunk hashes for 4 chunks"), std::string::npos) << st;
}

}  // namespace
}  // namespace ckptdb
