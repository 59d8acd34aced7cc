// Helpers shared by the test suites: temporary stores, tensors with known
// contents, and a fault-injecting StorageWriter wrapper.
#ifndef CKPTDB_TESTS_TEST_UTIL_H_
#define CKPTDB_TESTS_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ckptdb/ckptdb.h"

namespace rocksdb {
class DB;
}

namespace ckptdb::testing {

#define ASSERT_OK(expr)                          \
  do {                                           \
    ::ckptdb::Status _s = (expr);                \
    ASSERT_TRUE(_s.ok()) << _s.ToString();       \
  } while (0)
#define EXPECT_OK(expr)                          \
  do {                                           \
    ::ckptdb::Status _s = (expr);                \
    EXPECT_TRUE(_s.ok()) << _s.ToString();       \
  } while (0)

// A fresh directory under $TMPDIR, removed with everything in it on
// destruction.
class TempDir {
 public:
  TempDir();
  // Under `base` instead (e.g. /dev/shm, a memory file system where many
  // fsyncs cost nothing).
  explicit TempDir(const std::string& base);
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A CPU tensor whose bytes are a deterministic function of (seed, index).
// Floating-point dtypes get finite values.
Tensor PatternTensor(DType dtype, Shape shape, uint32_t seed);

// Whole-tensor zeros of the same dtype and shape.
Tensor ZerosLike(const Tensor& t);

// Saves in this process alone.
Status SaveNoDist(const StateDict& sd, StorageWriter& writer, int64_t step);
Status LoadNoDist(StateDict& sd, StorageReader& reader, int64_t step, LoadStats* stats = nullptr);

// Every file under `dir` (recursively) whose name ends with `suffix`, sorted
// by path.
std::vector<std::string> FilesWithSuffix(const std::string& dir, const std::string& suffix);

// Replaces the first occurrence of `needle` in any file under `dir` ending
// in `suffix` by flipping the bits of its middle byte. Returns false when no
// file holds it.
bool FlipByteOf(const std::string& dir, const std::string& suffix, const std::string& needle);

// Whether every entry of `a` is in `b` with the same bytes (tensors, every
// local shard in order, bytes entries).
bool SameContents(const StateDict& a, const StateDict& b);

// The committed steps `r` lists, in order (a failure to list fails the
// test).
std::vector<int64_t> Steps(StoreReader& r);
// A reader of `store`, or null (and the test failed) when it cannot open.
std::unique_ptr<StoreReader> Reader(const std::string& store);

// Number of data keys ('D' prefix) in the store's database, read directly
// with RocksDB.
uint64_t CountDataKeys(const std::string& store);
// Every key of the store's database that starts with `prefix` (the pieces
// records: 'Q'), in key order, read directly with RocksDB.
std::vector<std::string> KeysWithPrefix(const std::string& store, char prefix);
// Calls f with the store's database opened with RocksDB directly (to damage
// or rewrite records); fails the test when it cannot open.
void WithRawDb(const std::string& store, const std::function<void(rocksdb::DB*)>& f);

// Runs a shell command line; returns its exit code (-1 when killed) and what
// it wrote to stdout (add "2>&1" to the line for stderr too).
struct CommandResult {
  int code;
  std::string out;
};
CommandResult RunCommand(const std::string& command_line);

// Starts args[0] with `args` and exactly the environment `env` ("NAME=value"
// each); returns its pid (the child exits 127 when it cannot exec).
pid_t SpawnProcess(const std::vector<std::string>& args, const std::vector<std::string>& env);

// A StorageWriter that forwards to another and can fail chosen calls.
class FaultyWriter : public StorageWriter {
 public:
  explicit FaultyWriter(StorageWriter* inner) : inner_(inner) {}
  // Each, when set, is called instead of (or before) the inner call; a
  // non-OK status is returned without calling the inner writer.
  std::function<Status()> on_prepare, on_prepare_storage, on_finish;
  std::function<Status(const std::vector<WriteItem>&)> on_write;
  // Called after the inner Write returned successfully, before its result is
  // passed on (e.g. to die with the rank's data already in staging).
  std::function<void()> after_write;
  // Called then too, with the result, which it may change (a writer whose
  // report is wrong).
  std::function<void(WriteResult*)> edit_result;
  // false: Abort is counted, not passed on (a coordinator that died cleans
  // nothing up).
  bool forward_abort = true;

  StatusOr<uint64_t> Prepare(int64_t step) override;
  StatusOr<std::vector<ReuseCandidate>> FindReusable(const SaveContext& ctx, const StepMetadata& planned) override {
    return inner_->FindReusable(ctx, planned);
  }
  FileDelivery delivery() const override { return inner_->delivery(); }
  StatusOr<std::string> ReceivedFilePath(const SaveContext& ctx, int rank, const std::string& name) override {
    return inner_->ReceivedFilePath(ctx, rank, name);
  }
  void DiscardLocalFiles(const SaveContext& ctx) override { inner_->DiscardLocalFiles(ctx); }
  Status PrepareStorage(const SaveContext& ctx, const std::vector<WriteItem>& items) override;
  StatusOr<WriteResult> Write(const SaveContext& ctx, const std::vector<WriteItem>& items) override;
  Status Finish(const SaveContext& ctx, const StepMetadata& m, const std::vector<WriteResult>& r) override;
  void Abort(const SaveContext& ctx) override;
  int aborts = 0;

 private:
  StorageWriter* inner_;
};

// A StorageReader that forwards to another and can fail chosen calls. A
// failed ReadMetadata (Of, For) calls the inner reader first (a reader whose calls
// are collective, OpenSharedStoreReader's, needs every rank in them), then
// returns the injected failure.
class FaultyReader : public StorageReader {
 public:
  explicit FaultyReader(StorageReader* inner) : inner_(inner) {}
  std::function<Status()> on_read_metadata, on_read;

  StatusOr<StepMetadata> ReadMetadata(int64_t step) override;
  StatusOr<StepMetadata> ReadMetadataOf(int64_t step, const std::vector<std::string>& fqns) override;
  StatusOr<StepMetadata> ReadMetadataFor(int64_t step, const std::vector<std::string>& fqns,
                                         const std::vector<EntryRegion>& regions) override;
  StatusOr<ReadStats> Read(const StepMetadata& m, const std::vector<ReadItem>& items) override;

 private:
  StatusOr<StepMetadata> Injected(StatusOr<StepMetadata> md);
  StorageReader* inner_;
};

// A reader for a job's Load on this rank of `comm`: OpenSharedStoreReader
// (`shared`: only the coordinator opens the store), else a reader of this
// rank's own (OpenStoreReader).
StatusOr<std::unique_ptr<StorageReader>> OpenLoadReader(const std::string& path, Communicator& comm, bool shared);

}  // namespace ckptdb::testing

#endif  // CKPTDB_TESTS_TEST_UTIL_H_
