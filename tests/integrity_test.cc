// What a store promises under damage (issue 11): a committed step comes back
// bit for bit or the store says clearly that it cannot; a damaged or missing
// write-ahead log is an error, never a shorter history; a sweep deletes only
// what it can prove failed; a store of a newer format is never touched.
#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <filesystem>
#include <mutex>
#include <memory>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sys/mount.h>
#include <fcntl.h>
#include <fstream>
#include <functional>

#include "ckptdb/ckptdb.h"
#include "format/keys.h"
#include "store/rocksdb_store_internal.h"
#include "store/store_dir.h"
#include "test_util.h"
#include "thread_communicator.h"

namespace fs = std::filesystem;

namespace ckptdb {
namespace {

using testing::TempDir;

StateDict StepState(int64_t step) {
  StateDict sd;
  EXPECT_TRUE(sd.Add("w", testing::PatternTensor(DType::kF32, {64, 33}, static_cast<uint32_t>(step))).ok());
  Bytes b;
  b.data = "step " + std::to_string(step);
  EXPECT_TRUE(sd.Add("meta", b).ok());
  return sd;
}

// Saves steps 0..n-1. With `leave_in_wal`, the writer never flushes, so the
// commits live only in the write-ahead log (as after a writer that died
// right after committing).
void SaveSteps(const std::string& store, int n, bool leave_in_wal) {
  StoreWriterSeams seams;
  seams.flush_after_writes = !leave_in_wal;
  auto w = OpenStoreWriterWithSeams(store, StoreOptions{}, seams);
  ASSERT_TRUE(w.ok()) << w.status();
  for (int64_t s = 0; s < n; ++s) ASSERT_OK(testing::SaveNoDist(StepState(s), **w, s));
}

std::vector<int64_t> ListedSteps(const std::string& store, Status* error) {
  auto r = OpenStoreReader(store);
  if (!r.ok()) {
    *error = r.status();
    return {};
  }
  auto steps = (*r)->ListSteps();
  if (!steps.ok()) {
    *error = steps.status();
    return {};
  }
  std::vector<int64_t> out;
  for (const StepInfo& i : *steps) out.push_back(i.step);
  return out;
}

// The write-ahead log files of a store that hold something.
std::vector<std::string> NonEmptyWals(const std::string& store) {
  std::vector<std::string> out;
  for (const std::string& f : testing::FilesWithSuffix(store + "/db", ".log")) {
    if (fs::file_size(f) > 0) out.push_back(f);
  }
  return out;
}

void ExpectEveryStepLoads(const std::string& store, int n) {
  auto r = OpenStoreReader(store);
  ASSERT_TRUE(r.ok()) << r.status();
  for (int64_t s = 0; s < n; ++s) {
    StateDict want = StepState(s);
    auto got = LoadWhole(**r, s);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(std::get<Tensor>(*got->Find("w")).BitwiseEquals(std::get<Tensor>(*want.Find("w")))) << "step " << s;
    EXPECT_EQ(std::get<Bytes>(*got->Find("meta")).data, "step " + std::to_string(s));
  }
}

TEST(Integrity, CommittedStepsLeaveTheWalAtOnce) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  SaveSteps(store, 3, /*leave_in_wal=*/false);
  // Every commit was flushed into a checksummed SST: the log holds nothing.
  EXPECT_EQ(NonEmptyWals(store), std::vector<std::string>{});
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->Tag(1, "best").ok());
  ASSERT_OK((*w)->DeleteStep(0));
  w->reset();
  EXPECT_EQ(NonEmptyWals(store), std::vector<std::string>{});
  Status error;
  EXPECT_EQ(ListedSteps(store, &error), (std::vector<int64_t>{1, 2})) << error;
}

// Three steps whose commits live only in the write-ahead log (a writer that
// died right after committing), then `damage` done to that log: every open,
// reader's and writer's, fails (with `code`, unless it is kOk) rather than
// showing a shorter history, and no data is swept.
void ExpectLogDamageRefused(const std::function<void(const std::string& wal)>& damage, StatusCode code) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  SaveSteps(store, 3, /*leave_in_wal=*/true);
  const uint64_t data_keys = testing::CountDataKeys(store);
  const std::vector<std::string> wals = NonEmptyWals(store);
  ASSERT_EQ(wals.size(), 1u);
  damage(wals[0]);
  Status error;
  std::vector<int64_t> listed = ListedSteps(store, &error);
  EXPECT_TRUE(listed.empty()) << "the store listed " << listed.size() << " steps from a damaged log";
  EXPECT_FALSE(error.ok());
  if (code != StatusCode::kOk) {
    EXPECT_EQ(error.code(), code) << error;
  }
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok()) << w.status();
  Status opened = (*w)->OpenDatabase();
  EXPECT_FALSE(opened.ok());
  if (code != StatusCode::kOk) {
    EXPECT_EQ(opened.code(), code) << opened;
  }
  EXPECT_EQ(testing::CountDataKeys(store), data_keys);
}

