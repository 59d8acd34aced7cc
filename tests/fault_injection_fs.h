// A rocksdb::FileSystem wrapper that fails, or "crashes" the process at, a
// chosen operation: appends to the write-ahead log (where a step's metadata
// commit lands first). Used through OpenStoreWriterWithEnv.
#ifndef CKPTDB_TESTS_FAULT_INJECTION_FS_H_
#define CKPTDB_TESTS_FAULT_INJECTION_FS_H_

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <atomic>
#include <memory>

namespace ckptdb::testing {

class FaultInjectionFS : public rocksdb::FileSystemWrapper {
 public:
  enum class Action { kNone, kFail, kCrash };
  static constexpr int kCrashExitCode = 42;

  FaultInjectionFS() : rocksdb::FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "FaultInjectionFS"; }

  // What the next append to a WAL file does: nothing special, return an I/O
  // error, or end the process at once with kCrashExitCode (no destructors,
  // no flushes: like a power cut after everything before it was synced).
  std::atomic<Action> wal_append{Action::kNone};
  // When >= 0: the number of file writes (appends, syncs and closes of any
  // file written, renames, links and deletions) that still go through; the
  // next one ends the process as kCrash does. For crash tests that stop a
  // sequence of saves and deletes between any two of its writes.
  std::atomic<int64_t> writes_before_crash{-1};
  // Counts a write; crashes when writes_before_crash runs out.
  void CountWrite();

  rocksdb::IOStatus RenameFile(const std::string& s, const std::string& t, const rocksdb::IOOptions& o,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus LinkFile(const std::string& s, const std::string& t, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteFile(const std::string& f, const rocksdb::IOOptions& o,
                               rocksdb::IODebugContext* dbg) override;

  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override;

  // An Env whose file system is `fs` (which must outlive it).
  static std::unique_ptr<rocksdb::Env> MakeEnv(const std::shared_ptr<FaultInjectionFS>& fs);
};

}  // namespace ckptdb::testing

#endif  // CKPTDB_TESTS_FAULT_INJECTION_FS_H_
