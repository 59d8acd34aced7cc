// Steps that know how good they are: metrics and a note committed with the
// step, keep-best retention in the commit, the best step by a metric.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "ckptdb/ckptdb.h"
#include "format/step_records.h"
#include "store/retention.h"
#include "test_util.h"

namespace ckptdb {
namespace {

using testing::Reader;
using testing::Steps;
using testing::TempDir;

StateDict Small(uint32_t seed) {
  StateDict sd;
  EXPECT_TRUE(sd.Add("w", testing::PatternTensor(DType::kF32, {256}, seed)).ok());
  return sd;
}

Status SaveWith(StorageWriter& w, int64_t step, std::map<std::string, double> metrics, std::string note = {}) {
  SaveOptions o;
  o.step = step;
  o.no_dist = true;
  o.metrics = std::move(metrics);
  o.note = std::move(note);
  return Save(Small(static_cast<uint32_t>(step)), w, o);
}

TEST(KeepBest, RanksByValueTiesNewestFirstAndSkipsStepsWithoutTheMetric) {
  const std::map<int64_t, double> v = {{1, 0.5}, {2, 0.25}, {3, 0.5}, {4, 0.75}};
  EXPECT_EQ(RankByMetric(v, MetricMode::kMin), (std::vector<int64_t>{2, 3, 1, 4}));
  EXPECT_EQ(RankByMetric(v, MetricMode::kMax), (std::vector<int64_t>{4, 3, 1, 2}));

  const std::vector<int64_t> steps = {0, 1, 2, 3, 4, 5, 6};
  RetentionPolicy p;
  p.keep_best = 2;
  p.best_metric = "loss";
  // Step 6 (the newest) has no value: it is kept as the newest; 0 and 5
  // have none either and no other rule keeps them.
  const std::map<int64_t, double> loss = {{1, 3.0}, {2, 1.0}, {3, 1.0}, {4, 2.0}};
  EXPECT_EQ(StepsToPrune(steps, {}, p, loss), (std::vector<int64_t>{0, 1, 4, 5}));
  p.best_mode = MetricMode::kMax;
  EXPECT_EQ(StepsToPrune(steps, {}, p, loss), (std::vector<int64_t>{0, 2, 3, 5}));
  // Ties at the cut: of 2 and 3 (equal), the newer one is kept.
  p.best_mode = MetricMode::kMin;
  p.keep_best = 1;
  EXPECT_EQ(StepsToPrune(steps, {}, p, loss), (std::vector<int64_t>{0, 1, 2, 4, 5}));
  // Any rule keeps a step: keep_last and tags beside keep-best.
  p.keep_last = 2;
  EXPECT_EQ(StepsToPrune(steps, {1}, p, loss), (std::vector<int64_t>{0, 2, 4}));
  // More best steps wanted than have the metric: all of those are kept.
  p = RetentionPolicy{};
  p.keep_best = 10;
  p.best_metric = "loss";
  EXPECT_EQ(StepsToPrune(steps, {}, p, loss), (std::vector<int64_t>{0, 5}));
}

TEST(KeepBest, InvalidPoliciesAreRefusedNamingTheField) {
  RetentionPolicy p;
  p.keep_best = 3;
  Status st = ValidateRetentionPolicy(p, "StoreOptions.retention");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("best_metric"), std::string::npos) << st;
  p.best_metric = "val loss";
  st = ValidateRetentionPolicy(p, "StoreOptions.retention");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.ToString().find("whitespace"), std::string::npos) << st;
  p.best_metric = "val_loss";
  p.keep_best = -1;
  EXPECT_EQ(ValidateRetentionPolicy(p).code(), StatusCode::kInvalidArgument);
  TempDir dir;
  StoreOptions o;
  o.retention.keep_best = 2;
  auto w = OpenStoreWriter(dir.Sub("s"), o);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("StoreOptions.retention.keep_best"), std::string::npos) << w.status();
}

