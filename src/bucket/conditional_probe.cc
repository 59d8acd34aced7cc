#include "bucket/conditional_probe.h"

#include <cinttypes>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <utility>

#include "util/status_macros.h"

namespace ckptdb {
namespace bucket {

namespace {

std::string Refusal(s3::S3Client* client, const std::string& object, const std::string& header) {
  return "the S3 server at " + client->settings().endpoint + " ignores conditional writes: a PUT of " + object +
         " with " + header + " was accepted where it must fail (HTTP 412). ckptdb commits, deletes and tags "
         "with conditional writes of the store's index; on this server two writers could both win and a "
         "committed step could drop out of the history, so writing to this store is refused (reading works). "
         "Use a server that enforces If-None-Match and If-Match on PUT (AWS S3, MinIO, SeaweedFS, Ceph RGW 16+)";
}

// The probe; *answered tells whether it got as far as a verdict.
Status Probe(s3::S3Client* client, const std::string& bucket, const std::string& prefix, bool* answered) {
  *answered = false;
  std::random_device rd;
  char id[17];
  std::snprintf(id, sizeof(id), "%016" PRIx64, (static_cast<uint64_t>(rd()) << 32) ^ rd());
  const std::string key = prefix + "probe/" + id;
  const std::string object = "s3://" + bucket + "/" + key;
  // A missing bucket is an error of its own, and some servers (SeaweedFS)
  // would make one for the probe's PUT.
  RETURN_IF_ERROR(client->HeadBucket(bucket));
  RETURN_IF_ERROR(client->PutObject(bucket, key, "ckptdb conditional write probe 1").status());
  // Different bytes each time: a PUT the client retried after a lost answer
  // is read back and taken as its own success only when the bytes match.
  StatusOr<std::string> create = client->PutObject(bucket, key, "ckptdb conditional write probe 2",
                                                   /*if_none_match=*/true);
  Status verdict;
  *answered = true;
  if (create.ok()) {
    verdict = Status::FailedPrecondition(Refusal(client, object, "If-None-Match: * onto an existing object"));
  } else if (create.status().code() != StatusCode::kAlreadyExists) {
    verdict = create.status();
    *answered = false;
  } else {
    StatusOr<std::string> swap = client->PutObjectIfMatch(bucket, key, "ckptdb conditional write probe 3",
                                                          "\"00000000000000000000000000000000\"");
    if (swap.ok()) {
      verdict = Status::FailedPrecondition(Refusal(client, object, "If-Match naming an ETag it does not have"));
    } else if (swap.status().code() != StatusCode::kAborted) {
      verdict = swap.status();
      *answered = false;
    }
  }
  (void)client->DeleteObject(bucket, key);  // best effort: a leftover probe object is harmless
  return verdict;
}

}  // namespace

Status ProbeConditionalWrites(s3::S3Client* client, const std::string& bucket, const std::string& prefix) {
  bool answered = false;
  return Probe(client, bucket, prefix, &answered);
}

Status ConditionalWriteVerdict(s3::S3Client* client, const std::string& bucket, const std::string& prefix) {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::string>, Status> verdicts;
  const auto where = std::make_pair(client->settings().endpoint, bucket);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = verdicts.find(where);
    if (it != verdicts.end()) return it->second;
  }
  bool answered = false;
  Status st = Probe(client, bucket, prefix, &answered);
  if (answered) {
    std::lock_guard<std::mutex> lock(mu);
    verdicts[where] = st;
  }
  return st;
}

}  // namespace bucket
}  // namespace ckptdb
