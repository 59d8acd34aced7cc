// The RocksDB store's reader side: a read-only view that never blocks the
// writer, chunked range reads with verification, and the step listing.
#include <rocksdb/db.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "chunk_codec.h"
#include "ckptdb/checkpoint.h"
#include "ckptdb/rocksdb_store.h"
#include "keys.h"
#include "metadata_codec.h"
#include "rocksdb_options.h"
#include "rocksdb_status.h"
#include "status_macros.h"
#include "store_dir.h"

namespace ckptdb {

namespace {

// How many chunk keys one MultiGet asks for.
constexpr size_t kMultiGetBatch = 16;

class RocksDBStoreReader final : public StoreReader {
 public:
  explicit RocksDBStoreReader(std::string path) : path_(std::move(path)) {}
  ~RocksDBStoreReader() override {
    if (db_) db_->Close().PermitUncheckedError();
  }

  const std::string& path() const override { return path_; }

  Status Refresh() override {
    if (db_) {
      db_->Close().PermitUncheckedError();
      db_.reset();
    }
    // A writer may delete a WAL or SST file between our listing and opening
    // it; such races are transient, so try a few times.
    Status last;
    for (int attempt = 0; attempt < 5; ++attempt) {
      rocksdb::DB* db = nullptr;
      rocksdb::Options o = DatabaseOptions();
      o.create_if_missing = false;
      rocksdb::Status s = rocksdb::DB::OpenForReadOnly(o, DbDir(path_), &db);
      if (s.ok()) {
        db_.reset(db);
        return Status::OK();
      }
      last = FromRocks(s, "opening store '" + path_ + "' read-only");
      if (!s.IsIOError() && !s.IsCorruption() && !s.IsPathNotFound()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20 << attempt));
    }
    return last;
  }

