#include "bucket/object_rewrite.h"

#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_writer.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <random>

#include "bucket/object_upload_env.h"
#include "bucket/sst_object_options.h"
#include "store/rocksdb_status.h"
#include "util/le_bytes.h"
#include "util/ordered_parallel.h"
#include "util/status_macros.h"

namespace ckptdb {
namespace bucket {
namespace {

// Whether `key` lies in one of `used` (sorted, disjoint [begin, end)).
bool InRanges(const std::vector<KeyRange>& used, const std::string& key) {
  auto it = std::upper_bound(used.begin(), used.end(), key,
                             [](const std::string& k, const KeyRange& r) { return k < r.first; });
  return it != used.begin() && key < std::prev(it)->second;
}

std::string BaseName(const std::string& key) {
  const size_t slash = key.rfind('/');
  return slash == std::string::npos ? key : key.substr(slash + 1);
}

// Writes the chunks `keys` of object `old` (read through `source`), in
// order, into folder + old's name; returns the new object.
StatusOr<SstObject> WriteUsedChunks(s3::S3Client* client, const std::string& bucket, const SstObjectSource& source,
                                    const SstObject& old, const std::vector<std::string>& keys,
                                    const std::string& folder, const RewriteOptions& options) {
  char root[64];
  std::snprintf(root, sizeof(root), "/ckptdb-rewrite-%016" PRIx64 "/",
                static_cast<uint64_t>(std::random_device{}()) << 32 | std::random_device{}());
  UploadLedger ledger;
  ObjectUploadOptions uo;
  uo.cleanup_client = options.cleanup_client;
  uo.parts_in_flight = 2;  // (objects_at_once of them upload at once)
  std::unique_ptr<rocksdb::Env> env =
      NewObjectUploadEnv(rocksdb::Env::Default(), client, bucket, folder, root, uo, &ledger);
  rocksdb::Options db_options = SstObjectWriteOptions();
  db_options.env = env.get();
  const std::string name = BaseName(old.key);
  const std::string path = std::string(root) + name;
  const std::string where = "s3://" + bucket + "/" + folder + name;
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), db_options);
  RETURN_IF_ERROR(FromRocks(writer.Open(path), "opening the rewritten object " + where));
  // Adjacent chunks by one ranged GET per run (SstObjectSource::PlanRuns),
  // runs fetched on `threads` threads and written in key order.
  std::vector<DataKey> parsed(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!ParseDataKey(keys[i], &parsed[i])) {
      return Status::DataLoss("object s3://" + bucket + "/" + old.key + " holds a key that is not a data key");
    }
  }
  const int threads = std::max(1, std::min<int>(options.threads, static_cast<int>(keys.size())));
  ASSIGN_OR_RETURN(std::unique_ptr<ChunkRuns> runs, source.PlanRuns(parsed, threads));
  const std::vector<std::vector<size_t>>& groups = runs->runs();
  std::map<size_t, std::string> ready;  // fetched values not yet written, by key index
  size_t next = 0;                      // the next key to write
  Status written = RunOrdered(
      groups.size(), threads, static_cast<size_t>(threads) * 2,
      [&](size_t r, std::string* values) -> Status {
        values->clear();
        for (size_t i : groups[r]) {
          rocksdb::PinnableSlice got;
          RETURN_IF_ERROR(runs->Get(parsed[i], &got));
          AppendLE64(values, i);
          AppendLEString(values, std::string_view(got.data(), got.size()));
        }
        runs->Done(r);
        return Status::OK();
      },
      [&](size_t, std::string& values) -> Status {
        LECursor c(values);
        while (!c.empty()) {
          uint64_t i = 0;
          std::string value;
          if (!c.U64(&i) || !c.String(&value)) return Status::Internal("a rewrite's fetched values are malformed");
          ready.emplace(static_cast<size_t>(i), std::move(value));
        }
        for (auto it = ready.find(next); it != ready.end(); it = ready.find(++next)) {
          RETURN_IF_ERROR(FromRocks(writer.Put(keys[next], it->second), "writing the rewritten object " + where));
          ready.erase(it);
        }
        return Status::OK();
      });
  if (written.ok() && next != keys.size()) written = Status::Internal("a rewrite's runs missed a chunk");
  rocksdb::ExternalSstFileInfo info;
  if (written.ok()) written = FromRocks(writer.Finish(&info), "finishing the rewritten object " + where);
  if (!written.ok() && !ledger.first_error().ok()) written = ledger.first_error();
  if (!written.ok()) return written;
  SstObject out;
  out.key = folder + name;
  out.size = info.file_size;
  out.smallest_key = info.smallest_key;
  out.largest_key = info.largest_key;
  const auto uploaded = ledger.objects();
  auto it = uploaded.find(out.key);
  if (it == uploaded.end() || it->second != out.size) {
    return Status::DataLoss("the rewritten object " + where + " was not uploaded whole");
  }
  return out;
}

}  // namespace

