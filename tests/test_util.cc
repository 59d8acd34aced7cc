#include "test_util.h"

#include <algorithm>
#include <thread>
#include <chrono>

#include <rocksdb/db.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace fs = std::filesystem;

namespace ckptdb::testing {

namespace {
std::string DefaultTempBase() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}
}  // namespace

TempDir::TempDir() : TempDir(DefaultTempBase()) {}

TempDir::TempDir(const std::string& base) {
  std::string tmpl = base + "/ckptdb-test-XXXXXX";
  char* p = mkdtemp(tmpl.data());
  if (p == nullptr) std::abort();
  path_ = p;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

Tensor PatternTensor(DType dtype, Shape shape, uint32_t seed) {
  Tensor t = Tensor::Zeros(dtype, std::move(shape)).value();
  uint8_t* p = static_cast<uint8_t*>(t.data());
  const size_t es = DTypeSize(dtype);
  uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (int64_t i = 0; i < t.numel(); ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    uint8_t* e = p + i * es;
    std::memcpy(e, &x, es);
    switch (dtype) {
      case DType::kBool: e[0] &= 1; break;
      case DType::kF64: e[7] &= 0x3f; break;   // keep the exponent small: finite
      case DType::kF32: e[3] &= 0x3f; break;
      case DType::kF16: case DType::kBF16: e[1] &= 0x3f; break;
      case DType::kF8E4M3: case DType::kF8E5M2: e[0] &= 0x3f; break;
      default: break;
    }
  }
  return t;
}

Tensor ZerosLike(const Tensor& t) { return Tensor::Zeros(t.dtype(), t.shape()).value(); }

Status SaveNoDist(const StateDict& sd, StorageWriter& writer, int64_t step) {
  SaveOptions o;
  o.step = step;
  o.no_dist = true;
  return Save(sd, writer, o);
}

Status LoadNoDist(StateDict& sd, StorageReader& reader, int64_t step, LoadStats* stats) {
  LoadOptions o;
  o.step = step;
  o.no_dist = true;
  return Load(sd, reader, o, stats);
}

std::vector<std::string> FilesWithSuffix(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    std::string p = e.path().string();
    if (e.is_regular_file() && p.size() >= suffix.size() && p.compare(p.size() - suffix.size(), suffix.size(), suffix) == 0) {
      out.push_back(p);
    }
  }
  std::sort(out.begin(), out.end());  // RocksDB numbers files in creation order
  return out;
}

bool FlipByteOf(const std::string& dir, const std::string& suffix, const std::string& needle) {
  for (const std::string& f : FilesWithSuffix(dir, suffix)) {
    std::string data;
    {
      std::ifstream in(f, std::ios::binary);
      data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    size_t pos = data.find(needle);
    if (pos == std::string::npos) continue;
    data[pos + needle.size() / 2] = static_cast<char>(~data[pos + needle.size() / 2]);
    std::ofstream out(f, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    return true;
  }
  return false;
}

bool SameContents(const StateDict& a, const StateDict& b) {
  for (const auto& [fqn, e] : a.entries()) {
    const Entry* o = b.Find(fqn);
    if (o == nullptr) return false;
    if (const Tensor* t = std::get_if<Tensor>(&e)) {
      if (!std::get<Tensor>(*o).BitwiseEquals(*t)) return false;
    } else if (const ShardedTensor* st = std::get_if<ShardedTensor>(&e)) {
      const auto& other = std::get<ShardedTensor>(*o).local_shards();
      for (size_t i = 0; i < st->local_shards().size(); ++i) {
        if (!other[i].tensor.BitwiseEquals(st->local_shards()[i].tensor)) return false;
      }
    } else if (std::get<Bytes>(e).data != std::get<Bytes>(*o).data) {
      return false;
    }
  }
  return true;
}

uint64_t CountDataKeys(const std::string& store) { return KeysWithPrefix(store, 'D').size(); }

void WithRawDb(const std::string& store, const std::function<void(rocksdb::DB*)>& f) {
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), store + "/db", &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  f(db.get());
}

std::vector<std::string> KeysWithPrefix(const std::string& store, char prefix) {
  rocksdb::DB* db = nullptr;
  rocksdb::Options o;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(o, store + "/db", &db);
  // A writer that is open meanwhile may be compacting (deleting files that
  // the MANIFEST read a moment earlier named): try again.
  for (int attempt = 0; !s.ok() && attempt < 50; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s = rocksdb::DB::OpenForReadOnly(o, store + "/db", &db);
  }
  if (!s.ok()) {
    ADD_FAILURE() << s.ToString();
    return {};
  }
  std::vector<std::string> out;
  const std::string p(1, prefix);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(p); it->Valid() && it->key().starts_with(p); it->Next()) out.push_back(it->key().ToString());
  it.reset();
  delete db;
  return out;
}

