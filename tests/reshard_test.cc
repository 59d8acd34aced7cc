// Loading into any sharding: PyTorch 1.13's resharding matrix with ranks as
// threads, sharded <-> plain, n-d and zero-size shards, every dtype, partial
// loads, dtype conversion, and every validation error.
#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <tuple>

#include "ckptdb/ckptdb.h"
#include "format/keys.h"
#include "format/metadata_codec.h"
#include "model/chunk_grid.h"
#include "store/rocksdb_store_internal.h"
#include "test_util.h"
#include "thread_communicator.h"

namespace ckptdb {
namespace {

using testing::PatternTensor;
using testing::TempDir;

// A layout: per rank, the (offsets, sizes) boxes it holds.
struct Layout {
  const char* name;
  std::vector<std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>> per_rank;
};

// Copies box (offsets, sizes) of the row-major `full` tensor into a new one.
Tensor Slice(const Tensor& full, const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes) {
  Tensor out = Tensor::Zeros(full.dtype(), sizes).value();
  const size_t es = DTypeSize(full.dtype());
  const Shape& g = full.shape();
  std::vector<int64_t> idx(sizes.size(), 0);
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t lin = 0;
    for (size_t d = 0; d < g.size(); ++d) lin = lin * g[d] + offsets[d] + idx[d];
    std::memcpy(static_cast<char*>(out.data()) + i * es, static_cast<const char*>(full.data()) + lin * es, es);
    for (size_t d = sizes.size(); d-- > 0;) {
      if (++idx[d] < sizes[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

ShardedTensor Shards(const Tensor& full, const Layout& layout, int rank, bool zeros) {
  std::vector<Shard> shards;
  for (const auto& [off, size] : layout.per_rank[rank]) {
    Tensor t = Slice(full, off, size);
    shards.push_back(Shard{off, zeros ? testing::ZerosLike(t) : t});
  }
  return ShardedTensor::Create(full.dtype(), full.shape(), std::move(shards)).value();
}

// How the saves of a resharding test cut their pieces: as the defaults do
// (tensors this small are one chunk each), or into many tiny chunks, as runs
// of bytes or as n-d boxes, compressed or not.
struct Cut {
  const char* name;
  uint64_t chunk_bytes;  // 0: StoreOptions' default
  ChunkLayout layout;
  Compression compression;
};

class ReshardBase : public ::testing::Test {
 protected:
  virtual Cut cut() const { return Cut{"default", 0, ChunkLayout::kBoxes, Compression::kNone}; }
  StatusOr<std::unique_ptr<StoreWriter>> OpenWriter() {
    StoreOptions o;
    o.chunk_layout = cut().layout;
    o.compression = cut().compression;
    StoreWriterSeams seams;
    seams.chunk_bytes = cut().chunk_bytes;
    return OpenStoreWriterWithSeams(store_, o, seams);
  }
  // Pieces of step `step` cut into boxes.
  int BoxedPieces(int64_t step) {
    auto r = OpenStoreReader(store_);
    if (!r.ok()) return -1;
    auto md = (*r)->ReadMetadata(step);
    if (!md.ok()) return -1;
    int n = 0;
    for (const EntryMetadata& e : md->entries) {
      for (const StoredPiece& p : e.pieces) n += p.chunk_shape.empty() ? 0 : 1;
    }
    return n;
  }

  // Saves `full` in `saved` layout (ranks as threads), loads it in `loaded`
  // layout and checks every loaded shard against `full`. Odd steps load
  // through OpenSharedStoreReader (what a job's load uses: only the
  // coordinator opens the database, the ranks read the files it names),
  // even steps through a reader of each rank's own.
  void SaveThenLoad(const Tensor& full, const Layout& saved, const Layout& loaded, int64_t step) {
    SCOPED_TRACE(std::string(saved.name) + " -> " + loaded.name + " (" + cut().name + ")");
    const int save_world = static_cast<int>(saved.per_rank.size());
    std::mutex mu;
    std::vector<Status> statuses(save_world);
    testing::RunRanksAsThreads(save_world, [&](int rank, Communicator& comm) {
      auto w = OpenWriter();
      StateDict sd;
      (void)sd.Add("t", Shards(full, saved, rank, false));
      SaveOptions o;
      o.step = step;
      o.communicator = &comm;
      Status st = w.ok() ? Save(sd, **w, o) : w.status();
      std::lock_guard<std::mutex> lock(mu);
      statuses[rank] = st;
    });
    for (const Status& st : statuses) ASSERT_TRUE(st.ok()) << st;
    // Pieces are cut into boxes exactly where ChooseChunkShape gives a
    // shape, with the cuts that make boxes.
    int boxed = 0;
    if (cut().layout == ChunkLayout::kBoxes) {
      const uint64_t chunk_bytes = cut().chunk_bytes != 0 ? cut().chunk_bytes : StoreOptions().chunk_bytes;
      for (const auto& rank_boxes : saved.per_rank) {
        for (const auto& [off, size] : rank_boxes) {
          boxed += ChooseChunkShape(size, DTypeSize(full.dtype()), chunk_bytes).empty() ? 0 : 1;
        }
      }
    }
    EXPECT_EQ(BoxedPieces(step), boxed);
    boxed_steps_ += boxed > 0 ? 1 : 0;

    const int load_world = static_cast<int>(loaded.per_rank.size());
    std::vector<StateDict> targets(load_world);
    statuses.assign(load_world, Status());
    testing::RunRanksAsThreads(load_world, [&](int rank, Communicator& comm) {
      StatusOr<std::unique_ptr<StorageReader>> r = testing::OpenLoadReader(store_, comm, step % 2 == 1);
      StateDict& sd = targets[rank];
      (void)sd.Add("t", Shards(full, loaded, rank, true));
      LoadOptions o;
      o.step = step;
      o.communicator = &comm;
      Status st = r.ok() ? Load(sd, **r, o) : r.status();
      std::lock_guard<std::mutex> lock(mu);
      statuses[rank] = st;
    });
    for (int rank = 0; rank < load_world; ++rank) {
      ASSERT_TRUE(statuses[rank].ok()) << statuses[rank];
      const ShardedTensor& got = std::get<ShardedTensor>(*targets[rank].Find("t"));
      for (const Shard& s : got.local_shards()) {
        EXPECT_TRUE(s.tensor.BitwiseEquals(Slice(full, s.offsets, s.tensor.shape())))
            << "rank " << rank << " shard at offset " << s.offsets[0];
      }
    }
  }

  TempDir dir_;
  std::string store_ = dir_.Sub("store");
  int boxed_steps_ = 0;  // steps SaveThenLoad saved with a piece cut into boxes
};

class ReshardTest : public ReshardBase, public ::testing::WithParamInterface<Cut> {
 protected:
  Cut cut() const override { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(
    Cuts, ReshardTest,
    ::testing::Values(Cut{"default", 0, ChunkLayout::kBoxes, Compression::kNone},
                      Cut{"rows", 24, ChunkLayout::kRows, Compression::kNone},
                      Cut{"boxes", 24, ChunkLayout::kBoxes, Compression::kNone},
                      Cut{"boxes_auto", 24, ChunkLayout::kBoxes, Compression::kAuto},
                      Cut{"boxes_zstd", 40, ChunkLayout::kBoxes, Compression::kZstd}),
    [](const ::testing::TestParamInfo<Cut>& p) { return std::string(p.param.name); });

// PyTorch 1.13's four layouts of a [10, 20] tensor over 2 ranks.
std::vector<Layout> TorchLayouts() {
  auto rows = [](int64_t b, int64_t e) { return std::make_pair(std::vector<int64_t>{b, 0}, std::vector<int64_t>{e - b, 20}); };
  return {
      {"chunks 5/5", {{rows(0, 5)}, {rows(5, 10)}}},
      {"chunks 3,3,3,1 on 0,1,1,0", {{rows(0, 3), rows(9, 10)}, {rows(3, 6), rows(6, 9)}}},
      {"rows 0:2 r0, 2:3 r1, 3:6 r0, 6:9 r1, 9:10 r0", {{rows(0, 2), rows(3, 6), rows(9, 10)}, {rows(2, 3), rows(6, 9)}}},
      {"rows 0:8 r1, 8:10 r0", {{rows(8, 10)}, {rows(0, 8)}}},
  };
}

TEST_P(ReshardTest, TorchMatrixAllTwelveOrderedPairs) {
  Tensor full = PatternTensor(DType::kF32, {10, 20}, 1);
  auto layouts = TorchLayouts();
  int64_t step = 0;
  for (size_t a = 0; a < layouts.size(); ++a) {
    for (size_t b = 0; b < layouts.size(); ++b) {
      if (a != b) SaveThenLoad(full, layouts[a], layouts[b], step++);
    }
  }
  EXPECT_EQ(step, 12);
  if (GetParam().chunk_bytes != 0 && GetParam().layout == ChunkLayout::kBoxes) {
    EXPECT_EQ(boxed_steps_, 12);
  }
}

TEST_P(ReshardTest, RowsToColumnsAndToOtherWorldSizes) {
  Tensor full = PatternTensor(DType::kBF16, {10, 20}, 2);
  auto cols = [](int64_t b, int64_t e) { return std::make_pair(std::vector<int64_t>{0, b}, std::vector<int64_t>{10, e - b}); };
  Layout columns{"columns 0:7, 7:20", {{cols(0, 7)}, {cols(7, 20)}}};
  Layout three{"3 ranks, uneven columns", {{cols(0, 1)}, {cols(1, 13)}, {cols(13, 20)}}};
  Layout blocks{"2x2 blocks on 4 ranks",
                {{{{0, 0}, {5, 10}}}, {{{0, 10}, {5, 10}}}, {{{5, 0}, {5, 10}}}, {{{5, 10}, {5, 10}}}}};
  SaveThenLoad(full, TorchLayouts()[0], columns, 0);
  SaveThenLoad(full, columns, TorchLayouts()[2], 1);
  SaveThenLoad(full, blocks, three, 2);
  SaveThenLoad(full, three, blocks, 3);
  if (GetParam().chunk_bytes != 0 && GetParam().layout == ChunkLayout::kBoxes) {
    EXPECT_EQ(boxed_steps_, 4);
  }
}

TEST_P(ReshardTest, ThreeDimensionalAndZeroSizeShards) {
  Tensor full = PatternTensor(DType::kI32, {4, 6, 5}, 3);
  Layout dim1{"dim 1 in 2,4 with an empty shard",
              {{{{0, 0, 0}, {4, 2, 5}}, {{0, 2, 0}, {4, 0, 5}}}, {{{0, 2, 0}, {4, 4, 5}}}}};
  Layout dim2{"dim 2 in 3 uneven", {{{{0, 0, 0}, {4, 6, 1}}}, {{{0, 0, 1}, {4, 6, 3}}}, {{{0, 0, 4}, {4, 6, 1}}}}};
  Layout cubes{"odd blocks",
               {{{{0, 0, 0}, {3, 6, 5}}, {{3, 0, 0}, {1, 3, 5}}}, {{{3, 3, 0}, {1, 3, 2}}, {{3, 3, 2}, {1, 3, 3}}}}};
  SaveThenLoad(full, dim1, dim2, 0);
  SaveThenLoad(full, dim2, cubes, 1);
  SaveThenLoad(full, cubes, dim1, 2);
  if (GetParam().chunk_bytes != 0 && GetParam().layout == ChunkLayout::kBoxes) {
    EXPECT_EQ(boxed_steps_, 3);
  }
}

TEST_P(ReshardTest, EveryDTypeRowsToColumns) {
  auto rows = [](int64_t b, int64_t e) { return std::make_pair(std::vector<int64_t>{b, 0}, std::vector<int64_t>{e - b, 7}); };
  auto cols = [](int64_t b, int64_t e) { return std::make_pair(std::vector<int64_t>{0, b}, std::vector<int64_t>{6, e - b}); };
  Layout r{"rows", {{rows(0, 4)}, {rows(4, 6)}}};
  Layout c{"cols", {{cols(0, 3)}, {cols(3, 5)}, {cols(5, 7)}}};
  int64_t step = 0;
  for (DType d : kAllDTypes) {
    SaveThenLoad(PatternTensor(d, {6, 7}, static_cast<uint32_t>(10 + step)), r, c, step);
    ++step;
  }
}

// Sharded and plain tensors of size 32 in four layouts, all 16 pairs.
TEST_P(ReshardTest, ShardedAndPlainInterchangeOnAllSixteenPairs) {
  Tensor full = PatternTensor(DType::kF64, {32}, 4);
  auto piece = [](int64_t b, int64_t e) { return std::make_pair(std::vector<int64_t>{b}, std::vector<int64_t>{e - b}); };
  const std::vector<std::vector<std::pair<int64_t, int64_t>>> kinds[] = {
      {},                                   // plain tensor
      {{{0, 16}}, {{16, 32}}},              // two even shards
      {{{0, 5}, {20, 32}}, {{5, 20}}},      // uneven, two on rank 0
      {{{0, 31}}, {{31, 32}}, {{32, 32}}},  // 3 ranks, one holding nothing
  };
  auto make = [&](int k, int rank, bool zeros) -> Entry {
    if (kinds[k].empty()) return zeros ? testing::ZerosLike(full) : full;
    Layout l{"", {}};
    for (const auto& rk : kinds[k]) {
      std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> boxes;
      for (auto [b, e] : rk) boxes.push_back(piece(b, e));
      l.per_rank.push_back(boxes);
    }
    return Shards(full, l, rank, zeros);
  };
  auto world = [&](int k) { return kinds[k].empty() ? 1 : static_cast<int>(kinds[k].size()); };
  int64_t step = 0;
  for (int a = 0; a < 4; ++a) {
    for (int b = 0; b < 4; ++b, ++step) {
      SCOPED_TRACE("saved layout " + std::to_string(a) + ", loaded layout " + std::to_string(b));
      std::mutex mu;
      std::vector<Status> st(std::max(world(a), world(b)));
      testing::RunRanksAsThreads(world(a), [&](int rank, Communicator& comm) {
        auto w = OpenWriter();
        StateDict sd;
        (void)sd.AddEntry("x", make(a, rank, false));
        SaveOptions o;
        o.step = step;
        o.communicator = &comm;
        Status s = Save(sd, **w, o);
        std::lock_guard<std::mutex> lock(mu);
        st[rank] = s;
      });
      for (const Status& s : st) ASSERT_TRUE(s.ok()) << s;
      testing::RunRanksAsThreads(world(b), [&](int rank, Communicator& comm) {
        auto r = OpenStoreReader(store_);
        StateDict sd;
        (void)sd.AddEntry("x", make(b, rank, true));
        LoadOptions o;
        o.step = step;
        o.communicator = &comm;
        Status s = Load(sd, **r, o);
        if (s.ok()) {
          const Entry& e = *sd.Find("x");
          if (const Tensor* t = std::get_if<Tensor>(&e)) {
            if (!t->BitwiseEquals(full)) s = Status::Internal("plain target differs");
          } else {
            for (const Shard& sh : std::get<ShardedTensor>(e).local_shards()) {
              if (!sh.tensor.BitwiseEquals(Slice(full, sh.offsets, sh.tensor.shape()))) s = Status::Internal("shard differs");
            }
          }
        }
        std::lock_guard<std::mutex> lock(mu);
        st[rank] = s;
      });
      for (const Status& s : st) ASSERT_TRUE(s.ok()) << s;
    }
  }
}

// Store format 6: a rank loads only the pieces records of the entries it
// loads. Saved on 2 ranks as rows, entry "t" loads on 3 ranks as columns
// with entry "u"'s record gone; a load that wants "u" on one rank only
// fails every rank alike (DataLoss naming it), no target touched.
class PiecesRecordsReshardTest : public ReshardBase {};

TEST_F(PiecesRecordsReshardTest, ALoadOfOneEntryReshardsWithoutTheOthersRecords) {
  const Tensor full = PatternTensor(DType::kF32, {10, 20}, 3);
  const Tensor other = PatternTensor(DType::kI32, {6}, 4);
  auto rows = [](int64_t b, int64_t e) { return std::make_pair(std::vector<int64_t>{b, 0}, std::vector<int64_t>{e - b, 20}); };
  auto cols = [](int64_t b, int64_t e) { return std::make_pair(std::vector<int64_t>{0, b}, std::vector<int64_t>{10, e - b}); };
  const Layout saved{"rows", {{rows(0, 4)}, {rows(4, 10)}}};
  const Layout loaded{"columns", {{cols(0, 5)}, {cols(5, 12)}, {cols(12, 20)}}};
  std::vector<Status> statuses(2);
  testing::RunRanksAsThreads(2, [&](int rank, Communicator& comm) {
    auto w = OpenWriter();
    StateDict sd;
    (void)sd.Add("t", Shards(full, saved, rank, false));
    (void)sd.Add("u", other);
    SaveOptions o;
    o.step = 5;
    o.communicator = &comm;
    statuses[rank] = w.ok() ? Save(sd, **w, o) : w.status();
  });
  for (const Status& st : statuses) ASSERT_TRUE(st.ok()) << st;
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), store_ + "/db", &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    std::string v;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), PiecesKey(5, 1), &v).ok()) << "u is entry 1";
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), PiecesKey(5, 1)).ok());
  }
  for (bool want_u : {false, true}) {
    SCOPED_TRACE(want_u ? "rank 1 wants u" : "t only");
    std::vector<StateDict> targets(3);
    statuses.assign(3, Status());
    testing::RunRanksAsThreads(3, [&](int rank, Communicator& comm) {
      auto r = OpenStoreReader(store_);
      StateDict& sd = targets[rank];
      (void)sd.Add("t", Shards(full, loaded, rank, true));
      if (want_u && rank == 1) (void)sd.Add("u", testing::ZerosLike(other));
      LoadOptions o;
      o.step = 5;
      o.communicator = &comm;
      statuses[rank] = r.ok() ? Load(sd, **r, o) : r.status();
    });
    for (int rank = 0; rank < 3; ++rank) {
      const ShardedTensor& got = std::get<ShardedTensor>(*targets[rank].Find("t"));
      if (!want_u) {
        ASSERT_TRUE(statuses[rank].ok()) << statuses[rank];
        for (const Shard& s : got.local_shards()) {
          EXPECT_TRUE(s.tensor.BitwiseEquals(Slice(full, s.offsets, s.tensor.shape()))) << "rank " << rank;
        }
        continue;
      }
      const Status& st = statuses[rank];
      EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
      EXPECT_EQ(st.ToString(), statuses[0].ToString()) << "every rank fails alike";
      EXPECT_NE(st.ToString().find("the pieces record of entry 'u' of step 5 is missing"), std::string::npos) << st;
      for (const Shard& s : got.local_shards()) {
        EXPECT_TRUE(s.tensor.BitwiseEquals(testing::ZerosLike(s.tensor))) << "rank " << rank << " untouched";
      }
    }
  }
}

