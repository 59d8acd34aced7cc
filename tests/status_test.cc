#include <gtest/gtest.h>

#include "ckptdb/status.h"
#include "format/status_codec.h"

namespace ckptdb {
namespace {

TEST(Status, OkIsCheapAndPrints) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_EQ(s.code(), StatusCode::kOk);
}

TEST(Status, CheckpointErrorNamesEveryFailedRank) {
  Status s = Status::CheckpointError("Failed to write data",
                                     {{1, Status::IOError("disk full")}, {3, Status::IOError("disk gone")}, {2, Status()}});
  ASSERT_TRUE(s.IsCheckpointError());
  EXPECT_EQ(s.code(), StatusCode::kIOError);  // all failed ranks agree
  ASSERT_EQ(s.rank_failures().size(), 2u);    // OK ranks are not failures
  EXPECT_EQ(s.rank_failures().at(1).message(), "disk full");
  std::string text = s.ToString();
  EXPECT_NE(text.find("Failed to write data"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 1: IOError: disk full"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 3: IOError: disk gone"), std::string::npos) << text;
}

TEST(Status, MixedCodesBecomeAborted) {
  Status s = Status::CheckpointError("x", {{0, Status::IOError("a")}, {1, Status::DataLoss("b")}});
  EXPECT_EQ(s.code(), StatusCode::kAborted);
}

TEST(StatusCodec, RoundTripKeepsRankFailures) {
  Status s = Status::CheckpointError("Failed to finish checkpoint", {{2, Status::Unavailable("gone")}});
  Status back = DecodeStatus(EncodeStatus(s));
  EXPECT_EQ(back, s);
  EXPECT_EQ(DecodeStatus(EncodeStatus(Status::OK())), Status::OK());
  EXPECT_EQ(DecodeStatus(EncodeStatus(Status::NotFound("n"))), Status::NotFound("n"));
}

TEST(StatusCodec, GarbageIsAnInternalError) {
  Status s = DecodeStatus(std::string("\xff\xff\xff", 3));
  EXPECT_EQ(s.code(), StatusCode::kInternal);
}

TEST(StatusOr, HoldsValueOrError) {
  StatusOr<int> v = 3;
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 3);
  StatusOr<int> e = Status::NotFound("nope");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
  StatusOr<int> bad = Status::OK();  // an OK status without a value is a bug
  EXPECT_EQ(bad.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace ckptdb