TEST(Integrity, ADamagedWalIsAnErrorNeverAShorterHistory) {
  ExpectLogDamageRefused(
      [](const std::string& wal) {
        // One flipped byte inside the record of the first commit.
        std::fstream f(wal, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(fs::file_size(wal) / 3));
        char c;
        f.read(&c, 1);
        f.seekp(static_cast<std::streamoff>(fs::file_size(wal) / 3));
        c = static_cast<char>(~c);
        f.write(&c, 1);
      },
      StatusCode::kDataLoss);
}

TEST(Integrity, AMissingWalIsAnErrorNeverAShorterHistory) {
  ExpectLogDamageRefused([](const std::string& wal) { fs::remove(wal); }, StatusCode::kOk);
}

TEST(Integrity, TheSweepKeepsDataItCannotProveFailed) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  SaveSteps(store, 3, /*leave_in_wal=*/false);
  const uint64_t data_keys = testing::CountDataKeys(store);
  {
    // Step 1's commit record is lost (as with a damaged log that RocksDB
    // did not notice): its data has no metadata and no pending record.
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), store + "/db", &raw).ok());
    rocksdb::WriteOptions wo;
    wo.sync = true;
    ASSERT_TRUE(raw->Delete(wo, MetadataKey(1)).ok());
    ASSERT_TRUE(raw->Delete(wo, SummaryKey(1)).ok());
    delete raw;
  }
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_OK((*w)->OpenDatabase());  // sweeps on open
  auto left = (*w)->FindLeftovers();
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(left->orphan_saves, 0u);
  EXPECT_EQ(left->unaccounted_saves, 1u);
  EXPECT_EQ(testing::CountDataKeys(store), data_keys);
  // A save that failed after ingestion is still swept (its pending record
  // names it).
  testing::FaultyWriter faulty(w->get());
  faulty.on_finish = [] { return Status::IOError("injected"); };
  EXPECT_FALSE(testing::SaveNoDist(StepState(7), faulty, 7).ok());
  EXPECT_EQ(testing::CountDataKeys(store), data_keys);
  w->reset();
  // gc says what it kept, and keeps it.
  testing::CommandResult gc = testing::RunCommand(std::string(CKPTDB_CLI) + " gc " + store + " 2>&1");
  EXPECT_EQ(gc.code, 0) << gc.out;
  EXPECT_NE(gc.out.find("kept 1 save(s) whose data has neither a commit nor a pending record"), std::string::npos)
      << gc.out;
  EXPECT_EQ(testing::CountDataKeys(store), data_keys);
}

void WriteMarker(const std::string& store, const std::string& text) {
  std::ofstream(store + "/CKPTDB", std::ios::trunc) << text;
}

std::string ReadMarker(const std::string& store) {
  std::ifstream in(store + "/CKPTDB");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(Integrity, AStoreOfANewerFormatIsNeverWrittenOrRead) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  SaveSteps(store, 2, false);
  WriteMarker(store, "ckptdb store\nformat 99\n");
  const uint64_t data_keys = testing::CountDataKeys(store);
  auto w = OpenStoreWriter(store);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(w.status().message().find("format 99, newer than this ckptdb's format 8"), std::string::npos)
      << w.status();
  auto r = OpenStoreReader(store);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("format 99"), std::string::npos) << r.status();
  testing::CommandResult rm = testing::RunCommand(std::string(CKPTDB_CLI) + " rm " + store + " 0 2>&1");
  EXPECT_NE(rm.code, 0) << rm.out;
  EXPECT_NE(rm.out.find("format 99"), std::string::npos) << rm.out;
  EXPECT_EQ(testing::CountDataKeys(store), data_keys);
  EXPECT_EQ(ReadMarker(store), "ckptdb store\nformat 99\n");
  // A damaged marker is named as such.
  WriteMarker(store, "garbage");
  r = OpenStoreReader(store);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status();
  EXPECT_NE(r.status().message().find("marker"), std::string::npos) << r.status();
}

