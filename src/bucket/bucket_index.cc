#include "bucket/bucket_index.h"

#include <chrono>
#include <random>
#include <set>
#include <thread>

#include "bucket/object_keys.h"
#include "format/chunk_codec.h"
#include "util/le_bytes.h"
#include "util/status_macros.h"

namespace ckptdb {
namespace bucket {
namespace {

constexpr char kIndexMagic[] = "ckptdb-bucket-index";  // 19 bytes, then the version byte
// 1: steps and tags; 2: and the rewritten saves (written only with some).
constexpr uint8_t kIndexVersion = 2;
// Writers racing for the index each retry this often before giving up.
constexpr int kMaxIndexAttempts = 50;

std::string Magic(uint8_t version) {
  std::string m(kIndexMagic, sizeof(kIndexMagic) - 1);
  m.push_back(static_cast<char>(version));
  return m;
}


}  // namespace

std::string IndexKey(const std::string& prefix) { return prefix + "index"; }

std::vector<SstObject> ObjectsNow(const BucketIndex& index, const std::string& prefix,
                                  std::vector<SstObject> recorded) {
  if (index.rewritten.empty()) return recorded;
  std::vector<SstObject> out;
  std::set<SaveRef> replaced;
  for (SstObject& o : recorded) {
    SaveRef save;
    auto it = SaveOfDataObject(prefix, o.key, &save) ? index.rewritten.find(save) : index.rewritten.end();
    if (it == index.rewritten.end()) {
      out.push_back(std::move(o));
    } else if (replaced.insert(save).second) {
      out.insert(out.end(), it->second.objects.begin(), it->second.objects.end());
    }
  }
  return out;
}

void ForgetUnusedRewrites(BucketIndex* index) {
  std::set<SaveRef> used;
  for (const auto& [step, s] : index->steps) used.insert(s.uses.begin(), s.uses.end());
  for (auto it = index->rewritten.begin(); it != index->rewritten.end();) {
    it = used.count(it->first) == 0 ? index->rewritten.erase(it) : std::next(it);
  }
}

std::string EncodeBucketIndex(const BucketIndex& index) {
  std::string raw = Magic(index.rewritten.empty() ? 1 : 2);
  AppendLE32(&raw, static_cast<uint32_t>(index.steps.size()));
  for (const auto& [step, s] : index.steps) {
    AppendLE64(&raw, static_cast<uint64_t>(step));
    AppendLEString(&raw, EncodeSummaryValue(s.summary));
    AppendLEString(&raw, EncodeReferencesValue(s.uses));
  }
  AppendLE32(&raw, static_cast<uint32_t>(index.tags.size()));
  for (const auto& [name, step] : index.tags) {
    AppendLEString(&raw, name);
    AppendLE64(&raw, static_cast<uint64_t>(step));
  }
  if (!index.rewritten.empty()) {
    AppendLE32(&raw, static_cast<uint32_t>(index.rewritten.size()));
    for (const auto& [save, r] : index.rewritten) {
      AppendLE64(&raw, static_cast<uint64_t>(save.step));
      AppendLE64(&raw, save.save_id);
      AppendLE64(&raw, r.rewrite_id);
      AppendLE32(&raw, static_cast<uint32_t>(r.objects.size()));
      for (const SstObject& o : r.objects) {
        AppendLEString(&raw, o.key);
        AppendLE64(&raw, o.size);
        AppendLEString(&raw, o.smallest_key);
        AppendLEString(&raw, o.largest_key);
      }
    }
  }
  std::string value;
  EncodeChunk(raw.data(), raw.size(), Compression::kAuto, 1, &value);
  return value;
}

StatusOr<BucketIndex> DecodeBucketIndex(std::string_view value) {
  ASSIGN_OR_RETURN(std::string raw, DecodeChunkToString(value));
  LECursor c(raw);
  const std::string_view magic(kIndexMagic, sizeof(kIndexMagic) - 1);
  std::string_view head;
  if (!c.Bytes(magic.size() + 1, &head) || head.substr(0, magic.size()) != magic) {
    return Status::DataLoss("not a bucket store index");
  }
  const uint8_t version = static_cast<uint8_t>(head.back());
  if (version < 1 || version > kIndexVersion) {
    return Status::DataLoss("the index is of version " + std::to_string(version) + "; this build reads versions 1 to " +
                            std::to_string(kIndexVersion) + " (a newer ckptdb wrote it)");
  }
  BucketIndex index;
  uint32_t n = 0;
  bool ok = c.U32(&n);
  for (uint32_t i = 0; ok && i < n; ++i) {
    uint64_t step = 0;
    std::string summary, uses;
    ok = c.U64(&step) && c.String(&summary) && c.String(&uses);
    if (!ok) break;
    IndexStep s;
    s.step = static_cast<int64_t>(step);
    StatusOr<StepSummary> sum = DecodeSummaryValue(summary);
    if (!sum.ok()) return Status::DataLoss("the summary of step " + std::to_string(step) + ": " + sum.status().message());
    s.summary = std::move(*sum);
    StatusOr<std::vector<SaveRef>> refs = DecodeReferencesValue(uses);
    if (!refs.ok()) return Status::DataLoss("the saves of step " + std::to_string(step) + ": " + refs.status().message());
    s.uses = std::move(*refs);
    ok = index.steps.emplace(s.step, std::move(s)).second;
  }
  ok = ok && c.U32(&n);
  for (uint32_t i = 0; ok && i < n; ++i) {
    std::string name;
    uint64_t step = 0;
    ok = c.String(&name) && c.U64(&step) && index.tags.emplace(name, static_cast<int64_t>(step)).second;
  }
  if (ok && version >= 2) {
    ok = c.U32(&n) && n > 0;
    for (uint32_t i = 0; ok && i < n; ++i) {
      uint64_t step = 0;
      SaveRef save;
      RewrittenSave r;
      uint32_t count = 0;
      ok = c.U64(&step) && c.U64(&save.save_id) && c.U64(&r.rewrite_id) && c.U32(&count);
      save.step = static_cast<int64_t>(step);
      for (uint32_t k = 0; ok && k < count; ++k) {
        SstObject o;
        ok = c.String(&o.key) && c.U64(&o.size) && c.String(&o.smallest_key) && c.String(&o.largest_key);
        r.objects.push_back(std::move(o));
      }
      ok = ok && index.rewritten.emplace(save, std::move(r)).second;
    }
  }
  if (!ok || !c.empty()) return Status::DataLoss("the index's layout is wrong (truncated, repeated or trailing entries)");
  return index;
}

StatusOr<IndexSnapshot> ReadIndex(s3::S3Client* client, const std::string& bucket, const std::string& prefix) {
  const std::string key = IndexKey(prefix);
  StatusOr<s3::S3Client::VersionedObject> got = client->GetObjectVersioned(bucket, key);
  IndexSnapshot snap;
  if (got.status().code() == StatusCode::kNotFound) {
    // A missing bucket is an error of its own, not an empty store.
    RETURN_IF_ERROR(client->HeadBucket(bucket));
    return snap;
  }
  if (!got.ok()) return got.status();
  StatusOr<BucketIndex> index = DecodeBucketIndex(got->data);
  if (!index.ok()) {
    return Status::DataLoss("the index of bucket store s3://" + bucket + "/" + prefix + " (" + key +
                            ") is damaged: " + index.status().message());
  }
  snap.index = std::move(*index);
  snap.exists = true;
  snap.etag = std::move(got->etag);
  return snap;
}

StatusOr<IndexSnapshot> UpdateIndex(s3::S3Client* client, const std::string& bucket, const std::string& prefix,
                                    const std::function<Status(BucketIndex*)>& change) {
  const std::string key = IndexKey(prefix);
  std::mt19937_64 rng(std::random_device{}());
  for (int attempt = 0;; ++attempt) {
    ASSIGN_OR_RETURN(IndexSnapshot snap, ReadIndex(client, bucket, prefix));
    RETURN_IF_ERROR(change(&snap.index));
    const std::string value = EncodeBucketIndex(snap.index);
    StatusOr<std::string> put = snap.exists ? client->PutObjectIfMatch(bucket, key, value, snap.etag)
                                            : client->PutObject(bucket, key, value, /*if_none_match=*/true);
    if (put.ok()) {
      snap.exists = true;
      snap.etag = *put;
      return snap;
    }
    const StatusCode code = put.status().code();
    const bool lost_race = code == StatusCode::kAborted || (!snap.exists && code == StatusCode::kAlreadyExists);
    if (!lost_race) return put.status();
    if (attempt + 1 >= kMaxIndexAttempts) {
      return Status::Unavailable("the index of bucket store s3://" + bucket + "/" + prefix + " kept changing under " +
                                 std::to_string(kMaxIndexAttempts) + " attempts to update it: " +
                                 put.status().message());
    }
    const int cap_ms = std::min(1000, 10 << std::min(attempt, 6));
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, cap_ms)(rng)));
  }
}

}  // namespace bucket
}  // namespace ckptdb