class ValidationTest : public ReshardBase {
 protected:
  void SetUp() override {
    StateDict sd;
    ASSERT_OK(sd.Add("w", PatternTensor(DType::kF32, {4, 6}, 1)));
    ASSERT_OK(sd.Add("s", ShardedTensor::Create(DType::kF32, {8}, {{{0}, PatternTensor(DType::kF32, {8}, 2)}}).value()));
    ASSERT_OK(sd.AddBytes("b", "bytes"));
    auto w = OpenStoreWriter(store_);
    ASSERT_TRUE(w.ok());
    ASSERT_OK(testing::SaveNoDist(sd, **w, 1));
  }
  Status LoadWith(StateDict& target, LoadOptions o = {}, LoadStats* stats = nullptr) {
    auto r = OpenStoreReader(store_);
    EXPECT_TRUE(r.ok());
    o.step = 1;
    o.no_dist = true;
    return Load(target, **r, o, stats);
  }
};

TEST_F(ValidationTest, EachMismatchNamesTheFqnAndWhatWasExpected) {
  struct Case {
    std::string fragment;
    std::function<void(StateDict&)> build;
  };
  const Case cases[] = {
      {"entry 'nope' is not in step 1 (LoadOptions::allow_missing skips such entries)",
       [](StateDict& t) { (void)t.Add("nope", Tensor::Zeros(DType::kF32, {1}).value()); }},
      {"entry 'w': kind mismatch: the target is bytes, the step holds tensor", [](StateDict& t) { (void)t.AddBytes("w", ""); }},
      {"entry 'b': kind mismatch: the target is tensor, the step holds bytes",
       [](StateDict& t) { (void)t.Add("b", Tensor::Zeros(DType::kU8, {5}).value()); }},
      {"entry 'w': shape mismatch: the target is [6, 4], the step holds [4, 6]",
       [](StateDict& t) { (void)t.Add("w", Tensor::Zeros(DType::kF32, {6, 4}).value()); }},
      {"entry 's': shape mismatch: the target is [9], the step holds [8]",
       [](StateDict& t) {
         (void)t.Add("s", ShardedTensor::Create(DType::kF32, {9}, {{{0}, Tensor::Zeros(DType::kF32, {9}).value()}}).value());
       }},
      {"entry 'w': dtype mismatch: the target is bf16, the step holds f32 (LoadOptions::convert_dtype converts)",
       [](StateDict& t) { (void)t.Add("w", Tensor::Zeros(DType::kBF16, {4, 6}).value()); }},
  };
  for (const Case& c : cases) {
    StateDict target;
    c.build(target);
    (void)target.AddBytes("b", "untouched");  // a sentinel, unless the case uses 'b'

    Status st = LoadWith(target);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.ToString().find(c.fragment), std::string::npos) << st;
    // Validation failed before anything was read or resized.
    if (target.Find("b") && std::holds_alternative<Bytes>(*target.Find("b"))) {
      EXPECT_EQ(std::get<Bytes>(*target.Find("b")).data, "untouched");
    }
  }
}