TEST(KeepBest, TenStepsUnderKeepBestThreeLeaveTheThreeBestAndTheNewest) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  StoreOptions o;
  o.retention.keep_best = 3;
  o.retention.best_metric = "val_loss";
  auto w = OpenStoreWriter(store, o);
  ASSERT_TRUE(w.ok()) << w.status();
  const double loss[10] = {2.5, 2.1, 1.9, 2.0, 1.7, 1.8, 1.75, 1.95, 1.72, 1.9};
  for (int64_t s = 0; s < 10; ++s) {
    ASSERT_OK(SaveWith(**w, s, {{"val_loss", loss[s]}, {"lr", 0.1 / (s + 1)}},
                       "{\"commit\": \"abc" + std::to_string(s) + "\"}"));
  }
  // The best three: 4 (1.7), 8 (1.72), 6 (1.75); and 9, the newest.
  auto r = Reader(store);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(Steps(*r), (std::vector<int64_t>{4, 6, 8, 9}));
  auto steps = r->ListSteps();
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(steps->front().metrics.at("val_loss"), 1.7);
  EXPECT_EQ(steps->front().metrics.at("lr"), 0.1 / 5);
  EXPECT_EQ(steps->front().note, "{\"commit\": \"abc4\"}");
  auto best = r->BestStep("val_loss");
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(*best, 4);
  auto worst = r->BestStep("val_loss", MetricMode::kMax);
  ASSERT_TRUE(worst.ok());
  EXPECT_EQ(*worst, 9);
  EXPECT_EQ(r->BestStep("accuracy").status().code(), StatusCode::kNotFound);
  // Every data key left belongs to a kept step.
  r.reset();
  w->reset();
  EXPECT_EQ(testing::CountDataKeys(store), 4u);
}

TEST(KeepBest, MaxModeAndStepsWithoutTheMetric) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  StoreOptions o;
  o.retention.keep_best = 2;
  o.retention.best_metric = "acc";
  o.retention.best_mode = MetricMode::kMax;
  auto w = OpenStoreWriter(store, o);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_OK(SaveWith(**w, 0, {{"acc", 0.5}}));
  ASSERT_OK(SaveWith(**w, 1, {}));  // no metric: kept only while newest
  ASSERT_OK(SaveWith(**w, 2, {{"acc", 0.9}}));
  ASSERT_OK(SaveWith(**w, 3, {{"acc", 0.7}}));
  ASSERT_OK(SaveWith(**w, 4, {{"acc", 0.8}}));
  EXPECT_EQ((*w)->PrunedByLastCommit(), (std::vector<int64_t>{3}));
  ASSERT_OK(SaveWith(**w, 5, {{"loss", 1.0}}));
  auto r = Reader(store);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(Steps(*r), (std::vector<int64_t>{2, 4, 5}));
  // A later policy through Prune ranks the same steps; a dry run drops
  // nothing.
  RetentionPolicy one;
  one.keep_best = 1;
  one.best_metric = "acc";
  one.best_mode = MetricMode::kMax;
  auto dry = (*w)->Prune(one, /*dry_run=*/true);
  ASSERT_TRUE(dry.ok()) << dry.status();
  EXPECT_EQ(*dry, (std::vector<int64_t>{4}));
  ASSERT_OK(r->Refresh());
  EXPECT_EQ(Steps(*r), (std::vector<int64_t>{2, 4, 5}));
  ASSERT_TRUE((*w)->Prune(one, false).ok());
  ASSERT_OK(r->Refresh());
  EXPECT_EQ(Steps(*r), (std::vector<int64_t>{2, 5}));
}

