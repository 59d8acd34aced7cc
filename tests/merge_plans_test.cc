// The coordinator's merge of every rank's plan (checkpoint/planner.h):
// plans read entry by entry, in any field order, and every way they can
// disagree named as before.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "checkpoint/planner.h"
#include "ckptdb.pb.h"
#include "ckptdb/ckptdb.h"
#include "test_util.h"

namespace ckptdb {
namespace {

// Rank `rank`'s state dict of a world of `world`: row `rank` of "w" (a
// [world, 4] f32 tensor), a replicated "b" and a bytes entry.
StateDict RankState(int rank, int world, DType dtype = DType::kF32, const std::string& sharded = "w") {
  StateDict sd;
  EXPECT_OK(sd.Add(sharded, ShardedTensor::Create(dtype, {world, 4},
                                                  {Shard{{rank, 0}, testing::PatternTensor(dtype, {1, 4}, rank)}})
                                .value()));
  EXPECT_OK(sd.Add("b", testing::PatternTensor(DType::kF32, {3}, 9)));
  EXPECT_OK(sd.AddBytes("extra", "x"));
  return sd;
}

std::string EncodedPlan(const StateDict& sd, int rank, int coordinator = 0, int32_t delivery = 0) {
  proto::LocalPlan d;
  d.set_delivery(delivery);
  return EncodeLocalPlan(PlanLocal(sd, rank, coordinator)) + d.SerializeAsString();
}

TEST(MergePlans, EveryRanksPiecesJoinInRankOrder) {
  constexpr int kWorld = 4;
  std::vector<std::string> plans;
  for (int r = 0; r < kWorld; ++r) plans.push_back(EncodedPlan(RankState(r, kWorld), r, /*coordinator=*/2));
  auto m = MergePlans(plans, 2);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->world_size, kWorld);
  EXPECT_EQ(m->coordinator_rank, 2);
  ASSERT_EQ(m->entries.size(), 3u);
  EXPECT_EQ(m->entries[0].fqn, "w");
  ASSERT_EQ(m->entries[0].pieces.size(), static_cast<size_t>(kWorld));
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(m->entries[0].pieces[r].key.rank, static_cast<uint32_t>(r));
    EXPECT_EQ(m->entries[0].pieces[r].offsets, (std::vector<int64_t>{r, 0}));
  }
  // The replicated tensor and the bytes: the coordinator's piece alone.
  ASSERT_EQ(m->entries[1].pieces.size(), 1u);
  EXPECT_EQ(m->entries[1].pieces[0].key.rank, 2u);
  ASSERT_EQ(m->entries[2].pieces.size(), 1u);

  // The same plans with their fields in another order (the delivery first,
  // as protobuf's own parser accepts) merge alike.
  std::vector<std::string> reordered;
  for (int r = 0; r < kWorld; ++r) {
    proto::LocalPlan d;
    d.set_delivery(0);
    reordered.push_back(d.SerializeAsString() + EncodeLocalPlan(PlanLocal(RankState(r, kWorld), r, 2)));
  }
  auto again = MergePlans(reordered, 2);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->entries[0].pieces.size(), static_cast<size_t>(kWorld));

  // PlannedPart of the merged metadata once a save completed it: the merge.
  StepMetadata completed = *m;
  completed.step = 5;
  completed.save_id = 77;
  for (EntryMetadata& e : completed.entries) {
    for (StoredPiece& p : e.pieces) {
      p.num_chunks = 1;
      p.chunk_bytes = p.nbytes;
      p.stored_bytes = p.nbytes;
      p.chunk_hashes.assign(kChunkHashBytes, 'h');
    }
  }
  const StepMetadata planned = PlannedPart(completed);
  EXPECT_EQ(planned.step, 0);
  EXPECT_EQ(planned.save_id, 0u);
  EXPECT_EQ(planned.world_size, m->world_size);
  ASSERT_EQ(planned.entries.size(), m->entries.size());
  for (size_t i = 0; i < planned.entries.size(); ++i) {
    EXPECT_EQ(planned.entries[i].fqn, m->entries[i].fqn);
    EXPECT_EQ(planned.entries[i].shape, m->entries[i].shape);
    ASSERT_EQ(planned.entries[i].pieces.size(), m->entries[i].pieces.size());
    for (size_t k = 0; k < planned.entries[i].pieces.size(); ++k) {
      const StoredPiece &a = planned.entries[i].pieces[k], &b = m->entries[i].pieces[k];
      EXPECT_EQ(a.offsets, b.offsets);
      EXPECT_EQ(a.sizes, b.sizes);
      EXPECT_EQ(a.nbytes, b.nbytes);
      EXPECT_EQ(a.num_chunks, 0u);
      EXPECT_TRUE(a.chunk_hashes.empty());
    }
  }
}