  StatusOr<StepMetadata> ReadMetadata(int64_t step) override {
    RETURN_IF_ERROR(ValidateStep(step));
    std::string value;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), MetadataKey(step), &value);
    if (s.IsNotFound()) {
      std::string hint;
      auto latest = LatestStep();
      hint = latest.ok() ? " (latest step is " + std::to_string(*latest) + ")" : " (the store has no steps)";
      return Status::NotFound("step " + std::to_string(step) + " not found in store '" + path_ + "'" + hint);
    }
    RETURN_IF_ERROR(FromRocks(s, "reading the metadata of step " + std::to_string(step)));
    auto md = DecodeMetadataValue(value);
    if (!md.ok()) return md.status().WithContext("step " + std::to_string(step));
    if (md->step != step) {
      return Status::DataLoss("step " + std::to_string(step) + ": metadata records step " + std::to_string(md->step));
    }
    return md;
  }

  StatusOr<ReadStats> Read(const StepMetadata& md, const std::vector<ReadItem>& items) override {
    ReadStats stats;
    rocksdb::ReadOptions ro;
    ro.fill_cache = false;  // chunks are read once; don't evict the index
    ro.verify_checksums = false;  // each chunk carries its own checksum, verified below
    std::vector<std::string> keys;
    std::vector<uint32_t> chunk_ids;
    std::string scratch;
    for (const ReadItem& item : items) {
      const StoredPiece& p = item.piece;
      if (item.length == 0) continue;
      if (item.offset + item.length > p.nbytes || p.chunk_bytes == 0) {
        return Status::Internal("read of bytes [" + std::to_string(item.offset) + ", " +
                                std::to_string(item.offset + item.length) + ") of '" + item.fqn + "' is outside its " +
                                std::to_string(p.nbytes) + " bytes");
      }
      const uint32_t first = static_cast<uint32_t>(item.offset / p.chunk_bytes);
      const uint32_t last = static_cast<uint32_t>((item.offset + item.length - 1) / p.chunk_bytes);
      for (uint32_t c0 = first; c0 <= last; c0 += kMultiGetBatch) {
        const uint32_t c1 = std::min<uint32_t>(last, c0 + kMultiGetBatch - 1);
        keys.clear();
        chunk_ids.clear();
        for (uint32_t c = c0; c <= c1; ++c) {
          keys.push_back(EncodeDataKey(DataKey{md.step, md.save_id, p.key.rank, p.key.item, c}));
          chunk_ids.push_back(c);
        }
        std::vector<rocksdb::Slice> slices(keys.begin(), keys.end());
        std::vector<rocksdb::PinnableSlice> values(keys.size());
        std::vector<rocksdb::Status> statuses(keys.size());
        db_->MultiGet(ro, db_->DefaultColumnFamily(), keys.size(), slices.data(), values.data(), statuses.data());
        for (size_t i = 0; i < keys.size(); ++i) {
          const uint32_t c = chunk_ids[i];
          const std::string where = "entry '" + item.fqn + "' (step " + std::to_string(md.step) + ", rank " +
                                    std::to_string(p.key.rank) + " item " + std::to_string(p.key.item) + ") chunk " +
                                    std::to_string(c) + " of " + std::to_string(p.num_chunks);
          if (statuses[i].IsNotFound()) return Status::DataLoss(where + " is missing from the store");
          RETURN_IF_ERROR(FromRocks(statuses[i], "reading " + where));
          const uint64_t cbegin = uint64_t{c} * p.chunk_bytes;
          const uint64_t clen = std::min<uint64_t>(p.chunk_bytes, p.nbytes - cbegin);
          const uint64_t want_begin = std::max<uint64_t>(cbegin, item.offset);
          const uint64_t want_end = std::min<uint64_t>(cbegin + clen, item.offset + item.length);
          char* dest = static_cast<char*>(item.dest) + (want_begin - item.offset);
          Status st;
          if (want_begin == cbegin && want_end == cbegin + clen) {
            st = DecodeChunk(values[i].ToStringView(), clen, dest);
          } else {
            // A partial chunk: decode whole (the checksum covers it all), copy part.
            scratch.resize(clen);
            st = DecodeChunk(values[i].ToStringView(), clen, scratch.data());
            if (st.ok()) std::copy(scratch.data() + (want_begin - cbegin), scratch.data() + (want_end - cbegin), dest);
          }
          if (!st.ok()) return Status::DataLoss(where + ": " + st.message());
          stats.chunks_read++;
          stats.stored_bytes_read += values[i].size();
          stats.raw_bytes_read += clen;
        }
      }
    }
    return stats;
  }

  StatusOr<std::vector<StepInfo>> ListSteps() override {
    std::vector<StepInfo> out;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(std::string(1, kMetadataPrefix)); it->Valid(); it->Next()) {
      int64_t step;
      if (!ParseMetadataKey(it->key().ToStringView(), &step)) break;
      auto md = DecodeMetadataValue(it->value().ToStringView());
      if (!md.ok()) return md.status().WithContext("step " + std::to_string(step));
      StepInfo info;
      info.step = step;
      info.created_unix_ms = md->created_unix_ms;
      info.world_size = md->world_size;
      info.entries = md->entries.size();
      info.logical_bytes = md->logical_bytes();
      info.stored_bytes = md->stored_bytes();
      out.push_back(info);
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "listing steps of '" + path_ + "'"));
    return out;
  }

  StatusOr<int64_t> LatestStep() override {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    // Data keys ('D') sort before metadata keys ('M'): the last key before
    // 'N' is the highest step's metadata, if any.
    it->SeekForPrev(std::string(1, kMetadataPrefix + 1));
    int64_t step;
    if (it->Valid() && ParseMetadataKey(it->key().ToStringView(), &step)) return step;
    RETURN_IF_ERROR(FromRocks(it->status(), "finding the latest step"));
    return Status::NotFound("store '" + path_ + "' has no committed step");
  }

 private:
  const std::string path_;
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace

StatusOr<std::unique_ptr<StoreReader>> OpenStoreReader(const std::string& path) {
  ASSIGN_OR_RETURN(StorePathState state, InspectStorePath(path));
  if (state == StorePathState::kMissing) return Status::NotFound("no store at '" + path + "'");
  if (state == StorePathState::kEmptyDir) {
    return Status::FailedPrecondition("'" + path + "' is an empty directory, not a ckptdb store");
  }
  auto reader = std::make_unique<RocksDBStoreReader>(path);
  RETURN_IF_ERROR(reader->Refresh());
  return std::unique_ptr<StoreReader>(std::move(reader));
}

}  // namespace ckptdb