TEST(Integrity, AFormatOneStoreIsReadAndUpgradedByItsWriter) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  SaveSteps(store, 2, false);
  WriteMarker(store, "ckptdb store\nformat 1\n");
  ExpectEveryStepLoads(store, 2);
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_OK(testing::SaveNoDist(StepState(2), **w, 2));
  EXPECT_EQ(ReadMarker(store), "ckptdb store\nformat 8\n");
  w->reset();
  ExpectEveryStepLoads(store, 3);
}

// Flips one byte of the internal key trailer (the 8 bytes after the user
// key: sequence number and type) of the first chunk of `step` in its SST.
void DamageKeyTrailer(const std::string& store, int64_t step) {
  auto r = OpenStoreReader(store);
  ASSERT_TRUE(r.ok()) << r.status();
  auto md = (*r)->ReadMetadata(step);
  ASSERT_TRUE(md.ok()) << md.status();
  r->reset();
  uint32_t first_item = UINT32_MAX;
  for (const EntryMetadata& e : md->entries) {
    for (const StoredPiece& p : e.pieces) first_item = std::min(first_item, p.key.item);
  }
  const std::string key = EncodeDataKey(DataKey{step, md->save_id, 0, first_item, 0});
  for (const std::string& f : testing::FilesWithSuffix(store + "/db", ".sst")) {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(io)), std::istreambuf_iterator<char>());
    const size_t pos = data.find(key);
    if (pos == std::string::npos) continue;
    io.clear();
    io.seekp(static_cast<std::streamoff>(pos + key.size() + 1));  // the low byte of the sequence number
    const char c = static_cast<char>(data[pos + key.size() + 1] ^ 0x5a);
    io.write(&c, 1);
    return;
  }
  FAIL() << "no SST holds the first chunk of step " << step;
}

TEST(Integrity, ADamagedKeyIsDataLossNeverAnAbort) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  SaveSteps(store, 2, false);
  DamageKeyTrailer(store, 0);
  {
    auto r = OpenStoreReader(store);
    ASSERT_TRUE(r.ok()) << r.status();
    auto got = LoadWhole(**r, 0);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), StatusCode::kDataLoss) << got.status();
  }
  ExpectEveryStepLoads(store, 0);
  {
    auto r = OpenStoreReader(store);
    ASSERT_TRUE(r.ok()) << r.status();
    auto got = LoadWhole(**r, 1);
    EXPECT_TRUE(got.ok()) << got.status();
  }
  for (const std::string& cmd : {"verify " + store, "cat " + store + " 0 w", "export " + store + " 0 --format safetensors " + dir.Sub("o.safetensors")}) {
    testing::CommandResult c = testing::RunCommand(std::string(CKPTDB_CLI) + " " + cmd + " 2>&1");
    EXPECT_EQ(c.code, 1) << cmd << ": " << c.out;
    EXPECT_NE(c.out.find("DataLoss"), std::string::npos) << cmd << ": " << c.out;
  }
}

// Lowers this process's (and its children's) descriptor limit while alive.
class DescriptorLimit {
 public:
  explicit DescriptorLimit(rlim_t soft) {
    getrlimit(RLIMIT_NOFILE, &saved_);
    rlimit lowered = saved_;
    lowered.rlim_cur = soft;
    setrlimit(RLIMIT_NOFILE, &lowered);
  }
  ~DescriptorLimit() { setrlimit(RLIMIT_NOFILE, &saved_); }

 private:
  rlimit saved_{};
};