// A target that fails validation on one rank fails the load on every rank
// before any rank reads: the verdicts are shared first, so no rank's memory
// changes (a resumed job never holds a mix of old and new state), and every
// rank returns the same error naming the rank(s) whose target was wrong.
TEST_F(ValidationTest, ABadTargetOnOneRankLeavesEveryRankUntouched) {
  constexpr int kWorld = 4;
  struct Case {
    const char* name;
    std::set<int> bad_ranks;
    std::function<void(StateDict&)> spoil;
    const char* fragment;
  };
  const Case cases[] = {
      {"shape on rank 1", {1}, [](StateDict& t) { (void)t.Add("w", Tensor::Zeros(DType::kF32, {6, 4}).value()); },
       "entry 'w': shape mismatch: the target is [6, 4], the step holds [4, 6]"},
      {"dtype on rank 1", {1}, [](StateDict& t) { (void)t.Add("w", Tensor::Zeros(DType::kBF16, {4, 6}).value()); },
       "entry 'w': dtype mismatch"},
      {"missing key on rank 1", {1}, [](StateDict& t) { (void)t.Add("nope", Tensor::Zeros(DType::kI8, {2}).value()); },
       "entry 'nope' is not in step 1"},
      {"shapes on ranks 1 and 3", {1, 3}, [](StateDict& t) { (void)t.Add("w", Tensor::Zeros(DType::kF32, {2}).value()); },
       "entry 'w': shape mismatch"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<StateDict> targets(kWorld), copies(kWorld);
    for (int rank = 0; rank < kWorld; ++rank) {
      for (StateDict* sd : {&targets[rank], &copies[rank]}) {
        // Old state, distinct per rank: what a resumed job holds before it loads.
        if (c.bad_ranks.count(rank)) {
          c.spoil(*sd);
        }
        if (sd->Find("w") == nullptr) (void)sd->Add("w", PatternTensor(DType::kF32, {4, 6}, 60 + rank));
        (void)sd->Add("s", ShardedTensor::Create(DType::kF32, {8}, {{{2 * rank}, PatternTensor(DType::kF32, {2}, 70 + rank)}})
                               .value());
        (void)sd->AddBytes("b", "old state of rank " + std::to_string(rank));
      }
    }
    std::vector<Status> statuses(kWorld);
    testing::RunRanksAsThreads(kWorld, [&](int rank, Communicator& comm) {
      auto r = OpenStoreReader(store_);
      LoadOptions o;
      o.step = 1;
      o.communicator = &comm;
      statuses[rank] = r.ok() ? Load(targets[rank], **r, o) : r.status();
    });
    for (int rank = 0; rank < kWorld; ++rank) {
      SCOPED_TRACE("rank " + std::to_string(rank));
      const Status& st = statuses[rank];
      EXPECT_FALSE(st.ok());
      EXPECT_EQ(st.ToString(), statuses[0].ToString()) << "every rank fails alike";
      std::set<int> failed;
      for (const auto& [r, s] : st.rank_failures()) failed.insert(r);
      EXPECT_EQ(failed, c.bad_ranks) << st;
      EXPECT_NE(st.ToString().find(c.fragment), std::string::npos) << st;
      // Not a byte of any rank's target changed.
      for (const auto& [fqn, e] : copies[rank].entries()) {
        const Entry* now = targets[rank].Find(fqn);
        ASSERT_NE(now, nullptr) << fqn;
        if (const Tensor* t = std::get_if<Tensor>(&e)) {
          EXPECT_TRUE(std::get<Tensor>(*now).BitwiseEquals(*t)) << fqn;
        } else if (const ShardedTensor* s = std::get_if<ShardedTensor>(&e)) {
          EXPECT_TRUE(std::get<ShardedTensor>(*now).local_shards()[0].tensor.BitwiseEquals(s->local_shards()[0].tensor))
              << fqn;
        } else {
          EXPECT_EQ(std::get<Bytes>(*now).data, std::get<Bytes>(e).data) << fqn;
        }
      }
    }
  }
}

// Options that are wrong on one rank only (a key named twice, a step out of
// range) fail every rank alike, through the same collectives, instead of
// one rank returning early and the others waiting out the timeout.
TEST_F(ValidationTest, BadOptionsOnOneRankFailEveryRankAlike) {
  for (int variant = 0; variant < 2; ++variant) {
    SCOPED_TRACE(variant == 0 ? "a key named twice on rank 1" : "a step out of range on rank 1");
    std::vector<Status> statuses(2);
    testing::RunRanksAsThreads(2, [&](int rank, Communicator& comm) {
      auto r = OpenStoreReader(store_);
      StateDict target;
      (void)target.Add("w", Tensor::Zeros(DType::kF32, {4, 6}).value());
      LoadOptions o;
      o.step = 1;
      o.communicator = &comm;
      if (rank == 1 && variant == 0) o.keys = {"w", "w"};
      if (rank == 1 && variant == 1) o.step = -5;
      statuses[rank] = r.ok() ? Load(target, **r, o) : r.status();
    });
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_EQ(statuses[rank].ToString(), statuses[1].ToString());
      ASSERT_EQ(statuses[rank].rank_failures().size(), 1u) << statuses[rank];
      EXPECT_EQ(statuses[rank].rank_failures().begin()->first, 1);
    }
  }
}

