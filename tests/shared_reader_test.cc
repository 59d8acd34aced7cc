// Loads of a store every rank sees that open its database on the coordinator
// only (OpenSharedStoreReader), with ranks as threads. Every rank other than
// the coordinator is given a view of the store: a directory holding links to
// some of the store's table files and nothing else (no MANIFEST, no CURRENT,
// no marker), so that a rank that opened the database, or read a file it was
// not meant to, would fail.
#include <gtest/gtest.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_reader.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>

#include "ckptdb/ckptdb.h"
#include "format/keys.h"
#include "store/data_files.h"
#include "store/rocksdb_options.h"
#include "test_util.h"
#include "thread_communicator.h"

namespace ckptdb {
namespace {

namespace fs = std::filesystem;

// [256, 64] f32 tensors: a rank of 8 holds 32 rows (two 4 KiB chunks).
constexpr int64_t kRows = 256;

// Rank `rank`'s rows of "w" (the same at every step) and of "v" (changed at
// every step), zeros when `zeros`; by_columns: a column block of every row
// instead. `world` divides 64.
StateDict State(int rank, int world, int64_t step, bool zeros, bool by_columns = false) {
  StateDict sd;
  const int64_t rows = kRows, rank_rows = kRows / world;
  for (const char* name : {"w", "v"}) {
    const uint32_t seed = name[0] == 'w' ? 1 : static_cast<uint32_t>(10 + step);
    const Tensor g = testing::PatternTensor(DType::kF32, {rows, 64}, seed);
    const int64_t r0 = by_columns ? 0 : rank * rank_rows, nr = by_columns ? rows : rank_rows;
    const int64_t c0 = by_columns ? rank * (64 / world) : 0, nc = by_columns ? 64 / world : 64;
    Tensor part = Tensor::Zeros(DType::kF32, {nr, nc}).value();
    for (int64_t r = 0; r < nr && !zeros; ++r) {
      std::memcpy(static_cast<char*>(part.data()) + r * nc * 4,
                  static_cast<const char*>(g.data()) + ((r0 + r) * 64 + c0) * 4, nc * 4);
    }
    (void)sd.Add(name, ShardedTensor::Create(DType::kF32, {rows, 64}, {Shard{{r0, c0}, part}}).value());
  }
  return sd;
}

class SharedReaderTest : public ::testing::Test {
 protected:
  void SaveSteps(int world, int64_t steps) {
    for (int64_t step = 1; step <= steps; ++step) {
      testing::RunRanksAsThreads(world, [&](int rank, Communicator& comm) {
        StoreOptions so;
        so.chunk_bytes = 4096;
        so.threads = 1;
        auto w = OpenStoreWriter(store_, so);
        ASSERT_TRUE(w.ok()) << w.status();
        SaveOptions o;
        o.step = step;
        o.communicator = &comm;
        EXPECT_OK(Save(State(rank, world, step, false), **w, o));
      });
    }
  }

  // The saving ranks whose chunks each data file of the store holds.
  std::map<std::string, std::set<uint32_t>> FileRanks() const {
    std::map<std::string, std::set<uint32_t>> out;
    for (const std::string& path : testing::FilesWithSuffix(store_ + "/db", ".sst")) {
      rocksdb::SstFileReader reader{rocksdb::Options()};
      EXPECT_TRUE(reader.Open(path).ok()) << path;
      std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(rocksdb::ReadOptions()));
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        DataKey k;
        if (ParseDataKey(it->key().ToStringView(), &k)) out[path].insert(k.rank);
      }
    }
    return out;
  }

  // A view of the store for a rank: links to the data files holding chunks
  // of `ranks` (every one when empty) in VIEW/db, nothing else.
  std::string View(const std::string& name, const std::set<uint32_t>& ranks) const {
    const std::string view = dir_.Sub(name);
    fs::create_directories(view + "/db");
    for (const auto& [path, of] : FileRanks()) {
      bool wanted = ranks.empty();
      for (uint32_t r : of) wanted = wanted || ranks.count(r) > 0;
      if (wanted) fs::create_symlink(path, view + "/db/" + fs::path(path).filename().string());
    }
    return view;
  }

