#include "bucket/bucket_index.h"

#include <chrono>
#include <random>
#include <thread>

#include "format/chunk_codec.h"
#include "util/le_bytes.h"
#include "util/status_macros.h"

namespace ckptdb {
namespace bucket {
namespace {

constexpr char kIndexMagic[] = "ckptdb-bucket-index";  // 19 bytes, then the version byte
constexpr uint8_t kIndexVersion = 1;
// Writers racing for the index each retry this often before giving up.
constexpr int kMaxIndexAttempts = 50;

std::string Magic() {
  std::string m(kIndexMagic, sizeof(kIndexMagic) - 1);
  m.push_back(static_cast<char>(kIndexVersion));
  return m;
}

}  // namespace

std::string IndexKey(const std::string& prefix) { return prefix + "index"; }

std::string EncodeBucketIndex(const BucketIndex& index) {
  std::string raw = Magic();
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
  std::string value;
  EncodeChunk(raw.data(), raw.size(), Compression::kAuto, 1, &value);
  return value;
}

StatusOr<BucketIndex> DecodeBucketIndex(std::string_view value) {
  ASSIGN_OR_RETURN(std::string raw, DecodeChunkToString(value));
  LECursor c(raw);
  const std::string magic = Magic();
  std::string_view head;
  if (!c.Bytes(magic.size(), &head) || head != magic) {
    return Status::DataLoss("not a bucket store index of version " + std::to_string(kIndexVersion));
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
