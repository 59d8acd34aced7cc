#include "fault_injection_fs.h"

#include <unistd.h>

namespace ckptdb::testing {

namespace {

class WalFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  WalFile(std::unique_ptr<rocksdb::FSWritableFile>&& f, FaultInjectionFS* fs)
      : rocksdb::FSWritableFileOwnerWrapper(std::move(f)), fs_(fs) {}

  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = Inject();
    return s.ok() ? target()->Append(data, o, dbg) : s;
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           const rocksdb::DataVerificationInfo& v, rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = Inject();
    return s.ok() ? target()->Append(data, o, v, dbg) : s;
  }

 private:
  rocksdb::IOStatus Inject() {
    switch (fs_->wal_append.load()) {
      case FaultInjectionFS::Action::kNone: return rocksdb::IOStatus::OK();
      case FaultInjectionFS::Action::kFail: return rocksdb::IOStatus::IOError("injected WAL append failure");
      case FaultInjectionFS::Action::kCrash: _exit(FaultInjectionFS::kCrashExitCode);
    }
    return rocksdb::IOStatus::OK();
  }
  FaultInjectionFS* fs_;
};

// Every write of any file counts towards FaultInjectionFS::writes_before_crash.
class CountedFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  CountedFile(std::unique_ptr<rocksdb::FSWritableFile>&& f, FaultInjectionFS* fs)
      : rocksdb::FSWritableFileOwnerWrapper(std::move(f)), fs_(fs) {}
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* dbg) override {
    fs_->CountWrite();
    return target()->Append(data, o, dbg);
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           const rocksdb::DataVerificationInfo& v, rocksdb::IODebugContext* dbg) override {
    fs_->CountWrite();
    return target()->Append(data, o, v, dbg);
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    fs_->CountWrite();
    return target()->Sync(o, dbg);
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    fs_->CountWrite();
    return target()->Fsync(o, dbg);
  }
  rocksdb::IOStatus Close(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    fs_->CountWrite();
    return target()->Close(o, dbg);
  }

 private:
  FaultInjectionFS* fs_;
};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

rocksdb::IOStatus FaultInjectionFS::NewWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                                    rocksdb::IODebugContext* dbg) {
  rocksdb::IOStatus s = target()->NewWritableFile(fname, opts, result, dbg);
  if (s.ok() && EndsWith(fname, ".log")) result->reset(new WalFile(std::move(*result), this));
  if (s.ok()) result->reset(new CountedFile(std::move(*result), this));
  return s;
}

void FaultInjectionFS::CountWrite() {
  if (writes_before_crash.load() < 0) return;
  if (writes_before_crash.fetch_sub(1) == 0) _exit(kCrashExitCode);
}

rocksdb::IOStatus FaultInjectionFS::RenameFile(const std::string& s, const std::string& t,
                                               const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) {
  CountWrite();
  return target()->RenameFile(s, t, o, dbg);
}

rocksdb::IOStatus FaultInjectionFS::LinkFile(const std::string& s, const std::string& t,
                                             const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) {
  CountWrite();
  return target()->LinkFile(s, t, o, dbg);
}

rocksdb::IOStatus FaultInjectionFS::DeleteFile(const std::string& f, const rocksdb::IOOptions& o,
                                               rocksdb::IODebugContext* dbg) {
  CountWrite();
  return target()->DeleteFile(f, o, dbg);
}

std::unique_ptr<rocksdb::Env> FaultInjectionFS::MakeEnv(const std::shared_ptr<FaultInjectionFS>& fs) {
  return rocksdb::NewCompositeEnv(fs);
}

}  // namespace ckptdb::testing