  // Loads `step` on `world` ranks, rank k (k > 0) through paths[k], checking
  // every byte; every rank's status, and the bytes each rank received.
  std::vector<Status> LoadOn(int world, int64_t step, const std::vector<std::string>& paths, bool by_columns,
                             std::vector<uint64_t>* received = nullptr) {
    std::vector<Status> st(world);
    if (received) received->assign(world, 0);
    std::mutex mu;
    testing::RunRanksAsThreads(world, [&](int rank, Communicator& comm) {
      ReaderOptions ro;
      ro.threads = 2;
      auto r = OpenSharedStoreReader(rank == 0 ? store_ : paths.at(rank), &comm, 0, ro);
      StateDict target = State(rank, world, step, true, by_columns);
      LoadOptions o;
      o.step = step;
      o.communicator = &comm;
      const uint64_t before = comm.stats().bytes_received;
      Status s = r.ok() ? Load(target, **r, o) : r.status();
      if (s.ok() && !testing::SameContents(State(rank, world, step, false, by_columns), target)) {
        s = Status::Internal("rank " + std::to_string(rank) + " loaded other values than were saved");
      }
      std::lock_guard<std::mutex> lock(mu);
      st[rank] = s;
      if (received) (*received)[rank] = comm.stats().bytes_received - before;
    });
    return st;
  }

  testing::TempDir dir_;
  std::string store_ = dir_.Sub("store");
};

TEST_F(SharedReaderTest, ARankReadsItsChunksFromItsOwnFilesWithoutOpeningTheDatabase) {
  constexpr int kWorld = 8;
  // Step 2 shares every chunk of "w" with step 1: a rank's chunks lie in
  // its file of step 1 and its file of step 2.
  SaveSteps(kWorld, 2);
  std::vector<std::string> own(kWorld);
  for (int rank = 1; rank < kWorld; ++rank) {
    own[rank] = View("own-" + std::to_string(rank), {static_cast<uint32_t>(rank)});
    ASSERT_EQ(testing::FilesWithSuffix(own[rank] + "/db", ".sst").size(), 2u) << rank;
  }
  for (const Status& s : LoadOn(kWorld, 2, own, false)) ASSERT_TRUE(s.ok()) << s;
  for (const Status& s : LoadOn(kWorld, 1, own, false)) ASSERT_TRUE(s.ok()) << s;
  // Another sharding (column blocks of every row) needs every rank's files.
  std::vector<std::string> all(4);
  for (int rank = 1; rank < 4; ++rank) all[rank] = View("all-" + std::to_string(rank), {});
  for (const Status& s : LoadOn(4, 2, all, true)) ASSERT_TRUE(s.ok()) << s;
}

TEST_F(SharedReaderTest, WhatARankReceivesDoesNotGrowWithTheWorld) {
  std::map<int, uint64_t> most;
  for (int world : {8, 32}) {
    SCOPED_TRACE(world);
    fs::remove_all(store_);
    SaveSteps(world, 2);
    std::vector<std::string> paths(world, store_);
    std::vector<uint64_t> received;
    for (const Status& s : LoadOn(world, 2, paths, false, &received)) ASSERT_TRUE(s.ok()) << s;
    for (int rank = 1; rank < world; ++rank) most[world] = std::max(most[world], received[rank]);
  }
  EXPECT_GT(most[8], 0u);
  EXPECT_LE(most[32], most[8] + most[8] / 5) << "bytes the busiest other rank received: " << most[8] << " at 8 ranks, "
                                             << most[32] << " at 32";
}