TEST_F(ValidationTest, PartialLoadsAndMissingKeys) {
  StateDict target;
  ASSERT_OK(target.Add("w", Tensor::Zeros(DType::kF32, {4, 6}).value()));
  ASSERT_OK(target.AddBytes("b", "old"));
  ASSERT_OK(target.Add("extra", Tensor::Zeros(DType::kI8, {3}).value()));
  LoadOptions only_w;
  only_w.keys = {"w"};
  LoadStats stats;
  ASSERT_OK(LoadWith(target, only_w, &stats));
  EXPECT_TRUE(std::get<Tensor>(*target.Find("w")).BitwiseEquals(PatternTensor(DType::kF32, {4, 6}, 1)));
  EXPECT_EQ(std::get<Bytes>(*target.Find("b")).data, "old");
  EXPECT_EQ(stats.chunks_read, 1u);

  LoadOptions bad_key;
  bad_key.keys = {"zzz"};
  Status st = LoadWith(target, bad_key);
  EXPECT_NE(st.ToString().find("LoadOptions::keys names 'zzz', which is not an entry of the target"), std::string::npos)
      << st;

  // The same key twice means nothing more than once: refused, naming it,
  // before anything is read.
  LoadOptions twice;
  twice.keys = {"w", "b", "w"};
  st = LoadWith(target, twice);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.ToString().find("LoadOptions::keys names 'w' twice"), std::string::npos) << st;
  EXPECT_EQ(std::get<Bytes>(*target.Find("b")).data, "old");

  LoadOptions tolerant;
  tolerant.allow_missing = true;
  stats = LoadStats{};
  ASSERT_OK(LoadWith(target, tolerant, &stats));
  EXPECT_EQ(std::get<Bytes>(*target.Find("b")).data, "bytes");
  ASSERT_EQ(stats.missing.size(), 1u);
  EXPECT_EQ(stats.missing[0], "extra");
}

