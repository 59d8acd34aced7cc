// A store on the coordinator's host only (StoreAccess::kCoordinatorOnly,
// OpenRemoteStoreReader), with ranks as threads: each non-coordinator rank is
// given a store path that does not exist and its own local staging
// directory, so that anything it wrote or read there would show. (Real
// processes on separate hosts: tests/hosts_test.sh.)
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "ckptdb/ckptdb.h"
#include "comm/transfer.h"
#include "format/keys.h"
#include "test_util.h"
#include "thread_communicator.h"
#include "util/le_bytes.h"

namespace ckptdb {
namespace {

namespace fs = std::filesystem;

// A global [rows, 64] f32 tensor (two 4 KiB chunks per rank at most) split
// by rows over `world` ranks, a replicated tensor and a bytes entry.
constexpr int64_t kRows = 96;

Tensor Global() { return testing::PatternTensor(DType::kF32, {kRows, 64}, 7); }

StateDict RankState(int rank, int world, bool zeros, bool by_columns = false) {
  const Tensor g = Global();
  StateDict sd;
  if (!by_columns) {
    const int64_t rows = kRows / world;
    Tensor part = Tensor::Copy(DType::kF32, {rows, 64}, static_cast<const char*>(g.data()) + rank * rows * 64 * 4,
                               static_cast<uint64_t>(rows) * 64 * 4)
                      .value();
    if (zeros) part = testing::ZerosLike(part);
    (void)sd.Add("w", ShardedTensor::Create(DType::kF32, {kRows, 64}, {Shard{{rank * rows, 0}, part}}).value());
  } else {
    const int64_t cols = 64 / world;
    Tensor part = Tensor::Zeros(DType::kF32, {kRows, cols}).value();
    if (!zeros) {
      for (int64_t r = 0; r < kRows; ++r) {
        std::memcpy(static_cast<char*>(part.data()) + r * cols * 4,
                    static_cast<const char*>(g.data()) + (r * 64 + rank * cols) * 4, cols * 4);
      }
    }
    (void)sd.Add("w", ShardedTensor::Create(DType::kF32, {kRows, 64}, {Shard{{0, rank * cols}, part}}).value());
  }
  Tensor rep = testing::PatternTensor(DType::kI32, {300}, 3);
  (void)sd.Add("rep", zeros ? testing::ZerosLike(rep) : rep);
  (void)sd.AddBytes("blob", zeros ? "" : "saved by the coordinator");
  return sd;
}

// Forwards to another communicator, flipping one byte of the point-to-point
// message of at least 1 KiB that comes after `skip` such messages (from
// any thread: a coordinator serves its ranks on several).
class FlippingCommunicator final : public Communicator {
 public:
  explicit FlippingCommunicator(Communicator& inner, int skip = 0) : inner_(inner), left_(skip) {}
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  Status Broadcast(std::string* data, int root) override { return inner_.Broadcast(data, root); }
  Status Gather(const std::string& mine, int root, std::vector<std::string>* out,
                std::map<int, Status>* missing) override {
    return inner_.Gather(mine, root, out, missing);
  }
  Status Scatter(const std::vector<std::string>& parts, int root, std::string* mine) override {
    return inner_.Scatter(parts, root, mine);
  }
  Status AllGather(const std::string& mine, std::vector<std::string>* out) override {
    return inner_.AllGather(mine, out);
  }
  Status Barrier() override { return inner_.Barrier(); }
  Status Send(int peer, const void* data, size_t n) override {
    if (n < 1024 || left_.fetch_sub(1) != 0) return inner_.Send(peer, data, n);
    std::string copy(static_cast<const char*>(data), n);
    copy[n / 2] ^= 0x10;
    return inner_.Send(peer, copy.data(), n);
  }
  Status Recv(int peer, void* data, size_t n) override { return inner_.Recv(peer, data, n); }
  std::chrono::milliseconds timeout() const override { return inner_.timeout(); }

 private:
  Communicator& inner_;
  std::atomic<int> left_;  // large messages to pass before the one flipped
};

class RemoteStoreTest : public ::testing::Test {
 protected:
  // The store path rank `rank` is given: the real one on the coordinator
  // (rank 0), one that does not exist elsewhere.
  std::string PathOf(int rank) const {
    return rank == 0 || rank == sees_store_ ? store_ : dir_.Sub("absent-" + std::to_string(rank));
  }
  std::string LocalStaging(int rank) const { return dir_.Sub("local-" + std::to_string(rank)); }