TEST_F(SharedReaderTest, AFileARankCannotReadFailsEveryRankAlikeNamingIt) {
  constexpr int kWorld = 4;
  SaveSteps(kWorld, 1);
  std::vector<std::string> own(kWorld);
  for (int rank = 1; rank < kWorld; ++rank) own[rank] = View("own-" + std::to_string(rank), {uint32_t(rank)});
  // Rank 2's file is gone from its host.
  const std::vector<std::string> gone = testing::FilesWithSuffix(own[2] + "/db", ".sst");
  ASSERT_EQ(gone.size(), 1u);
  fs::remove(gone[0]);
  std::vector<Status> st = LoadOn(kWorld, 1, own, false);
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_EQ(st[rank].code(), StatusCode::kIOError) << rank << ": " << st[rank];
    EXPECT_EQ(st[rank].ToString(), st[0].ToString()) << rank;
  }
  EXPECT_NE(st[0].ToString().find("rank 2"), std::string::npos) << st[0];
  EXPECT_NE(st[0].ToString().find(fs::path(gone[0]).filename().string()), std::string::npos) << st[0];
  EXPECT_NE(st[0].ToString().find("shares"), std::string::npos) << st[0];

  // A damaged block of rank 3's file (a copy in its view) is DataLoss.
  const std::vector<std::string> linked = testing::FilesWithSuffix(own[3] + "/db", ".sst");
  ASSERT_EQ(linked.size(), 1u);
  const std::string target = fs::read_symlink(linked[0]).string();
  fs::remove(linked[0]);
  fs::copy_file(target, linked[0]);
  fs::create_symlink(target, own[2] + "/db/" + fs::path(gone[0]).filename().string());
  std::fstream f(linked[0], std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(1000);  // inside the first data block (the first chunk: 4 KiB)
  char c = 0;
  f.read(&c, 1);
  c ^= 0x40;
  f.seekp(1000);
  f.write(&c, 1);
  f.close();
  st = LoadOn(kWorld, 1, own, false);
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_EQ(st[rank].code(), StatusCode::kDataLoss) << rank << ": " << st[rank];
    EXPECT_EQ(st[rank].ToString(), st[0].ToString()) << rank;
  }
  EXPECT_NE(st[0].ToString().find("rank 3"), std::string::npos) << st[0];
  // The store itself is whole.
  std::vector<std::string> paths(kWorld, store_);
  for (const Status& s : LoadOn(kWorld, 1, paths, false)) EXPECT_TRUE(s.ok()) << s;
}

// Every rank reading a whole entry (ReadMetadata, every piece) reads it
// from every rank's files.
TEST_F(SharedReaderTest, EveryRankReadsWholeEntriesFromTheFilesItIsNamed) {
  constexpr int kWorld = 4;
  SaveSteps(kWorld, 2);
  const std::string all = View("all", {});
  std::vector<Status> st(kWorld);
  std::mutex mu;
  testing::RunRanksAsThreads(kWorld, [&](int rank, Communicator& comm) {
    auto r = OpenSharedStoreReader(rank == 0 ? store_ : all, &comm, 0);
    StatusOr<StateDict> got = r.ok() ? LoadWhole(**r, 2, {"w", "v"}) : StatusOr<StateDict>(r.status());
    Status s = got.status();
    if (s.ok()) {
      StateDict want;
      for (const char* name : {"w", "v"}) {
        (void)want.Add(name, testing::PatternTensor(DType::kF32, {kRows, 64}, name[0] == 'w' ? 1 : 12));
      }
      if (!testing::SameContents(want, *got)) s = Status::Internal("other values than were saved");
    }
    std::lock_guard<std::mutex> lock(mu);
    st[rank] = s;
  });
  for (int rank = 0; rank < kWorld; ++rank) EXPECT_TRUE(st[rank].ok()) << rank << ": " << st[rank];
}

// RocksDB's own compactions may merge data files with the memtable's
// flushes (metadata, range deletions): a file that then holds data values
// and metadata records is still read.
TEST_F(SharedReaderTest, ChunksInAFileThatAlsoHoldsMetadataAreRead) {
  constexpr int kWorld = 4;
  SaveSteps(kWorld, 2);
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(DatabaseOptions(), store_ + "/db", &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    rocksdb::CompactRangeOptions co;
    co.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    ASSERT_TRUE(db->CompactRange(co, nullptr, nullptr).ok());
    std::vector<rocksdb::LiveFileMetaData> files;
    db->GetLiveFilesMetaData(&files);
    ASSERT_EQ(files.size(), 1u);
    EXPECT_EQ(files[0].smallestkey[0], kDataPrefix);
    EXPECT_NE(files[0].largestkey[0], kDataPrefix);
  }
  std::vector<std::string> paths(kWorld, View("one-file", {}));
  for (int64_t step : {1, 2}) {
    for (const Status& s : LoadOn(kWorld, step, paths, false)) EXPECT_TRUE(s.ok()) << s;
  }
}

