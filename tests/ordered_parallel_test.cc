#include "util/ordered_parallel.h"

#include <gtest/gtest.h>

#include <atomic>

namespace ckptdb {
namespace {

TEST(OrderedParallel, ConsumesInOrderWhateverTheThreads) {
  for (int threads : {1, 2, 4, 8}) {
    for (size_t window : {1u, 3u, 16u}) {
      std::vector<size_t> seen;
      Status st = RunOrdered(
          200, threads, window,
          [](size_t i, std::string* out) {
            *out = std::to_string(i * i);
            return Status::OK();
          },
          [&](size_t i, std::string& v) {
            EXPECT_EQ(v, std::to_string(i * i));
            seen.push_back(i);
            return Status::OK();
          });
      ASSERT_TRUE(st.ok()) << st;
      ASSERT_EQ(seen.size(), 200u);
      for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], i);
    }
  }
}

TEST(OrderedParallel, FirstErrorStopsTheRun) {
  std::atomic<size_t> produced{0};
  size_t consumed = 0;
  Status st = RunOrdered(
      1000, 4, 8,
      [&](size_t i, std::string*) {
        ++produced;
        return i == 50 ? Status::IOError("job 50 failed") : Status::OK();
      },
      [&](size_t, std::string&) {
        ++consumed;
        return Status::OK();
      });
  EXPECT_EQ(st.code(), StatusCode::kIOError);
  EXPECT_LE(consumed, 50u);
  EXPECT_LT(produced.load(), 1000u);
  st = RunOrdered(
      10, 2, 4, [](size_t, std::string*) { return Status::OK(); },
      [](size_t i, std::string&) { return i == 3 ? Status::DataLoss("consumer") : Status::OK(); });
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace ckptdb