std::vector<int64_t> Steps(StoreReader& r) {
  std::vector<int64_t> out;
  auto steps = r.ListSteps();
  EXPECT_TRUE(steps.ok()) << steps.status();
  if (steps.ok()) {
    for (const StepInfo& s : *steps) out.push_back(s.step);
  }
  return out;
}

std::unique_ptr<StoreReader> Reader(const std::string& store) {
  auto r = OpenStoreReader(store);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(r).value() : nullptr;
}

pid_t SpawnProcess(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  std::vector<char*> argv, envp;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

CommandResult RunCommand(const std::string& command_line) {
  FILE* p = popen(command_line.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  return CommandResult{WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

StatusOr<uint64_t> FaultyWriter::Prepare(int64_t step) {
  if (on_prepare) {
    Status s = on_prepare();
    if (!s.ok()) return s;
  }
  return inner_->Prepare(step);
}

Status FaultyWriter::PrepareStorage(const SaveContext& ctx, const std::vector<WriteItem>& items) {
  if (on_prepare_storage) {
    Status s = on_prepare_storage();
    if (!s.ok()) return s;
  }
  return inner_->PrepareStorage(ctx, items);
}

StatusOr<WriteResult> FaultyWriter::Write(const SaveContext& ctx, const std::vector<WriteItem>& items) {
  if (on_write) {
    Status s = on_write(items);
    if (!s.ok()) return s;
  }
  StatusOr<WriteResult> r = inner_->Write(ctx, items);
  if (r.ok() && after_write) after_write();
  if (r.ok() && edit_result) edit_result(&r.value());
  return r;
}

Status FaultyWriter::Finish(const SaveContext& ctx, const StepMetadata& m, const std::vector<WriteResult>& r) {
  if (on_finish) {
    Status s = on_finish();
    if (!s.ok()) return s;
  }
  return inner_->Finish(ctx, m, r);
}

void FaultyWriter::Abort(const SaveContext& ctx) {
  ++aborts;
  if (forward_abort) inner_->Abort(ctx);
}

StatusOr<StepMetadata> FaultyReader::Injected(StatusOr<StepMetadata> md) {
  if (on_read_metadata) {
    Status s = on_read_metadata();
    if (!s.ok()) return s;
  }
  return md;
}

StatusOr<StepMetadata> FaultyReader::ReadMetadata(int64_t step) { return Injected(inner_->ReadMetadata(step)); }

StatusOr<StepMetadata> FaultyReader::ReadMetadataOf(int64_t step, const std::vector<std::string>& fqns) {
  return Injected(inner_->ReadMetadataOf(step, fqns));
}

StatusOr<StepMetadata> FaultyReader::ReadMetadataFor(int64_t step, const std::vector<std::string>& fqns,
                                                     const std::vector<EntryRegion>& regions) {
  return Injected(inner_->ReadMetadataFor(step, fqns, regions));
}

StatusOr<ReadStats> FaultyReader::Read(const StepMetadata& m, const std::vector<ReadItem>& items) {
  if (on_read) {
    Status s = on_read();
    if (!s.ok()) return s;
  }
  return inner_->Read(m, items);
}

StatusOr<std::unique_ptr<StorageReader>> OpenLoadReader(const std::string& path, Communicator& comm, bool shared) {
  if (shared) return OpenSharedStoreReader(path, &comm);
  StatusOr<std::unique_ptr<StoreReader>> own = OpenStoreReader(path);
  if (!own.ok()) return own.status();
  return std::unique_ptr<StorageReader>(std::move(own).value());
}

}  // namespace ckptdb::testing
