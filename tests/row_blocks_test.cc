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
  auto w = OpenStoreWriter(dir.Sub("s"));
  ASSERT_TRUE(w.ok());
  ASSERT_OK(testing::SaveNoDist(sd, **w, 1));
  auto r = OpenStoreReader(dir.Sub("s"));
  ASSERT_TRUE(r.ok());
  auto md = (*r)->ReadMetadata(1);
  ASSERT_TRUE(md.ok());
  for (uint64_t max_bytes : {1u, 24u, 50u, 72u, 1000u}) {
    std::string got;
    size_t blocks = 0;
    ASSERT_OK(cli::ForEachRowBlock(**r, *md, *md->Find("s"), max_bytes, [&](const Tensor& b) {
      EXPECT_LE(b.nbytes(), std::max<uint64_t>(max_bytes, 24)) << max_bytes;
      got.append(static_cast<const char*>(b.data()), b.nbytes());
      ++blocks;
      return Status::OK();
    }));
    EXPECT_EQ(got, std::string(static_cast<const char*>(full.data()), full.nbytes())) << max_bytes;
    EXPECT_EQ(blocks, (10 + std::max<uint64_t>(1, max_bytes / 24) - 1) / std::max<uint64_t>(1, max_bytes / 24));
  }
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
