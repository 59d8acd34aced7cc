// The delete rule for shared chunks (src/store/shared_chunks.h) on its own:
// which data ranges a delete drops, given what the kept steps refer to.
#include <gtest/gtest.h>

#include "format/keys.h"
#include "store/shared_chunks.h"

namespace ckptdb {
namespace {

KeyRange R(const std::string& a, const std::string& b) { return {a, b}; }

TEST(SharedChunks, SubtractCutsOutEveryKeptRange) {
  std::vector<KeyRange> from = {R("a", "f"), R("h", "k")};
  EXPECT_EQ(SubtractRanges(from, {}), from);
  EXPECT_EQ(SubtractRanges(from, {R("b", "c"), R("d", "i")}),
            (std::vector<KeyRange>{R("a", "b"), R("c", "d"), R("i", "k")}));
  EXPECT_EQ(SubtractRanges(from, {R("a", "z")}), std::vector<KeyRange>{});
  EXPECT_EQ(MergeRanges({R("c", "d"), R("a", "b"), R("b", "c"), R("x", "x")}), (std::vector<KeyRange>{R("a", "d")}));
}

StepMetadata WithReference(int64_t step, const ChunkReference& r) {
  StepMetadata m;
  m.step = step;
  EntryMetadata e;
  e.fqn = "w";
  StoredPiece p;
  p.num_chunks = r.first + r.count;
  p.references = {r};
  e.pieces.push_back(p);
  m.entries.push_back(e);
  return m;
}

std::string Key(int64_t step, uint64_t id, uint32_t item, uint32_t chunk) {
  return EncodeDataKey(DataKey{step, id, 0, item, chunk});
}

std::vector<KeyRange> Drop(const std::set<int64_t>& deleted, const SharedChunkView& view) {
  auto d = DataRangesToDrop(deleted, view);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : std::vector<KeyRange>{};
}

TEST(SharedChunks, ADeleteKeepsExactlyTheChunksKeptStepsReferTo) {
  // Step 1 (save 11) holds chunks 0..9 of item 0; step 2 refers to 2..4.
  const StepMetadata m2 = WithReference(2, ChunkReference{0, 3, 1, 11, StorageKey{0, 0}, 2});
  SharedChunkView view;
  view.kept_refs[2] = std::vector<SaveRef>{{1, 11}};
  view.kept_owns = [](const SaveRef& s) { return s.step == 2 && s.save_id == 22; };
  view.metadata_of = [&](int64_t s) -> StatusOr<StepMetadata> {
    if (s == 2) return m2;
    return Status::NotFound("no");
  };
  EXPECT_EQ(Drop({1}, view), (std::vector<KeyRange>{R(DataSaveBegin(1, 0), Key(1, 11, 0, 2)),
                                        R(Key(1, 11, 0, 5), DataSaveEnd(1, UINT64_MAX))}));
  // Its metadata unreadable: the whole save it refers to is kept.
  view.metadata_of = [](int64_t) -> StatusOr<StepMetadata> { return Status::DataLoss("damaged"); };
  EXPECT_EQ(Drop({1}, view), (std::vector<KeyRange>{R(DataSaveBegin(1, 0), DataSaveBegin(1, 11)),
                                                               R(DataSaveEnd(1, 11), DataSaveEnd(1, UINT64_MAX))}));
  // What it refers to unknown (its records damaged): the delete is refused.
  view.kept_refs[2] = std::nullopt;
  auto refused = DataRangesToDrop({1}, view);
  EXPECT_EQ(refused.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(refused.status().message().find("delete step 2 first"), std::string::npos) << refused.status();
}

TEST(SharedChunks, TheLastStepUsingAChunkOfADeletedStepTakesItAlong) {
  // Step 1 was deleted before; step 2 (being deleted) and step 3 (kept)
  // refer to its save 11: chunks 0..3 and 2..3.
  const StepMetadata m3 = WithReference(3, ChunkReference{0, 2, 1, 11, StorageKey{0, 0}, 2});
  SharedChunkView view;
  view.deleted_refs[2] = std::vector<SaveRef>{{1, 11}};
  view.kept_refs[3] = std::vector<SaveRef>{{1, 11}};
  view.kept_owns = [](const SaveRef& s) { return s.step == 3 && s.save_id == 33; };
  view.metadata_of = [&](int64_t) -> StatusOr<StepMetadata> { return m3; };
  EXPECT_EQ(Drop({2}, view),
            (std::vector<KeyRange>{R(DataSaveBegin(1, 11), Key(1, 11, 0, 2)), R(Key(1, 11, 0, 4), DataSaveEnd(1, 11)),
                                   R(DataSaveBegin(2, 0), DataSaveEnd(2, UINT64_MAX))}));
  // Once step 3 goes too, save 11's chunks go with it.
  view.kept_refs.clear();
  view.deleted_refs[3] = std::vector<SaveRef>{{1, 11}};
  EXPECT_EQ(Drop({2, 3}, view),
            (std::vector<KeyRange>{R(DataSaveBegin(1, 11), DataSaveEnd(1, 11)),
                                   R(DataSaveBegin(2, 0), DataSaveEnd(3, UINT64_MAX))}));
  // A referred save that a kept step owns is never dropped.
  view.kept_owns = [](const SaveRef& s) { return s.step == 1 && s.save_id == 11; };
  EXPECT_EQ(Drop({2, 3}, view), (std::vector<KeyRange>{R(DataSaveBegin(2, 0), DataSaveEnd(3, UINT64_MAX))}));
}

// What ReclaimSpace may rewrite away: in a save no committed step owns,
// everything but the chunks committed steps use.
TEST(SharedChunks, UsedRangesOfASharedSaveAreTheChunksCommittedStepsUse) {
  // Steps 2 and 3 use chunks 2..4 and 4..5 of item 0 of deleted step 1's
  // save 11; step 3 also uses save 22 of step 2, which step 2 owns.
  StepMetadata m2 = WithReference(2, ChunkReference{0, 3, 1, 11, StorageKey{0, 0}, 2});
  StepMetadata m3 = WithReference(3, ChunkReference{0, 2, 1, 11, StorageKey{0, 0}, 4});
  m3.entries[0].pieces[0].references.push_back(ChunkReference{2, 1, 2, 22, StorageKey{0, 1}, 0});
  SharedChunkView view;
  view.kept_refs[2] = std::vector<SaveRef>{{1, 11}};
  view.kept_refs[3] = std::vector<SaveRef>{{1, 11}, {2, 22}};
  view.kept_owns = [](const SaveRef& s) { return s.step == 2 && s.save_id == 22; };
  view.metadata_of = [&](int64_t s) -> StatusOr<StepMetadata> { return s == 2 ? m2 : m3; };
  auto used = UsedRangesOfSharedSaves(view);
  ASSERT_TRUE(used.ok()) << used.status();
  ASSERT_EQ(used->size(), 1u) << "only the save no committed step owns";
  EXPECT_EQ(used->at(SaveRef{1, 11}), (std::vector<KeyRange>{R(Key(1, 11, 0, 2), Key(1, 11, 0, 6))}));
  // A step using it whose metadata is unreadable: which chunks it uses is
  // unknown, so the save is left out (nothing of it is rewritten).
  view.metadata_of = [&](int64_t s) -> StatusOr<StepMetadata> {
    if (s == 2) return Status::DataLoss("damaged");
    return m3;
  };
  used = UsedRangesOfSharedSaves(view);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_TRUE(used->empty());
  // A references record naming a save whose chunks the metadata never uses
  // (records that disagree): left out too.
  view.metadata_of = [&](int64_t s) -> StatusOr<StepMetadata> { return s == 2 ? m2 : m3; };
  view.kept_refs[2] = std::vector<SaveRef>{{1, 11}, {0, 5}};
  used = UsedRangesOfSharedSaves(view);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ(used->count(SaveRef{0, 5}), 0u);
  EXPECT_EQ(used->count(SaveRef{1, 11}), 1u);
  // A committed step's references unknown: refused, naming it.
  view.kept_refs[3] = std::nullopt;
  used = UsedRangesOfSharedSaves(view);
  EXPECT_EQ(used.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(used.status().message().find("delete step 3 first"), std::string::npos) << used.status();
}

}  // namespace
}  // namespace ckptdb
