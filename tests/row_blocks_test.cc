// Streaming a stored tensor in bounded blocks of rows (ckptdb cat --raw and
// export use it so that memory does not grow with the tensor).
#include <gtest/gtest.h>

#include <cstring>

#include "cli_slice.h"
#include "ckptdb/ckptdb.h"
#include "test_util.h"

namespace ckptdb {
namespace {

TEST(RowBlocks, StreamRowMajorInBoundedBlocksAcrossShards) {
  testing::TempDir dir;
  Tensor full = testing::PatternTensor(DType::kI32, {10, 3, 2}, 7);  // 24 bytes per row
  auto rows = [&](int64_t b, int64_t n) {
    return Tensor::Copy(DType::kI32, {n, 3, 2}, full.data_as<int32_t>() + b * 6, n * 24).value();
  };
  StateDict sd;
  ASSERT_OK(sd.Add("s", ShardedTensor::Create(DType::kI32, {10, 3, 2}, {{{0, 0, 0}, rows(0, 4)}, {{4, 0, 0}, rows(4, 6)}})
                            .value()));
  ASSERT_OK(sd.Add("scalar", testing::PatternTensor(DType::kF64, {}, 8)));
  const Tensor wide_full = testing::PatternTensor(DType::kI32, {1, 1000}, 9);
  ASSERT_OK(sd.Add("wide", wide_full));
  auto w = OpenStoreWriter(dir.Sub("s"));
  ASSERT_TRUE(w.ok());
  ASSERT_OK(testing::SaveNoDist(sd, **w, 1));
  auto r = OpenStoreReader(dir.Sub("s"));
  ASSERT_TRUE(r.ok());
  auto md = (*r)->ReadMetadata(1);
  ASSERT_TRUE(md.ok());
  // max_bytes -> blocks: whole rows (24 bytes) while one fits, else parts
  // of a row: [1, k, 2] boxes (8 bytes per index), else single elements.
  const std::vector<std::pair<uint64_t, size_t>> cases = {
      {1, 60}, {4, 60}, {8, 30}, {16, 20}, {24, 10}, {50, 5}, {72, 4}, {1000, 1}};
  for (const auto& [max_bytes, want_blocks] : cases) {
    std::string got;
    size_t blocks = 0;
    ASSERT_OK(cli::ForEachRowBlock(**r, *md, *md->Find("s"), max_bytes, [&](const Tensor& b) {
      EXPECT_LE(b.nbytes(), std::max<uint64_t>(max_bytes, 4)) << max_bytes;
      got.append(static_cast<const char*>(b.data()), b.nbytes());
      ++blocks;
      return Status::OK();
    }));
    EXPECT_EQ(got, std::string(static_cast<const char*>(full.data()), full.nbytes())) << max_bytes;
    EXPECT_EQ(blocks, want_blocks) << max_bytes;
  }
  // One long row ([1, N]) streams in bounded blocks too.
  std::string wide;
  size_t wide_blocks = 0;
  ASSERT_OK(cli::ForEachRowBlock(**r, *md, *md->Find("wide"), 400, [&](const Tensor& b) {
    EXPECT_LE(b.nbytes(), 400u);
    wide.append(static_cast<const char*>(b.data()), b.nbytes());
    ++wide_blocks;
    return Status::OK();
  }));
  EXPECT_EQ(wide, std::string(static_cast<const char*>(wide_full.data()), wide_full.nbytes()));
  EXPECT_EQ(wide_blocks, 10u);
  std::string scalar;
  ASSERT_OK(cli::ForEachRowBlock(**r, *md, *md->Find("scalar"), 1, [&](const Tensor& b) {
    scalar.append(static_cast<const char*>(b.data()), b.nbytes());
    return Status::OK();
  }));
  EXPECT_EQ(scalar.size(), 8u);
  // An error from the consumer stops the stream and is returned.
  Status st = cli::ForEachRowBlock(**r, *md, *md->Find("s"), 24, [](const Tensor&) { return Status::IOError("full"); });
  EXPECT_EQ(st.code(), StatusCode::kIOError);
}

}  // namespace
}  // namespace ckptdb
