#include "bucket/checksum_probe.h"

#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <utility>

#include "util/crc32c.h"
#include "util/status_macros.h"

namespace ckptdb {
namespace bucket {

namespace {

// A refusal of the request (HTTP 400: BadDigest, InvalidRequest, ...), as
// against a failure to reach the server.
bool Refused(const Status& s) { return s.code() == StatusCode::kInvalidArgument; }

// The probe's multipart part: *answered tells whether it reached a verdict.
StatusOr<bool> ProbeMultipart(s3::S3Client* crc, const std::string& bucket, const std::string& key) {
  StatusOr<std::string> upload = crc->CreateMultipartUpload(bucket, key);
  if (!upload.ok()) return Refused(upload.status()) ? StatusOr<bool>(false) : StatusOr<bool>(upload.status());
  auto answer = [&]() -> StatusOr<bool> {
    const std::string body = "ckptdb checksum probe part";
    StatusOr<s3::CompletedPart> wrong =
        crc->UploadPartWithCrc32c(bucket, key, *upload, 1, body, Crc32cBase64("not the part"));
    if (wrong.ok()) return false;
    if (!Refused(wrong.status())) return wrong.status();
    StatusOr<s3::CompletedPart> right = crc->UploadPart(bucket, key, *upload, 1, body);
    if (!right.ok()) return Refused(right.status()) ? StatusOr<bool>(false) : StatusOr<bool>(right.status());
    StatusOr<std::string> done = crc->CompleteMultipartUpload(bucket, key, *upload, {*right});
    if (!done.ok()) return Refused(done.status()) ? StatusOr<bool>(false) : StatusOr<bool>(done.status());
    return true;
  }();
  if (!answer.ok() || !*answer) (void)crc->AbortMultipartUpload(bucket, key, *upload);
  return answer;
}

}  // namespace

StatusOr<bool> ProbeCrc32cChecks(s3::S3Client* client, const std::string& bucket, const std::string& prefix) {
  s3::S3ClientOptions o = client->options();
  o.sign_payload = false;
  ASSIGN_OR_RETURN(std::unique_ptr<s3::S3Client> crc, s3::S3Client::Create(client->settings(), o));
  crc->set_crc32c_payloads(true);
  std::random_device rd;
  char id[17];
  std::snprintf(id, sizeof(id), "%016" PRIx64, (static_cast<uint64_t>(rd()) << 32) ^ rd());
  const std::string key = prefix + "probe/" + id;
  auto answer = [&]() -> StatusOr<bool> {
    StatusOr<std::string> right = crc->PutObject(bucket, key, "ckptdb checksum probe 1");
    if (!right.ok()) return Refused(right.status()) ? StatusOr<bool>(false) : StatusOr<bool>(right.status());
    StatusOr<std::string> wrong =
        crc->PutObjectWithCrc32c(bucket, key, "ckptdb checksum probe 2", Crc32cBase64("not the body"));
    if (wrong.ok()) return false;
    if (!Refused(wrong.status())) return wrong.status();
    return ProbeMultipart(crc.get(), bucket, key);
  }();
  (void)crc->DeleteObject(bucket, key);  // best effort: a leftover probe object is harmless
  return answer;
}

bool Crc32cVerdict(s3::S3Client* client, const std::string& bucket, const std::string& prefix) {
  if (!client->options().allow_crc32c_payloads) return false;
  static std::mutex mu;
  static std::map<std::pair<std::string, std::string>, bool> verdicts;
  const auto where = std::make_pair(client->settings().endpoint, bucket);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = verdicts.find(where);
    if (it != verdicts.end()) return it->second;
  }
  StatusOr<bool> checks = ProbeCrc32cChecks(client, bucket, prefix);
  if (!checks.ok()) return false;
  std::lock_guard<std::mutex> lock(mu);
  verdicts[where] = *checks;
  return *checks;
}

}  // namespace bucket
}  // namespace ckptdb