  StoreOptions Options(int rank) const {
    StoreOptions o;
    o.access = StoreAccess::kCoordinatorOnly;
    o.local_staging_dir = LocalStaging(rank);
    o.chunk_bytes = 4096;
    o.threads = 1;
    return o;
  }

  // Saves step `step` on `world` ranks; `wrap` may stand in for a rank's
  // communicator. Returns every rank's status.
  std::vector<Status> SaveOn(int world, int64_t step, bool flip_on_rank1 = false,
                             const std::function<void(int, StoreOptions*)>& adjust = {}) {
    std::vector<Status> st(world);
    std::mutex mu;
    testing::RunRanksAsThreads(world, [&](int rank, Communicator& comm) {
      StoreOptions so = Options(rank);
      if (adjust) adjust(rank, &so);
      auto w = OpenStoreWriter(PathOf(rank), so);
      FlippingCommunicator flipping(comm);
      SaveOptions o;
      o.step = step;
      o.communicator = flip_on_rank1 && rank == 1 ? static_cast<Communicator*>(&flipping) : &comm;
      Status s = w.ok() ? Save(RankState(rank, world, false), **w, o) : w.status();
      std::lock_guard<std::mutex> lock(mu);
      st[rank] = s;
    });
    return st;
  }

  // Loads `step` on `world` ranks through OpenRemoteStoreReader, checking
  // every byte; returns every rank's status and chunks read.
  std::vector<Status> LoadOn(int world, int64_t step, bool by_columns, std::vector<uint64_t>* chunks = nullptr) {
    std::vector<Status> st(world);
    if (chunks) chunks->assign(world, 0);
    std::mutex mu;
    testing::RunRanksAsThreads(world, [&](int rank, Communicator& comm) {
      auto r = OpenRemoteStoreReader(PathOf(rank), &comm, 0);
      StateDict target = RankState(rank, world, true, by_columns);
      LoadOptions o;
      o.step = step;
      o.communicator = &comm;
      LoadStats stats;
      Status s = r.ok() ? Load(target, **r, o, &stats) : r.status();
      if (s.ok() && !testing::SameContents(RankState(rank, world, false, by_columns), target)) {
        s = Status::Internal("rank " + std::to_string(rank) + " loaded other values than were saved");
      }
      std::lock_guard<std::mutex> lock(mu);
      st[rank] = s;
      if (chunks) (*chunks)[rank] = stats.chunks_read;
    });
    return st;
  }

  size_t Steps() {
    auto r = OpenStoreReader(store_);
    if (!r.ok()) return 0;
    return (*r)->ListSteps().value().size();
  }