TEST_F(ValidationTest, DTypeConversionOnRequest) {
  StateDict target;
  ASSERT_OK(target.Add("w", Tensor::Zeros(DType::kBF16, {4, 6}).value()));
  ASSERT_OK(target.Add("s", ShardedTensor::Create(DType::kF64, {8}, {{{2}, Tensor::Zeros(DType::kF64, {5}).value()}}).value()));
  LoadOptions convert;
  convert.convert_dtype = true;
  ASSERT_OK(LoadWith(target, convert));
  Tensor w = PatternTensor(DType::kF32, {4, 6}, 1);
  const Tensor& got = std::get<Tensor>(*target.Find("w"));
  for (int i = 0; i < 24; ++i) {
    uint16_t want;
    ConvertElements(DType::kF32, w.data_as<float>() + i, DType::kBF16, &want, 1);
    ASSERT_EQ(got.data_as<uint16_t>()[i], want) << i;
  }
  Tensor s = PatternTensor(DType::kF32, {8}, 2);
  const Tensor& part = std::get<ShardedTensor>(*target.Find("s")).local_shards()[0].tensor;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(part.data_as<double>()[i], static_cast<double>(s.data_as<float>()[i + 2]));
}

TEST_F(ValidationTest, OverlappingSavedShardsAreCorruptMetadata) {
  // Rewrite step 1's metadata so that two pieces of 's' overlap.
  auto r = OpenStoreReader(store_);
  ASSERT_TRUE(r.ok());
  auto md = (*r)->ReadMetadata(1);
  ASSERT_TRUE(md.ok());
  r->reset();
  StepMetadata bad = *md;
  for (EntryMetadata& e : bad.entries) {
    if (e.fqn != "s") continue;
    StoredPiece p = e.pieces[0];
    p.offsets = {4};
    p.sizes = {4};
    p.nbytes = 16;
    p.num_chunks = 1;
    e.pieces[0].sizes = {6};
    e.pieces[0].nbytes = 24;
    e.pieces.push_back(p);
  }
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), store_ + "/db", &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), MetadataKey(1), EncodeMetadataValue(bad)).ok());
  }
  StateDict target;
  ASSERT_OK(target.Add("s", Tensor::Zeros(DType::kF32, {8}).value()));
  Status st = LoadWith(target);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
  EXPECT_NE(st.ToString().find("entry 's': saved shards [0:6] and [4:8] overlap"), std::string::npos) << st;
}

