#include "store/unsynced_env.h"

#include <rocksdb/file_system.h>

namespace ckptdb {

namespace {

class UnsyncedFile final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  explicit UnsyncedFile(std::unique_ptr<rocksdb::FSWritableFile>&& f) : FSWritableFileOwnerWrapper(std::move(f)) {}
  rocksdb::IOStatus Sync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus RangeSync(uint64_t, uint64_t, const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }
};

class UnsyncedFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  explicit UnsyncedFileSystem(const std::shared_ptr<rocksdb::FileSystem>& base) : FileSystemWrapper(base) {}
  const char* Name() const override { return "CkptdbUnsyncedFileSystem"; }
  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    std::unique_ptr<rocksdb::FSWritableFile> inner;
    rocksdb::IOStatus s = target()->NewWritableFile(f, o, &inner, dbg);
    if (s.ok()) *r = std::make_unique<UnsyncedFile>(std::move(inner));
    return s;
  }
};

}  // namespace

std::unique_ptr<rocksdb::Env> NewUnsyncedEnv(rocksdb::Env* base) {
  if (base == nullptr) base = rocksdb::Env::Default();
  return rocksdb::NewCompositeEnv(std::make_shared<UnsyncedFileSystem>(base->GetFileSystem()));
}

}  // namespace ckptdb