// Data keys of (step, save, rank): narrow files hold data keys alone; a
// wide file runs from a data key past them all.
TEST(DataFileIndexTest, NamesTheFilesAPiecesChunksMayLieIn) {
  auto key = [](int64_t step, uint32_t rank, uint32_t item, uint32_t chunk) {
    return EncodeDataKey({step, 7, rank, item, chunk});
  };
  std::vector<DataFile> files;
  for (uint32_t rank = 0; rank < 4; ++rank) {
    files.push_back({std::to_string(10 + rank) + ".sst", key(1, rank, 0, 0), key(1, rank, 5, 3)});
    files.push_back({std::to_string(20 + rank) + ".sst", key(2, rank, 0, 0), key(2, rank, 5, 3)});
  }
  files.push_back({"30.sst", key(2, 2, 9, 0), MetadataKey(5)});  // wide: from step 2 rank 2 on
  files.push_back({"31.sst", MetadataKey(1), SummaryKey(5)});     // no data key at all
  const DataFileIndex index(files);
  ASSERT_EQ(index.files().size(), 9u);
  auto names = [&](const std::vector<size_t>& at) {
    std::vector<std::string> out;
    for (size_t i : at) out.push_back(index.files()[i].name);
    return out;
  };
  EXPECT_EQ(names(index.FilesHolding(key(1, 1, 2, 0))), std::vector<std::string>({"11.sst"}));
  EXPECT_EQ(names(index.FilesHolding(key(2, 3, 0, 0))), std::vector<std::string>({"23.sst", "30.sst"}));
  EXPECT_TRUE(index.FilesHolding(key(3, 0, 0, 0)).size() == 1u);  // the wide file alone
  EXPECT_TRUE(index.FilesHolding(key(0, 0, 0, 0)).empty());

  // A piece of step 2, rank 1, item 4, sharing chunks with step 1's rank 3.
  StoredPiece p;
  p.key.rank = 1;
  p.key.item = 4;
  p.num_chunks = 2;
  ChunkReference r;
  r.count = 1;
  r.step = 1;
  r.save_id = 7;
  r.key.rank = 3;
  r.key.item = 1;
  p.references.push_back(r);
  std::vector<size_t> at;
  index.AddFilesOf(2, 7, p, &at);
  std::vector<std::string> got = names(at);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, std::vector<std::string>({"13.sst", "21.sst"}));

  // What a rank receives names the files, each once; a name that is not a
  // table file of the directory is refused.
  std::string listed;
  AppendDataFiles(index, {0, 0, 8}, &listed);
  LECursor in(listed);
  std::vector<DataFile> back;
  ASSERT_TRUE(ConsumeDataFiles(&in, &back));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].name, "30.sst");
  for (const std::string bad : {"../CURRENT", "MANIFEST-000001", "1.sst/x", ".sst"}) {
    std::string out;
    AppendLE32(&out, 1);
    for (const std::string& f : {bad, key(1, 0, 0, 0), key(1, 0, 0, 1)}) AppendLEString(&out, f);
    LECursor c(out);
    EXPECT_FALSE(ConsumeDataFiles(&c, &back)) << bad;
  }
}

// A rank whose own checks fail before the metadata is read (here: a step
// that is not a step) still takes part in the reader's exchange with the
// coordinator: every rank fails alike at once, naming it.
TEST_F(SharedReaderTest, ARankThatAsksForNoStepFailsEveryRankAlikeNamingIt) {
  constexpr int kWorld = 4;
  SaveSteps(kWorld, 1);
  std::vector<Status> st(kWorld);
  std::mutex mu;
  const auto t0 = std::chrono::steady_clock::now();
  testing::RunRanksAsThreads(kWorld, [&](int rank, Communicator& comm) {
    auto r = OpenSharedStoreReader(store_, &comm, 0);
    StateDict target = State(rank, kWorld, 1, true);
    LoadOptions o;
    o.step = rank == 2 ? -1 : 1;
    o.communicator = &comm;
    Status s = r.ok() ? Load(target, **r, o) : r.status();
    std::lock_guard<std::mutex> lock(mu);
    st[rank] = s;
  });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30)) << "not within the job's timeout";
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_EQ(st[rank].code(), StatusCode::kInvalidArgument) << rank << ": " << st[rank];
    EXPECT_EQ(st[rank].ToString(), st[0].ToString()) << rank;
  }
  EXPECT_NE(st[0].ToString().find("failed ranks: 2)"), std::string::npos) << st[0];
}

TEST_F(SharedReaderTest, ABadCommunicatorOrCoordinatorIsRefused) {
  EXPECT_EQ(OpenSharedStoreReader(store_, nullptr).status().code(), StatusCode::kInvalidArgument);
  testing::RunRanksAsThreads(2, [&](int, Communicator& comm) {
    for (const std::string& path : {store_, std::string("s3://bucket/store")}) {
      auto r = OpenSharedStoreReader(path, &comm, 2);
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << path;
      EXPECT_NE(r.status().ToString().find("coordinator rank 2"), std::string::npos) << r.status();
    }
  });
}

}  // namespace
}  // namespace ckptdb