StatusOr<SaveRewrite> RewriteSaveObjects(s3::S3Client* client, const std::string& bucket,
                                         const std::vector<SstObject>& objects, const std::vector<KeyRange>& used,
                                         const std::string& folder, const RewriteOptions& options) {
  std::unique_ptr<SstObjectSource> source = SstObjectSource::OpenLazily(client, bucket, objects);
  // What became of each object: decided, and rewritten, several at once (a
  // save of many ranks has an object or more per rank, and each costs round
  // trips: its tail, its runs, its upload), then added up in order.
  struct Outcome {
    enum Kind { kKept, kLeft, kUnknown, kDropped, kRewritten } kind = kKept;
    uint64_t unused = 0, kept_blocks = 0;
    SstObject rewritten;
  };
  std::vector<Outcome> outcomes(objects.size());
  std::vector<uint8_t> attempted(objects.size(), 0);  // a new object may be (partly) there
  const int at_once = std::max(1, std::min<int>(options.objects_at_once, static_cast<int>(objects.size())));
  Status failed = RunOrdered(
      objects.size(), at_once, static_cast<size_t>(at_once),
      [&](size_t i, std::string*) -> Status {
        const SstObject& o = objects[i];
        Outcome& out = outcomes[i];
        ASSIGN_OR_RETURN(std::optional<std::vector<SstObjectSource::KeyBlock>> blocks, source->KeyBlocksOf(i));
        if (!blocks.has_value()) {
          out.kind = Outcome::kUnknown;
          return Status::OK();
        }
        std::vector<std::string> keep;
        for (SstObjectSource::KeyBlock& b : *blocks) {
          if (InRanges(used, b.key)) {
            out.kept_blocks += b.block_bytes;
            keep.push_back(std::move(b.key));
          } else {
            out.unused += b.block_bytes;
          }
        }
        if (out.unused == 0) return Status::OK();
        if (!keep.empty() &&
            static_cast<double>(out.unused) < options.min_unused_fraction * static_cast<double>(o.size)) {
          out.kind = Outcome::kLeft;
          return Status::OK();
        }
        out.kind = keep.empty() ? Outcome::kDropped : Outcome::kRewritten;
        if (keep.empty() || options.dry_run) return Status::OK();
        attempted[i] = 1;
        ASSIGN_OR_RETURN(out.rewritten, WriteUsedChunks(client, bucket, *source, o, keep, folder, options));
        return Status::OK();
      },
      [](size_t, std::string&) { return Status::OK(); });
  if (!failed.ok()) {
    // What this call uploaded goes (an upload cut short may have left its
    // object too): best effort, gc deletes what is left.
    s3::S3Client* cleanup = options.cleanup_client != nullptr ? options.cleanup_client : client;
    for (size_t i = 0; i < objects.size(); ++i) {
      if (attempted[i] != 0) (void)cleanup->DeleteObject(bucket, folder + BaseName(objects[i].key));
    }
    return failed;
  }
  SaveRewrite out;
  for (size_t i = 0; i < objects.size(); ++i) {
    const SstObject& o = objects[i];
    Outcome& r = outcomes[i];
    switch (r.kind) {
      case Outcome::kKept:
        out.objects.push_back(o);
        break;
      case Outcome::kUnknown:
        ++out.files_unknown;
        out.objects.push_back(o);
        break;
      case Outcome::kLeft:
        ++out.files_left;
        out.unused_bytes_left += r.unused;
        out.objects.push_back(o);
        break;
      case Outcome::kDropped:
      case Outcome::kRewritten:
        out.changed = true;
        ++out.files_rewritten;
        out.bytes_before += o.size;
        if (r.kind == Outcome::kDropped) break;
        if (options.dry_run) {
          out.bytes_after += r.kept_blocks;
        } else {
          out.bytes_after += r.rewritten.size;
          out.objects.push_back(std::move(r.rewritten));
        }
        break;
    }
  }
  return out;
}

}  // namespace bucket
}  // namespace ckptdb