TEST(MergePlans, NamesEachWayAPlanDisagrees) {
  auto merge = [](const std::vector<std::string>& plans) { return MergePlans(plans, 0); };
  const std::string coordinator = EncodedPlan(RankState(0, 2), 0);

  // Another number of entries.
  StateDict more = RankState(1, 2);
  ASSERT_OK(more.Add("more", testing::PatternTensor(DType::kF32, {2}, 1)));
  auto m = merge({coordinator, EncodedPlan(more, 1)});
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("rank 1 has 4 entries, the coordinator (rank 0) has 3"), std::string::npos)
      << m.status();
  // An entry the coordinator does not have.
  m = merge({coordinator, EncodedPlan(RankState(1, 2, DType::kF32, "v"), 1)});
  EXPECT_NE(m.status().message().find("rank 1 has entry 'v' that the coordinator (rank 0) does not have"),
            std::string::npos)
      << m.status();
  // Another dtype.
  m = merge({coordinator, EncodedPlan(RankState(1, 2, DType::kF64), 1)});
  EXPECT_NE(m.status().message().find("entry 'w' on rank 1 has dtype f64"), std::string::npos) << m.status();
  // Another delivery.
  m = merge({coordinator, EncodedPlan(RankState(1, 2), 1, 0, /*delivery=*/1)});
  EXPECT_NE(m.status().message().find("rank(s) 0 write into a store every rank sees, rank(s) 1 send"),
            std::string::npos)
      << m.status();
  // Bytes that are no plan.
  m = merge({coordinator, std::string("\xff\xff\xff", 3)});
  EXPECT_TRUE(m.status().IsCheckpointError()) << m.status();
  EXPECT_NE(m.status().ToString().find("the plan of rank 1 does not parse"), std::string::npos) << m.status();
  // A rank's planning failure comes before another rank's disagreement, and
  // names that rank alone.
  const std::string failed = EncodeLocalPlan(Status::InvalidArgument("rank 2 cannot plan"));
  m = MergePlans({coordinator, EncodedPlan(RankState(1, 3, DType::kF64), 1), failed}, 0);
  EXPECT_TRUE(m.status().IsCheckpointError()) << m.status();
  ASSERT_EQ(m.status().rank_failures().size(), 1u) << m.status();
  EXPECT_EQ(m.status().rank_failures().begin()->first, 2);
  // A plan with a piece keyed to another rank (the coordinator would have
  // completed it from that rank's report): that rank's planning failure.
  {
    StatusOr<LocalPlan> plan = PlanLocal(RankState(1, 2), 1, 0);
    ASSERT_OK(plan.status());
    for (EntryMetadata& e : plan->entries) {
      if (e.fqn == "w") e.pieces.at(0).key.rank = 0;
    }
    m = merge({coordinator, EncodeLocalPlan(plan)});
    EXPECT_TRUE(m.status().IsCheckpointError()) << m.status();
    ASSERT_EQ(m.status().rank_failures().count(1), 1u) << m.status();
    EXPECT_NE(m.status().ToString().find("the plan of rank 1 has a piece of 'w' keyed to rank 0"), std::string::npos)
        << m.status();
  }
  // The coordinator's own failure: named, and the others are still read.
  m = MergePlans({failed, EncodedPlan(RankState(1, 2), 1)}, 0);
  EXPECT_TRUE(m.status().IsCheckpointError()) << m.status();
  EXPECT_EQ(m.status().rank_failures().count(0), 1u) << m.status();
}

}  // namespace
}  // namespace ckptdb