// Every step adds one SST file per rank: 1,000 steps of 8 ranks are 8,000
// files, and neither the writer, nor a reader beside it in the same process,
// nor the ckptdb command may need a descriptor per file.
TEST(Integrity, ALongHistoryOfManyRanksStaysWithinADescriptorLimit) {
  const std::string base = fs::is_directory("/dev/shm") ? "/dev/shm" : "";
  std::unique_ptr<TempDir> dir = base.empty() ? std::make_unique<TempDir>() : std::make_unique<TempDir>(base);
  const std::string store = dir->Sub("s");
  constexpr int kWorld = 8;
  constexpr int kSteps = 1000;
  DescriptorLimit limit(256);
  std::mutex mu;
  std::vector<Status> failures;
  testing::RunRanksAsThreads(kWorld, [&](int rank, Communicator& comm) {
    auto w = OpenStoreWriter(store);
    if (!w.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      failures.push_back(w.status());
      return;
    }
    for (int64_t step = 0; step < kSteps; ++step) {
      Tensor mine = Tensor::Zeros(DType::kI64, {4}).value();
      for (int64_t i = 0; i < 4; ++i) mine.data_as<int64_t>()[i] = step * 100 + rank * 4 + i;
      StateDict sd;
      (void)sd.Add("x", ShardedTensor::Create(DType::kI64, {kWorld * 4}, {Shard{{rank * 4}, mine}}).value());
      SaveOptions o;
      o.step = step;
      o.communicator = &comm;
      Status st = Save(sd, **w, o);
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(st.WithContext("step " + std::to_string(step) + " rank " + std::to_string(rank)));
        return;
      }
      if (rank == 0 && step % 250 == 249) {
        // A resuming job's reader, beside the writer.
        auto r = OpenStoreReader(store);
        auto got = r.ok() ? LoadWhole(**r, step) : r.status();
        std::lock_guard<std::mutex> lock(mu);
        if (!got.ok()) {
          failures.push_back(got.status().WithContext("loading step " + std::to_string(step)));
          return;
        }
        const Tensor& x = std::get<Tensor>(*got->Find("x"));
        for (int64_t i = 0; i < kWorld * 4; ++i) {
          if (x.data_as<int64_t>()[i] != step * 100 + i) {
            failures.push_back(Status::DataLoss("step " + std::to_string(step) + " element " + std::to_string(i)));
            return;
          }
        }
      }
    }
  });
  for (const Status& st : failures) ADD_FAILURE() << st;
  ASSERT_TRUE(failures.empty());
  const std::string cli = std::string(CKPTDB_CLI);
  testing::CommandResult ls = testing::RunCommand(cli + " ls " + store + " 2>&1 | tail -1");
  EXPECT_EQ(ls.code, 0) << ls.out;
  EXPECT_EQ(ls.out.rfind("999 ", 0), 0u) << ls.out;
  testing::CommandResult verify = testing::RunCommand(cli + " verify " + store + " 0 500 999 2>&1");
  EXPECT_EQ(verify.code, 0) << verify.out;
  testing::CommandResult rm = testing::RunCommand(cli + " rm " + store + " 0 1 2 2>&1");
  EXPECT_EQ(rm.code, 0) << rm.out;
  testing::CommandResult gc = testing::RunCommand(cli + " gc " + store + " --keep-last 10 2>&1");
  EXPECT_EQ(gc.code, 0) << gc.out;
  Status error;
  EXPECT_EQ(ListedSteps(store, &error).size(), 10u) << error;
}

// A small private tmpfs, unmounted (and its mount point removed) on
// destruction, even when the test fails.
class SmallDisk {
 public:
  explicit SmallDisk(const std::string& size) {
    char tmpl[] = "/tmp/ckptdb-disk-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return;
    path_ = tmpl;
    mounted_ = mount("ckptdb-test", path_.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
  }
  ~SmallDisk() {
    if (mounted_) umount2(path_.c_str(), MNT_DETACH);
    if (!path_.empty()) rmdir(path_.c_str());
  }
  bool mounted() const { return mounted_; }
  const std::string& path() const { return path_; }

  // Writes a file until the disk is full, to the last byte.
  void Fill(const std::string& name) {
    int fd = ::open((path_ + "/" + name).c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ASSERT_GE(fd, 0);
    std::string block(1 << 20, 'x');
    for (size_t size : {size_t{1} << 20, size_t{4096}, size_t{1}}) {
      while (::write(fd, block.data(), size) == static_cast<ssize_t>(size)) {
      }
    }
    ::close(fd);
  }

 private:
  std::string path_;
  bool mounted_ = false;
};

TEST(Integrity, AFullDiskNeverAbortsAndRmAndGcFreeSpace) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  SmallDisk disk("96m");
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here";
  const std::string store = disk.path() + "/s";
  {
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok()) << w.status();
    for (int64_t s = 0; s < 5; ++s) {
      StateDict sd;
      ASSERT_OK(sd.Add("w", testing::PatternTensor(DType::kF32, {1024, 1024}, static_cast<uint32_t>(s))));
      ASSERT_OK(testing::SaveNoDist(sd, **w, s));
    }
  }
  disk.Fill("filler");
  ASSERT_EQ(FreeBytes(disk.path()), 0u);
  const std::string cli = std::string(CKPTDB_CLI);
  testing::CommandResult rm = testing::RunCommand(cli + " rm " + store + " 0 2>&1");
  EXPECT_EQ(rm.code, 0) << rm.out;
  EXPECT_GT(FreeBytes(disk.path()), 4u << 20);
  // Full again, and the reserve is spent (it comes back once there is room
  // for it twice): a clear error, never an abort.
  disk.Fill("filler2");
  testing::CommandResult gc = testing::RunCommand(cli + " gc " + store + " --keep-last 2 2>&1");
  EXPECT_EQ(gc.code, 1) << gc.out;
  EXPECT_NE(gc.out.find("no space left for store"), std::string::npos) << gc.out;
  {
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok()) << w.status();
    StateDict sd;
    ASSERT_OK(sd.Add("w", testing::PatternTensor(DType::kF32, {1024, 1024}, 9)));
    Status st = testing::SaveNoDist(sd, **w, 9);
    EXPECT_EQ(st.code(), StatusCode::kIOError) << st;
  }
  // With room again, gc prunes and the reserve is back.
  fs::remove(disk.path() + "/filler");
  fs::remove(disk.path() + "/filler2");
  gc = testing::RunCommand(cli + " gc " + store + " --keep-last 2 2>&1");
  EXPECT_EQ(gc.code, 0) << gc.out;
  EXPECT_TRUE(fs::exists(ReservePath(store)));
  Status error;
  EXPECT_EQ(ListedSteps(store, &error), (std::vector<int64_t>{3, 4})) << error;
  auto r = OpenStoreReader(store);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(LoadWhole(**r, 4).ok());
}