TEST(KeepBest, InvalidMetricsFailTheSaveAndCommitNothing) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok());
  ASSERT_OK(SaveWith(**w, 0, {{"loss", 1.0}}));
  struct Case {
    std::map<std::string, double> metrics;
    std::string note;
    const char* want;
  } cases[] = {
      {{{"loss", std::nan("")}}, "", "metric 'loss' is nan"},
      {{{"loss", std::numeric_limits<double>::infinity()}}, "", "metric 'loss' is inf"},
      {{{"", 1.0}}, "", "metric name '' must be 1 to 128 characters"},
      {{{"val loss", 1.0}}, "", "whitespace"},
      {{}, std::string(kMaxNoteBytes + 1, 'x'), "the step's note is 65537 bytes"},
  };
  for (const Case& c : cases) {
    Status st = SaveWith(**w, 1, c.metrics, c.note);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.ToString().find(c.want), std::string::npos) << st;
  }
  auto r = Reader(store);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(Steps(*r), (std::vector<int64_t>{0}));
}

TEST(KeepBest, AsyncSavesCommitTheirMetrics) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok());
  AsyncSaveOptions ao;
  ao.no_dist = true;
  AsyncSaver saver(**w, ao);
  auto h = saver.SaveAsync(Small(1), 7, {{"loss", 0.25}}, "async");
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_OK((*h)->Wait());
  auto r = Reader(store);
  ASSERT_NE(r, nullptr);
  auto steps = r->ListSteps();
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_EQ(steps->front().metrics, (std::map<std::string, double>{{"loss", 0.25}}));
  EXPECT_EQ(steps->front().note, "async");
  auto md = r->ReadMetadata(7);
  ASSERT_TRUE(md.ok());
  EXPECT_EQ(md->metrics.at("loss"), 0.25);
  EXPECT_EQ(md->note, "async");
}

TEST(StepSummary, MetricsAndNoteRoundTripAndDamageIsDataLoss) {
  StepSummary s;
  s.created_unix_ms = 123;
  s.world_size = 4;
  s.entries = 7;
  s.save_id = 99;
  const std::string plain = EncodeSummaryValue(s);
  auto back = DecodeSummaryValue(plain);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->metrics.empty());
  s.metrics = {{"val_loss", 2.31}, {"eval/acc", -0.5}};
  s.note = "{\"lr\": 3e-4}";
  const std::string labelled = EncodeSummaryValue(s);
  back = DecodeSummaryValue(labelled);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->metrics, s.metrics);
  EXPECT_EQ(back->note, s.note);
  EXPECT_EQ(back->save_id, 99u);
  // A summary without metrics keeps version 1 (45 bytes), as written before
  // metrics existed; one with them is longer.
  EXPECT_LT(plain.size(), labelled.size());
  // A flipped byte fails the value's checksum.
  std::string damaged = labelled;
  damaged[damaged.size() - 3] ^= 0x20;
  EXPECT_EQ(DecodeSummaryValue(damaged).status().code(), StatusCode::kDataLoss);
}

TEST(KeepBest, StepsSavedBeforeMetricsKeepWorkingBesideNewOnes) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  {
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok());
    for (int64_t s = 0; s < 3; ++s) ASSERT_OK(testing::SaveNoDist(Small(static_cast<uint32_t>(s)), **w, s));
  }
  StoreOptions o;
  o.retention.keep_best = 1;
  o.retention.best_metric = "loss";
  auto w = OpenStoreWriter(store, o);
  ASSERT_TRUE(w.ok());
  ASSERT_OK(SaveWith(**w, 3, {{"loss", 1.0}}));
  ASSERT_OK(SaveWith(**w, 4, {{"loss", 2.0}}));
  auto r = Reader(store);
  ASSERT_NE(r, nullptr);
  // Steps without the metric are not among the best: 3 is the best, 4 the
  // newest.
  EXPECT_EQ(Steps(*r), (std::vector<int64_t>{3, 4}));
  auto steps = r->ListSteps();
  ASSERT_TRUE(steps.ok());
  StateDict t;
  ASSERT_OK(t.Add("w", Tensor::Zeros(DType::kF32, {256}).value()));
  ASSERT_OK(testing::LoadNoDist(t, *r, 3));
  EXPECT_TRUE(std::get<Tensor>(*t.Find("w")).BitwiseEquals(std::get<Tensor>(*Small(3).Find("w"))));
}

}  // namespace
}  // namespace ckptdb