  testing::TempDir dir_;
  std::string store_ = dir_.Sub("store");
  int sees_store_ = -1;  // a rank other than 0 given the store's real path
};

TEST_F(RemoteStoreTest, SaveSendsFilesToTheCoordinatorAndLoadFetchesChunksFromIt) {
  for (const Status& s : SaveOn(3, 1)) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(Steps(), 1u);
  for (int r = 1; r < 3; ++r) {
    EXPECT_FALSE(fs::exists(PathOf(r))) << "rank " << r << " touched the store's path on its host";
    EXPECT_TRUE(!fs::exists(LocalStaging(r)) || fs::is_empty(LocalStaging(r))) << "rank " << r << " left files";
  }
  EXPECT_TRUE(fs::is_empty(store_ + "/staging"));
  // Every byte is where a shared store would have it.
  auto reader = OpenStoreReader(store_);
  ASSERT_TRUE(reader.ok());
  auto whole = LoadWhole(**reader, 1, {"w"});
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(std::get<Tensor>(*whole->Find("w")).BitwiseEquals(Global()));
  // Loads on other world sizes and shardings, each rank fetching only its
  // chunks: by rows on 2 ranks, each [48, 64] half reads the chunks of the
  // rows it needs, as saved by 3 ranks of 32 rows cut into boxes of 32 x 32
  // (2 each: rows 0-47 touch rank 0's 2 and rank 1's 2).
  std::vector<uint64_t> chunks;
  for (const Status& s : LoadOn(2, 1, false, &chunks)) EXPECT_TRUE(s.ok()) << s;
  // "w" (4 and 4 chunks), "rep" (1 chunk of 1,200 bytes), "blob" (1).
  EXPECT_EQ(chunks, (std::vector<uint64_t>{6, 6}));
  for (const Status& s : LoadOn(4, 1, true)) EXPECT_TRUE(s.ok()) << s;
  for (int r = 1; r < 4; ++r) EXPECT_FALSE(fs::exists(PathOf(r)));
}

TEST_F(RemoteStoreTest, AFileDamagedOnTheWayFailsTheSaveOnEveryRankAndCommitsNothing) {
  std::vector<Status> st = SaveOn(3, 1, /*flip_on_rank1=*/true);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(st[r].code(), StatusCode::kDataLoss) << "rank " << r << ": " << st[r];
    EXPECT_EQ(st[r], st[0]);
    EXPECT_NE(st[r].ToString().find("arrived damaged"), std::string::npos) << st[r];
  }
  ASSERT_EQ(st[0].rank_failures().size(), 1u);
  EXPECT_EQ(st[0].rank_failures().begin()->first, 1);
  EXPECT_EQ(Steps(), 0u);
  EXPECT_TRUE(!fs::exists(store_ + "/staging") || fs::is_empty(store_ + "/staging"));
  EXPECT_TRUE(!fs::exists(LocalStaging(1)) || fs::is_empty(LocalStaging(1)));
  // The next save goes through.
  for (const Status& s : SaveOn(3, 1)) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(Steps(), 1u);
}

TEST_F(RemoteStoreTest, RanksThatDisagreeOnWhereTheStoreIsFailAlike) {
  sees_store_ = 2;
  std::vector<Status> st = SaveOn(3, 1, false, [&](int rank, StoreOptions* o) {
    if (rank == 2) o->access = StoreAccess::kShared;
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(st[r].code(), StatusCode::kInvalidArgument) << "rank " << r << ": " << st[r];
    EXPECT_EQ(st[r], st[0]);
  }
  EXPECT_NE(st[0].message().find("rank(s) 2 write into a store every rank sees, rank(s) 0, 1 send"),
            std::string::npos)
      << st[0];
  EXPECT_EQ(Steps(), 0u);
}

TEST_F(RemoteStoreTest, LoadErrorsOnTheCoordinatorsHostReachEveryRank) {
  // No store yet: every rank fails alike, naming the coordinator's error.
  std::vector<Status> st = LoadOn(3, 1, false);
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(st[r].IsCheckpointError()) << st[r];
    EXPECT_EQ(st[r], st[0]);
    EXPECT_NE(st[r].ToString().find("no store at"), std::string::npos) << st[r];
  }
  for (const Status& s : SaveOn(3, 1)) ASSERT_TRUE(s.ok()) << s;
  // A step that is not there.
  st = LoadOn(2, 9, false);
  for (const Status& s : st) EXPECT_NE(s.ToString().find("step 9 not found"), std::string::npos) << s;
  // A damaged chunk that every rank reads (the bytes entry): DataLoss on
  // the coordinator, read locally, and on the other rank, served by it.
  ASSERT_TRUE(testing::FlipByteOf(store_ + "/db", ".sst", "saved by the coordinator"));
  st = LoadOn(2, 1, false);
  for (const Status& s : st) {
    ASSERT_TRUE(s.IsCheckpointError()) << s;
    ASSERT_EQ(s.rank_failures().size(), 2u) << s;
    for (const auto& [r, f] : s.rank_failures()) EXPECT_EQ(f.code(), StatusCode::kDataLoss) << r << ": " << f;
  }
}

// Through the coordinator, a rank receives the pieces of the regions it
// loads, not the whole step's: of a step 32 ranks saved by rows, a rank
// loading its own rows gets its one piece of "w" (pieces_partial) and all
// of "rep" and "blob", in under a quarter of the bytes the whole metadata
// takes it; loads in the same sharding and in another one read every byte
// right.
TEST_F(RemoteStoreTest, ARankReceivesOnlyThePiecesOfTheRegionsItLoads) {
  constexpr int kWorld = 32;
  for (const Status& s : SaveOn(kWorld, 1)) ASSERT_TRUE(s.ok()) << s;
  std::vector<Status> st(kWorld);
  std::vector<size_t> w_pieces(kWorld), rep_pieces(kWorld);
  std::vector<bool> partial(kWorld);
  std::vector<uint64_t> for_bytes(kWorld), whole_bytes(kWorld);
  std::mutex mu;
  testing::RunRanksAsThreads(kWorld, [&](int rank, Communicator& comm) {
    auto r = OpenRemoteStoreReader(PathOf(rank), &comm, 0);
    ASSERT_TRUE(r.ok()) << r.status();
    const int64_t rows = kRows / kWorld;
    const CollectiveStats s0 = comm.stats();
    auto md = (*r)->ReadMetadataFor(1, {"w", "rep", "blob"}, {EntryRegion{"w", {rank * rows, 0}, {rows, 64}}});
    const CollectiveStats s1 = comm.stats();
    auto whole = (*r)->ReadMetadata(1);
    const CollectiveStats s2 = comm.stats();
    std::lock_guard<std::mutex> lock(mu);
    st[rank] = !md.ok() ? md.status() : whole.status();
    if (!md.ok()) return;
    w_pieces[rank] = md->Find("w")->pieces.size();
    partial[rank] = md->Find("w")->pieces_partial;
    rep_pieces[rank] = md->Find("rep")->pieces_partial ? 0 : md->Find("rep")->pieces.size();
    for_bytes[rank] = s1.bytes_received - s0.bytes_received;
    whole_bytes[rank] = s2.bytes_received - s1.bytes_received;
  });
  for (int rank = 1; rank < kWorld; ++rank) {
    ASSERT_TRUE(st[rank].ok()) << rank << ": " << st[rank];
    EXPECT_EQ(w_pieces[rank], 1u) << rank;
    EXPECT_TRUE(partial[rank]) << rank;
    EXPECT_EQ(rep_pieces[rank], 1u) << rank;
    EXPECT_LT(for_bytes[rank] * 4, whole_bytes[rank]) << rank;
  }
  for (const Status& s : LoadOn(kWorld, 1, /*by_columns=*/false)) ASSERT_TRUE(s.ok()) << s;
  for (const Status& s : LoadOn(4, 1, /*by_columns=*/true)) ASSERT_TRUE(s.ok()) << s;
}

// 64 chunks of 4 KiB per rank: a rank's chunks travel many at once.
StateDict ManyChunks(int rank, int world, bool zeros) {
  constexpr int64_t kRankRows = 1024;
  Tensor part = testing::PatternTensor(DType::kF32, {kRankRows, 64}, 100 + rank);
  if (zeros) part = testing::ZerosLike(part);
  StateDict sd;
  (void)sd.Add(
      "m", ShardedTensor::Create(DType::kF32, {kRankRows * world, 64}, {Shard{{rank * kRankRows, 0}, part}}).value());
  return sd;
}

TEST_F(RemoteStoreTest, AChunkDamagedOnTheWayFailsTheRankThatNeedsItAndEveryRankAlike) {
  constexpr int kWorld = 3;
  std::mutex mu;
  testing::RunRanksAsThreads(kWorld, [&](int rank, Communicator& comm) {
    // The save, then a load whose 21st value the coordinator sends arrives
    // damaged, then the same load again.
    auto w = OpenStoreWriter(PathOf(rank), Options(rank));
    SaveOptions so;
    so.step = 1;
    so.communicator = &comm;
    Status saved = w.ok() ? Save(ManyChunks(rank, kWorld, false), **w, so) : w.status();
    ASSERT_TRUE(saved.ok()) << saved;
    std::vector<Status> loads;
    for (bool flip : {true, false}) {
      FlippingCommunicator flipping(comm, /*skip=*/20);
      Communicator* c = flip && rank == 0 ? static_cast<Communicator*>(&flipping) : &comm;
      auto r = OpenRemoteStoreReader(PathOf(rank), c, 0);
      StateDict target = ManyChunks(rank, kWorld, true);
      LoadOptions lo;
      lo.step = 1;
      lo.communicator = c;
      LoadStats stats;
      Status st = r.ok() ? Load(target, **r, lo, &stats) : r.status();
      if (st.ok()) {
        EXPECT_TRUE(testing::SameContents(ManyChunks(rank, kWorld, false), target)) << "rank " << rank;
        EXPECT_EQ(stats.chunks_read, 64u);
      }
      loads.push_back(st);
    }
    std::lock_guard<std::mutex> lock(mu);
    // The damaged value went to one rank, which says which chunk of what it
    // was; every rank fails with the same error, naming only that rank.
    const Status& damaged = loads[0];
    ASSERT_TRUE(damaged.IsCheckpointError()) << "rank " << rank << ": " << damaged;
    ASSERT_EQ(damaged.rank_failures().size(), 1u) << damaged;
    const auto& [failed_rank, failure] = *damaged.rank_failures().begin();
    EXPECT_NE(failed_rank, 0);
    EXPECT_EQ(failure.code(), StatusCode::kDataLoss) << failure;
    EXPECT_NE(failure.message().find("entry 'm'"), std::string::npos) << failure;
    EXPECT_NE(failure.message().find("checksum"), std::string::npos) << failure;
    // The values still in flight were taken and dropped: the next load, on
    // the same communicators, goes through.
    EXPECT_TRUE(loads[1].ok()) << "rank " << rank << ": " << loads[1];
  });
}

TEST_F(RemoteStoreTest, TheCoordinatorServesOnlyChunksOfTheStepBeingLoaded) {
  for (const Status& s : SaveOn(2, 1)) ASSERT_TRUE(s.ok()) << s;
  for (const Status& s : SaveOn(2, 2)) ASSERT_TRUE(s.ok()) << s;
  // A chunk of step 2 that exists in the store.
  auto reader = OpenStoreReader(store_);
  ASSERT_TRUE(reader.ok());
  auto md2 = (*reader)->ReadMetadata(2);
  ASSERT_TRUE(md2.ok()) << md2.status();
  const StoredPiece& piece = md2->Find("w")->pieces.front();
  const DataKey other{2, md2->save_id, piece.key.rank, piece.key.item, 0};
  testing::RunRanksAsThreads(2, [&](int rank, Communicator& comm) {
    if (rank == 0) {
      // The coordinator loads step 1 (nothing for itself) and serves rank 1.
      auto r = OpenRemoteStoreReader(PathOf(0), &comm, 0);
      ASSERT_TRUE(r.ok());
      auto md = (*r)->ReadMetadata(1);
      ASSERT_TRUE(md.ok()) << md.status();
      EXPECT_TRUE((*r)->Read(*md, {}).ok());
      return;
    }
    // Rank 1, out of step: it asks for step 2's chunk while step 1 loads.
    std::string metadata;
    ASSERT_TRUE(comm.Broadcast(&metadata, 0).ok());
    std::string request;
    const std::string k = EncodeDataKey(other);
    AppendLE64(&request, k.size());
    request += k;
    ASSERT_TRUE(SendFrame(comm, 0, FrameKind::kRequest, request).ok());
    ASSERT_TRUE(SendFrame(comm, 0, FrameKind::kDone, {}).ok());
    FrameKind kind;
    std::string payload;
    ASSERT_TRUE(RecvFrame(comm, 0, &kind, &payload).ok());
    ASSERT_EQ(kind, FrameKind::kError) << "the coordinator served a chunk of another step";
    Status refused = DecodeErrorFrame(payload);
    EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused;
    EXPECT_NE(refused.message().find("a chunk that step 1 does not hold (step 2"), std::string::npos) << refused;
  });
}

TEST_F(RemoteStoreTest, FramesRefuseAStreamOutOfStep) {
  testing::RunRanksAsThreads(2, [&](int rank, Communicator& comm) {
    if (rank == 0) {
      const char junk[16] = "not a frame....";
      ASSERT_TRUE(comm.Send(1, junk, sizeof junk).ok());
    } else {
      FrameKind kind;
      std::string payload;
      Status st = RecvFrame(comm, 0, &kind, &payload);
      EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
    }
  });
}

}  // namespace
}  // namespace ckptdb