// The marker of a format-1 store is rewritten only by a writer that holds
// the database: a writer that cannot open it (another process writes the
// store) leaves it as it was, for that process and its readers.
TEST(Integrity, AFormatOneMarkerIsUpgradedOnlyUnderTheLock) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto holder = OpenStoreWriter(store);
  ASSERT_TRUE(holder.ok()) << holder.status();
  ASSERT_OK((*holder)->OpenDatabase());
  WriteMarker(store, "ckptdb store\nformat 1\n");
  auto second = OpenStoreWriter(store);
  ASSERT_TRUE(second.ok()) << second.status();
  Status st = (*second)->OpenDatabase();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st;
  EXPECT_EQ(ReadMarker(store), "ckptdb store\nformat 1\n");
}

// A crash while a store was being created can leave only the marker's
// temporary file: the directory is still a place to create a store in.
TEST(Integrity, ADirectoryHoldingOnlyTheMarkersTemporaryIsEmpty) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  fs::create_directories(store);
  std::ofstream(store + "/CKPTDB.tmp") << "ckptdb st";
  SaveSteps(store, 1, false);
  ExpectEveryStepLoads(store, 1);
}

// A sweep while a save of the same writer is in flight (AsyncSaver beside a
// `Sweep` call) leaves that save alone.
TEST(Integrity, ASweepDuringASaveLeavesTheSaveAlone) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  auto w = OpenStoreWriter(store);
  ASSERT_TRUE(w.ok()) << w.status();
  testing::FaultyWriter faulty(w->get());
  Status swept;
  faulty.on_finish = [&] {
    auto s = (*w)->Sweep();
    swept = s.status();
    return Status::OK();
  };
  ASSERT_OK(testing::SaveNoDist(StepState(0), faulty, 0));
  EXPECT_OK(swept);
  ExpectEveryStepLoads(store, 1);
}

// A writer killed right after its commit landed (before the commit was
// flushed): the step is there on the next open, with every earlier one,
// and the WAL checks (tracked in the MANIFEST) do not mistake the crash for
// a lost log. Also after a crash between a save's pending record and its
// commit: the attempt is swept, the rest intact.
TEST(Integrity, AWriterKilledAroundItsCommitLosesNothingCommitted) {
  TempDir dir;
  const std::string store = dir.Sub("s");
  SaveSteps(store, 2, false);
  for (int round = 0; round < 3; ++round) {
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      StoreWriterSeams seams;
      seams.flush_after_writes = false;
      auto w = OpenStoreWriterWithSeams(store, StoreOptions{}, seams);
      if (!w.ok()) _exit(3);
      if (!testing::SaveNoDist(StepState(2 + round), **w, 2 + round).ok()) _exit(4);
      // A pending save that never commits: Prepare, then die.
      if (!(*w)->Prepare(100 + round).ok()) _exit(5);
      _exit(0);  // no Close, no flush
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    Status error;
    std::vector<int64_t> want;
    for (int64_t s = 0; s < 3 + round; ++s) want.push_back(s);
    EXPECT_EQ(ListedSteps(store, &error), want) << error;
    // The next writer replays the log, sweeps the pending attempt, saves on.
    auto w = OpenStoreWriter(store);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_OK((*w)->OpenDatabase());
    auto left = (*w)->FindLeftovers();
    ASSERT_TRUE(left.ok()) << left.status();
    EXPECT_EQ(left->orphan_saves, 0u);
  }
  ExpectEveryStepLoads(store, 5);
}

}  // namespace
}  // namespace ckptdb
