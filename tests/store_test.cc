// The store around the protocol: readers beside a writer, deleting steps,
// sweeping.
#include <gtest/gtest.h>

#include "ckptdb/ckptdb.h"
#include "test_util.h"

namespace ckptdb {
namespace {

using testing::TempDir;

StateDict Small(uint32_t seed) {
  StateDict sd;
  EXPECT_TRUE(sd.Add("w", testing::PatternTensor(DType::kF32, {256}, seed)).ok());
  return sd;
}

TEST(Store, ReadersWorkWhileAWriterHoldsTheStore) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok());
  ASSERT_OK(testing::SaveNoDist(Small(1), **w, 10));
  // The writer keeps the database open (and locked) while readers come and go.
  auto r = OpenStoreReader(store);
  ASSERT_TRUE(r.ok()) << r.status();
  auto steps = (*r)->ListSteps();
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 1u);
  ASSERT_OK(testing::SaveNoDist(Small(2), **w, 20));
  // A reader sees the steps as of its opening; Refresh catches up.
  EXPECT_EQ(*(*r)->LatestStep(), 10);
  ASSERT_OK((*r)->Refresh());
  EXPECT_EQ(*(*r)->LatestStep(), 20);
  // A second writer process would be refused; in one process the lock is ours.
  auto w2 = OpenStoreWriter(store);
  ASSERT_TRUE(w2.ok());
  Status st = (*w2)->OpenDatabase();
  EXPECT_FALSE(st.ok());
}

TEST(Store, LatestStepAndEmptyStore) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok());
  ASSERT_OK((*w)->OpenDatabase());
  auto r = OpenStoreReader(store);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->LatestStep().status().code(), StatusCode::kNotFound);
  // Steps sort numerically, beyond one byte.
  for (int64_t s : {255, 256, 3}) ASSERT_OK(testing::SaveNoDist(Small(1), **w, s));
  ASSERT_OK((*r)->Refresh());
  EXPECT_EQ(*(*r)->LatestStep(), 256);
  auto steps = (*r)->ListSteps();
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 3u);
  EXPECT_EQ((*steps)[0].step, 3);
  EXPECT_EQ((*steps)[2].step, 256);
  EXPECT_EQ((*steps)[0].logical_bytes, 1024u);
  EXPECT_EQ((*steps)[0].world_size, 1);
}

TEST(Store, DeleteStepRemovesItsDataAndOnlyIt) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok());
  ASSERT_OK(testing::SaveNoDist(Small(1), **w, 1));
  ASSERT_OK(testing::SaveNoDist(Small(2), **w, 2));
  ASSERT_OK((*w)->DeleteStep(1));
  EXPECT_EQ((*w)->DeleteStep(1).code(), StatusCode::kNotFound);
  w->reset();
  EXPECT_EQ(testing::CountDataKeys(store), 1u);
  auto r = OpenStoreReader(store);
  ASSERT_TRUE(r.ok());
  StateDict t;
  ASSERT_OK(t.Add("w", Tensor::Zeros(DType::kF32, {256}).value()));
  ASSERT_OK(testing::LoadNoDist(t, **r, 2));
  EXPECT_TRUE(std::get<Tensor>(*t.Find("w")).BitwiseEquals(std::get<Tensor>(*Small(2).Find("w"))));
  EXPECT_EQ(testing::LoadNoDist(t, **r, 1).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ckptdb