// Known values of the conversions.
TEST(ConvertElements, RoundsAndSaturatesLikePyTorch) {
  auto to = [](DType d, double v) {
    uint32_t out = 0;
    ConvertElements(DType::kF64, &v, d, &out, 1);
    return out;
  };
  EXPECT_EQ(to(DType::kBF16, 1.0), 0x3f80u);
  EXPECT_EQ(to(DType::kBF16, -2.0), 0xc000u);
  EXPECT_EQ(to(DType::kBF16, 1.0 + 1.0 / 256), 0x3f80u);  // tie: to even
  EXPECT_EQ(to(DType::kBF16, 1.0 + 3.0 / 256), 0x3f82u);  // tie: to even (up)
  EXPECT_EQ(to(DType::kF16, 65504.0), 0x7bffu);
  EXPECT_EQ(to(DType::kF16, 70000.0), 0x7c00u);           // inf
  EXPECT_EQ(to(DType::kF16, std::ldexp(1.0, -24)), 0x0001u);  // smallest subnormal
  EXPECT_EQ(to(DType::kF8E4M3, 448.0), 0x7eu);            // largest finite
  EXPECT_EQ(to(DType::kF8E4M3, 1000.0), 0x7fu);           // NaN: e4m3fn has no inf
  EXPECT_EQ(to(DType::kF8E4M3, -1.0), 0xb8u);
  EXPECT_EQ(to(DType::kF8E4M3, std::ldexp(1.0, -9)), 0x01u);
  EXPECT_EQ(to(DType::kF8E5M2, 57344.0), 0x7bu);
  EXPECT_EQ(to(DType::kF8E5M2, 1e6), 0x7cu);              // inf
  EXPECT_EQ(to(DType::kI8, 300.0), 0x7fu);                // saturates
  EXPECT_EQ(to(DType::kU8, -5.0), 0u);
  EXPECT_EQ(to(DType::kI32, -2.7), static_cast<uint32_t>(-2));
  EXPECT_EQ(to(DType::kBool, 0.5), 1u);
  EXPECT_EQ(to(DType::kI16, NAN), 0u);
  // Every value of the 8- and 16-bit formats survives a round trip via f64.
  for (DType d : {DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2}) {
    uint32_t n = DTypeSize(d) == 1 ? 256 : 65536;
    for (uint32_t bits = 0; bits < n; ++bits) {
      double v = ElementToDouble(d, &bits);
      if (std::isnan(v)) continue;
      uint32_t back = 0;
      ConvertElements(DType::kF64, &v, d, &back, 1);
      ASSERT_EQ(back, bits) << DTypeName(d) << " " << bits << " = " << v;
    }
  }
}

// Chunks never split an element: a chunk size that is not a multiple of the
// element size (accepted in [4 KiB, 1 GiB]) is rounded down per piece, and a
// store whose chunks do split elements (written before format 2) still loads
// correctly through strided, converting and whole loads.
TEST(ChunkAlignment, UnalignedChunkSizesNeverShiftElements) {
  const Shape shape{31, 257};
  const Layout columns{"column blocks on 2",
                       {{{{0, 0}, {31, 128}}}, {{{0, 128}, {31, 129}}}}};
  for (bool legacy : {false, true}) {
    for (DType dtype : {DType::kI16, DType::kI32, DType::kF32, DType::kI64, DType::kF64}) {
      for (uint64_t chunk_bytes : {4097u, 4098u, 4100u, 6006u, 65537u}) {
        SCOPED_TRACE(std::string(legacy ? "split elements (legacy)" : "aligned") + " " + DTypeName(dtype) +
                     " chunk_bytes " + std::to_string(chunk_bytes));
        TempDir dir;
        const std::string store = dir.Sub("store");
        const Tensor full = PatternTensor(dtype, shape, 7);
        StoreOptions so;
        so.chunk_bytes = chunk_bytes;
        so.chunk_layout = ChunkLayout::kRows;  // runs of bytes (boxes hold whole elements by construction)
        StoreWriterSeams seams;
        seams.split_elements = legacy;
        std::mutex mu;
        std::vector<Status> statuses(2);
        testing::RunRanksAsThreads(2, [&](int rank, Communicator& comm) {
          auto w = OpenStoreWriterWithSeams(store, so, seams);
          StateDict sd;
          (void)sd.Add("t", Shards(full, columns, rank, false));
          SaveOptions o;
          o.step = 1;
          o.communicator = &comm;
          Status st = w.ok() ? Save(sd, **w, o) : w.status();
          std::lock_guard<std::mutex> lock(mu);
          statuses[rank] = st;
        });
        for (const Status& st : statuses) ASSERT_TRUE(st.ok()) << st;
        auto reader = OpenStoreReader(store);
        ASSERT_TRUE(reader.ok()) << reader.status();
        auto md = (*reader)->ReadMetadata(1);
        ASSERT_TRUE(md.ok()) << md.status();
        const uint64_t es = DTypeSize(dtype);
        for (const StoredPiece& p : md->entries[0].pieces) {
          EXPECT_EQ(p.chunk_bytes, legacy ? chunk_bytes : chunk_bytes - chunk_bytes % es);
        }
        // Whole, on one rank: every row of the target crosses both pieces.
        auto whole = LoadWhole(**reader, 1);
        ASSERT_TRUE(whole.ok()) << whole.status();
        EXPECT_TRUE(std::get<Tensor>(*whole->Find("t")).BitwiseEquals(full));
        // Strided: rows out of column blocks, in three uneven shards.
        StateDict rows;
        const Tensor part = Slice(full, {5, 0}, {17, 257});
        (void)rows.Add("t", ShardedTensor::Create(dtype, shape, {Shard{{5, 0}, testing::ZerosLike(part)}}).value());
        LoadOptions lo;
        lo.step = 1;
        lo.no_dist = true;
        ASSERT_OK(Load(rows, **reader, lo));
        EXPECT_TRUE(std::get<ShardedTensor>(*rows.Find("t")).local_shards()[0].tensor.BitwiseEquals(part));
        // Converting: into f64 (or f32 from f64), element by element.
        const DType to = dtype == DType::kF64 ? DType::kF32 : DType::kF64;
        Tensor want = Tensor::Zeros(to, shape).value();
        ConvertElements(dtype, full.data(), to, want.data(), static_cast<size_t>(full.numel()));
        StateDict converted;
        (void)converted.Add("t", Tensor::Zeros(to, shape).value());
        lo.convert_dtype = true;
        ASSERT_OK(Load(converted, **reader, lo));
        EXPECT_TRUE(std::get<Tensor>(*converted.Find("t")).BitwiseEquals(want));
      }
    }
  }
}

