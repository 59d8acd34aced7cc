#include <gtest/gtest.h>

#include "ckptdb/ckptdb.h"
#include "test_util.h"

namespace ckptdb {
namespace {

TEST(Tensor, ZerosOwnsMemory) {
  auto t = Tensor::Zeros(DType::kBF16, {3, 4});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->numel(), 12);
  EXPECT_EQ(t->nbytes(), 24u);
  EXPECT_TRUE(t->owns_memory());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(t->data_as<uint16_t>()[i], 0);
}

TEST(Tensor, ScalarAndZeroSize) {
  auto s = Tensor::Zeros(DType::kF64, {});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->numel(), 1);
  EXPECT_EQ(s->nbytes(), 8u);
  auto z = Tensor::Zeros(DType::kF32, {5, 0, 3});
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->numel(), 0);
  EXPECT_EQ(z->nbytes(), 0u);
}

TEST(Tensor, ViewRejectsBufferSmallerThanShape) {
  std::vector<float> buf(11);
  auto t = Tensor::View(DType::kF32, {3, 4}, buf.data(), buf.size() * sizeof(float));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("44 bytes is smaller than the 48 bytes"), std::string::npos)
      << t.status().ToString();
  std::vector<float> big(12);
  auto v = Tensor::View(DType::kF32, {3, 4}, big.data(), big.size() * sizeof(float));
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->owns_memory());
  EXPECT_EQ(v->data(), big.data());
}

TEST(Tensor, RejectsNegativeDimensionsAndNullData) {
  auto t = Tensor::Zeros(DType::kF32, {2, -1});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("negative dimension -1"), std::string::npos);
  auto n = Tensor::View(DType::kF32, {2}, nullptr, 8);
  EXPECT_EQ(n.status().code(), StatusCode::kInvalidArgument);
  auto huge = Tensor::Zeros(DType::kF32, {1ll << 40, 1ll << 40});
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
}

TEST(DType, NamesRoundTripAndUnknownIsAnError) {
  for (DType d : kAllDTypes) {
    auto back = ParseDType(DTypeName(d));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, d);
    EXPECT_EQ(*DTypeFromNumber(static_cast<int>(d)), d);
  }
  EXPECT_EQ(*ParseDType("bfloat16"), DType::kBF16);
  auto bad = ParseDType("f128");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown dtype 'f128'"), std::string::npos);
  EXPECT_FALSE(DTypeFromNumber(99).ok());
  EXPECT_FALSE(DTypeFromNumber(0).ok());
}

TEST(StateDict, KeepsOrderAndRejectsDuplicates) {
  StateDict sd;
  ASSERT_TRUE(sd.Add("b", Tensor::Zeros(DType::kF32, {1}).value()).ok());
  ASSERT_TRUE(sd.AddBytes("a", "x").ok());
  Status dup = sd.Add("b", Tensor::Zeros(DType::kI8, {2}).value());
  EXPECT_EQ(dup.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(dup.message().find("duplicate FQN 'b'"), std::string::npos);
  EXPECT_EQ(sd.size(), 2u);
  EXPECT_EQ(sd.entries()[0].first, "b");
  EXPECT_EQ(std::get<Tensor>(*sd.Find("b")).dtype(), DType::kF32);  // unchanged
  EXPECT_EQ(sd.AddBytes("", "x").code(), StatusCode::kInvalidArgument);
}

TEST(ShardedTensor, RejectsShardsOutsideOrOverlapping) {
  auto t = [](Shape s) { return Tensor::Zeros(DType::kF32, std::move(s)).value(); };
  EXPECT_TRUE(ShardedTensor::Create(DType::kF32, {10, 4}, {{{0, 0}, t({5, 4})}, {{5, 0}, t({5, 4})}}).ok());
  auto outside = ShardedTensor::Create(DType::kF32, {10, 4}, {{{8, 0}, t({5, 4})}});
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("does not lie within shape [10, 4]"), std::string::npos)
      << outside.status();
  auto overlap = ShardedTensor::Create(DType::kF32, {10, 4}, {{{0, 0}, t({6, 4})}, {{5, 0}, t({5, 4})}});
  ASSERT_FALSE(overlap.ok());
  EXPECT_NE(overlap.status().message().find("overlaps"), std::string::npos);
  auto wrong_dtype = ShardedTensor::Create(DType::kF16, {10, 4}, {{{0, 0}, t({5, 4})}});
  EXPECT_FALSE(wrong_dtype.ok());
  auto wrong_rank = ShardedTensor::Create(DType::kF32, {10, 4}, {{{0}, t({5})}});
  EXPECT_FALSE(wrong_rank.ok());
}

// A DType outside the enum (a cast from a bad integer) means nothing: it is
// refused where it is given, naming the value.
TEST(Tensor, RejectsADTypeOutsideTheEnum) {
  for (int bad : {0, 13, 99, -1}) {
    const DType d = static_cast<DType>(bad);
    const std::string want = "dtype " + std::to_string(bad);
    auto z = Tensor::Zeros(d, {2, 3});
    ASSERT_FALSE(z.ok()) << bad;
    EXPECT_EQ(z.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(z.status().message().find(want), std::string::npos) << z.status();
    char buf[8] = {};
    auto c = Tensor::Copy(d, {2}, buf, 2);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.status().message().find(want), std::string::npos) << c.status();
    auto v = Tensor::View(d, {2}, buf, sizeof buf);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_NE(v.status().message().find(want), std::string::npos) << v.status();
    // A rank may hold no shard of a sharded tensor: its dtype is checked too.
    auto st = ShardedTensor::Create(d, {4}, {});
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.status().message().find(want), std::string::npos) << st.status();
  }
  for (DType d : kAllDTypes) EXPECT_TRUE(Tensor::Zeros(d, {2}).ok()) << DTypeName(d);
}

}  // namespace
}  // namespace ckptdb