// |v| rounded to nearest, ties to even, to `bits` significant bits, with v's
// sign, computed exactly with integers: of the two neighbours with `bits`
// significant bits, the nearer one; on a tie, the one with the even last bit.
double ExactlyRounded(int64_t v, int bits) {
  const uint64_t a = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);  // <= 2^63
  int len = 0;
  while (len < 64 && (a >> len) != 0) ++len;
  double r;
  if (len <= bits) {
    r = static_cast<double>(a);
  } else {
    const int shift = len - bits;
    const uint64_t lo = (a >> shift) << shift, hi = lo + (uint64_t{1} << shift);  // hi <= 2^63 + 2^61
    const uint64_t below = a - lo, above = hi - a;
    const bool up = above < below || (above == below && ((a >> shift) & 1) == 1);
    const uint64_t q = (up ? hi : lo) >> shift;  // at most 2^bits: exact in a double
    r = std::ldexp(static_cast<double>(q), shift);
  }
  return v < 0 ? -r : r;
}

int SignificantBits(DType d) {
  switch (d) {
    case DType::kF64: return 53;
    case DType::kF32: return 24;
    case DType::kF16: return 11;
    case DType::kBF16: return 8;
    case DType::kF8E4M3: return 4;
    case DType::kF8E5M2: return 3;
    default: return 0;
  }
}

uint64_t Convert(DType from, const void* v, DType to) {
  uint64_t out = 0;
  ConvertElements(from, v, to, &out, 1);
  return out;
}

// The bits that a correctly rounded conversion of integer `v` to `to` gives:
// the exactly rounded value is representable in `to` (or beyond its range),
// so converting it from f64 rounds no further.
uint64_t CorrectlyRoundedBits(int64_t v, DType to) {
  const double r = ExactlyRounded(v, SignificantBits(to));
  return Convert(DType::kF64, &r, to);
}

// An integer beyond 2^53 must be rounded once, to the target's precision,
// not first to a double's 53 bits and then again (which is 1 ulp off when
// the first rounding lands on a tie of the second).
TEST(ConvertElements, IntegersToFloatsRoundOnce) {
  const int64_t f32_case = 0x0800000800000001;  // 2^59 + 2^35 + 1: just above half an f32 ulp
  EXPECT_EQ(Convert(DType::kI64, &f32_case, DType::kF32), 0x5d000001u);
  const int64_t f32_neg = -f32_case;
  EXPECT_EQ(Convert(DType::kI64, &f32_neg, DType::kF32), 0xdd000001u);
  const int64_t bf16_case = 0x0808000000000001;  // 2^59 + 2^51 + 1: just above half a bf16 ulp
  EXPECT_EQ(Convert(DType::kI64, &bf16_case, DType::kBF16), 0x5d01u);
  const int64_t f64_case = 0x0800000000000041;  // 2^59 + 2^6 + 1: just above half an f64 ulp
  const double f64_want = std::ldexp(1.0, 59) + std::ldexp(1.0, 7);
  uint64_t f64_bits = 0;
  std::memcpy(&f64_bits, &f64_want, 8);
  EXPECT_EQ(Convert(DType::kI64, &f64_case, DType::kF64), f64_bits);
  const int64_t min = INT64_MIN;
  EXPECT_EQ(Convert(DType::kI64, &min, DType::kF32), 0xdf000000u);
  EXPECT_EQ(Convert(DType::kI64, &min, DType::kBF16), 0xdf00u);

  // Random integers of every magnitude, many of them on or next to a tie of
  // the target's precision.
  std::mt19937_64 rng(12);
  const DType targets[] = {DType::kF64, DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kF8E5M2};
  for (int i = 0; i < 200000; ++i) {
    const DType to = targets[i % 6];
    const int len = 1 + static_cast<int>(rng() % 63);
    uint64_t a = (uint64_t{1} << (len - 1)) | (rng() & ((uint64_t{1} << (len - 1)) - 1));
    const int shift = len - SignificantBits(to);
    if (shift > 1 && rng() % 2 == 0) {
      // The bits below the target's last one: exactly half, or half +- 1.
      a = (a >> shift << shift) | (uint64_t{1} << (shift - 1));
      a += rng() % 3 - 1;
    }
    const int64_t v = rng() % 2 ? static_cast<int64_t>(a) : -static_cast<int64_t>(a);
    ASSERT_EQ(Convert(DType::kI64, &v, to), CorrectlyRoundedBits(v, to)) << DTypeName(to) << " of " << v;
    if (to == DType::kF32) {
      // And against the hardware's own int64 -> float conversion (one rounding).
      const float want = static_cast<float>(v);
      uint32_t want_bits = 0;
      std::memcpy(&want_bits, &want, 4);
      ASSERT_EQ(Convert(DType::kI64, &v, to), want_bits) << v;
    }
  }
}

// The narrower integer paths were exact before and stay so.
TEST(ConvertElements, SmallIntegersToFloatsAreUnchanged) {
  const DType targets[] = {DType::kF64, DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kF8E5M2};
  for (DType to : targets) {
    for (int u = 0; u < 256; ++u) {
      const uint8_t b = static_cast<uint8_t>(u);
      ASSERT_EQ(Convert(DType::kU8, &b, to), CorrectlyRoundedBits(u, to)) << DTypeName(to) << " of u8 " << u;
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 60000; ++i) {
    const DType to = targets[i % 6];
    const int32_t v = static_cast<int32_t>(rng());
    ASSERT_EQ(Convert(DType::kI32, &v, to), CorrectlyRoundedBits(v, to)) << DTypeName(to) << " of i32 " << v;
    const int64_t w = v;
    ASSERT_EQ(Convert(DType::kI64, &w, to), Convert(DType::kI32, &v, to)) << DTypeName(to) << " of " << v;
  }
  // Integer targets from i64: still exact or saturating.
  const int64_t big = 0x0800000800000001;
  EXPECT_EQ(Convert(DType::kI64, &big, DType::kI32), 0x7fffffffu);
  EXPECT_EQ(Convert(DType::kI64, &big, DType::kI64), static_cast<uint64_t>(big));
}

// Several target shards on one rank that overlap one stored chunk read it
// (and verify it) once: two column halves of a row-major tensor each need
// every chunk.
TEST(ChunkReads, AChunkWantedByTwoTargetShardsIsReadOnce) {
  TempDir dir;
  const Tensor full = PatternTensor(DType::kF32, {256, 16}, 3);  // 16 KiB: 4 chunks of 4 KiB
  StoreOptions so;
  so.chunk_bytes = 4096;
  auto w = OpenStoreWriter(dir.Sub("s"), so);
  ASSERT_TRUE(w.ok()) << w.status();
  StateDict sd;
  ASSERT_OK(sd.Add("t", full));
  ASSERT_OK(testing::SaveNoDist(sd, **w, 0));
  auto r = OpenStoreReader(dir.Sub("s"));
  ASSERT_TRUE(r.ok()) << r.status();
  const Tensor left = Slice(full, {0, 0}, {256, 8}), right = Slice(full, {0, 8}, {256, 8});
  StateDict target;
  ASSERT_OK(target.Add("t", ShardedTensor::Create(DType::kF32, {256, 16},
                                                  {Shard{{0, 0}, testing::ZerosLike(left)},
                                                   Shard{{0, 8}, testing::ZerosLike(right)}})
                                .value()));
  LoadStats stats;
  ASSERT_OK(testing::LoadNoDist(target, **r, 0, &stats));
  EXPECT_EQ(stats.chunks_read, 4u);
  const auto& shards = std::get<ShardedTensor>(*target.Find("t")).local_shards();
  EXPECT_TRUE(shards[0].tensor.BitwiseEquals(left));
  EXPECT_TRUE(shards[1].tensor.BitwiseEquals(right));
}

// Saves `full` as entry "t" of step 0 of a new store at `store`, on one rank,
// with chunks of at most `chunk_bytes`.
void SaveWhole(const std::string& store, const Tensor& full, ChunkLayout layout, uint64_t chunk_bytes) {
  StoreOptions so;
  so.chunk_layout = layout;
  StoreWriterSeams seams;
  seams.chunk_bytes = chunk_bytes;
  auto w = OpenStoreWriterWithSeams(store, so, seams);
  ASSERT_TRUE(w.ok()) << w.status();
  StateDict sd;
  ASSERT_OK(sd.Add("t", full));
  ASSERT_OK(testing::SaveNoDist(sd, **w, 0));
}

// Chunks cut as boxes: a column shard of a tensor saved whole reads the
// boxes of its columns only, where runs of rows make it read every chunk.
TEST(ChunkReads, AColumnShardReadsOnlyTheBoxesItNeeds) {
  const Tensor full = PatternTensor(DType::kF32, {64, 64}, 5);  // 16 KiB
  for (ChunkLayout layout : {ChunkLayout::kBoxes, ChunkLayout::kRows}) {
    const bool boxes = layout == ChunkLayout::kBoxes;
    SCOPED_TRACE(boxes ? "boxes" : "rows");
    TempDir dir;
    SaveWhole(dir.Sub("s"), full, layout, 1024);  // 16 chunks: boxes of 16 x 16, or runs of 4 rows
    auto r = OpenStoreReader(dir.Sub("s"));
    ASSERT_TRUE(r.ok()) << r.status();
    auto md = (*r)->ReadMetadata(0);
    ASSERT_TRUE(md.ok()) << md.status();
    const StoredPiece& p = md->entries[0].pieces[0];
    EXPECT_EQ(p.num_chunks, 16u);
    EXPECT_EQ(p.chunk_shape, boxes ? std::vector<int64_t>({16, 16}) : std::vector<int64_t>{});
    // Columns 16..31, and a box of rows 8..39 x columns 40..47.
    for (auto [offsets, sizes, want_boxes] :
         {std::make_tuple(std::vector<int64_t>{0, 16}, std::vector<int64_t>{64, 16}, 4u),
          std::make_tuple(std::vector<int64_t>{8, 40}, std::vector<int64_t>{32, 8}, 3u)}) {
      const Tensor want = Slice(full, offsets, sizes);
      StateDict target;
      ASSERT_OK(target.Add(
          "t", ShardedTensor::Create(DType::kF32, {64, 64}, {Shard{offsets, testing::ZerosLike(want)}}).value()));
      LoadStats stats;
      ASSERT_OK(testing::LoadNoDist(target, **r, 0, &stats));
      EXPECT_TRUE(std::get<ShardedTensor>(*target.Find("t")).local_shards()[0].tensor.BitwiseEquals(want));
      const uint64_t rows_chunks = boxes ? 0 : (offsets[0] + sizes[0] + 3) / 4 - offsets[0] / 4;
      EXPECT_EQ(stats.chunks_read, boxes ? want_boxes : rows_chunks);
    }
  }
}

// A damaged box fails the load with DataLoss naming the entry and the
// chunk, whichever target shard reads it; the boxes around it still load.
TEST(ChunkReads, ADamagedBoxIsDataLossNamingIt) {
  const Tensor full = PatternTensor(DType::kF32, {256, 256}, 6);
  TempDir dir;
  SaveWhole(dir.Sub("s"), full, ChunkLayout::kBoxes, 16 << 10);  // boxes of 64 x 64, in RocksDB blocks of their own
  // Box 5: rows 64..127, columns 64..127; its first row as stored.
  ASSERT_TRUE(testing::FlipByteOf(dir.Sub("s") + "/db", ".sst",
                                  std::string(static_cast<const char*>(full.data()) + (64 * 256 + 64) * 4, 64 * 4)));
  auto r = OpenStoreReader(dir.Sub("s"));
  ASSERT_TRUE(r.ok()) << r.status();
  auto load = [&](std::vector<int64_t> offsets, std::vector<int64_t> sizes) {
    StateDict target;
    const Tensor want = Slice(full, offsets, sizes);
    EXPECT_TRUE(target
                    .Add("t", ShardedTensor::Create(DType::kF32, {256, 256}, {Shard{offsets, testing::ZerosLike(want)}})
                                  .value())
                    .ok());
    Status st = testing::LoadNoDist(target, **r, 0);
    if (st.ok() && !std::get<ShardedTensor>(*target.Find("t")).local_shards()[0].tensor.BitwiseEquals(want)) {
      st = Status::Internal("loaded other values");
    }
    return st;
  };
  for (auto [offsets, sizes] : {std::make_pair(std::vector<int64_t>{0, 0}, std::vector<int64_t>{256, 256}),
                                std::make_pair(std::vector<int64_t>{80, 0}, std::vector<int64_t>{4, 256}),
                                std::make_pair(std::vector<int64_t>{0, 80}, std::vector<int64_t>{256, 2})}) {
    Status st = load(offsets, sizes);
    EXPECT_NE(st.ToString().find("DataLoss"), std::string::npos) << st;
    EXPECT_NE(st.ToString().find("entry 't' (step 0, rank 0 item 0) chunk 5 of 16"), std::string::npos) << st;
  }
  EXPECT_OK(load({0, 128}, {256, 128}));  // columns 128..255: other boxes
  EXPECT_OK(load({128, 0}, {128, 256}));  // rows 128..255
}

}  // namespace
}  // namespace ckptdb
