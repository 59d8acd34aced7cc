// Whether an S3 server checks x-amz-checksum-crc32c, so that a store may
// send its uploads' CRC-32C instead of signing their SHA-256
// (S3Client::set_crc32c_payloads): the SHA-256 was about a quarter of a
// bucket save's client CPU, the CRC costs a tenth of it. A server that
// ignores the header (older Ceph RGW, MinIO before 2022, ...) would store a
// body damaged on the way unnoticed, so there the SHA-256 stays.
//
// The probe, under PREFIX/probe/<random>, with a copy of the client that
// sends CRCs: a PUT with the body's CRC (must succeed), a PUT whose CRC is
// not its body's (must fail: HTTP 400), a multipart upload declaring
// CRC32C with a part whose CRC is wrong (must fail) and then right, and
// its completion (must succeed); the object is deleted, the upload aborted
// where it was left open. Seven requests, once per process, endpoint and
// bucket.
//
// Thread safety: Crc32cVerdict caches per endpoint and bucket, behind a lock.
#ifndef CKPTDB_SRC_BUCKET_CHECKSUM_PROBE_H_
#define CKPTDB_SRC_BUCKET_CHECKSUM_PROBE_H_

#include <string>

#include "ckptdb/status.h"
#include "s3/s3_client.h"

namespace ckptdb {
namespace bucket {

// Runs the probe: true when the server checked every CRC it was sent and
// took every right one; false when it ignored a wrong one or refused the
// header (HTTP 400 on a right one); the client's error (Unavailable, ...)
// when the probe could not run.
StatusOr<bool> ProbeCrc32cChecks(s3::S3Client* client, const std::string& bucket, const std::string& prefix);

// Whether `client` may send CRCs to this bucket: false without asking when
// the client's options forbid it (CKPTDB_S3_PAYLOAD_CHECKSUM=sha256), else
// the probe's answer, run once per process and remembered. A probe that
// could not run answers false and is not remembered (the next call probes
// again): the SHA-256 is never wrong, only slower.
bool Crc32cVerdict(s3::S3Client* client, const std::string& bucket, const std::string& prefix);

}  // namespace bucket
}  // namespace ckptdb

#endif  // CKPTDB_SRC_BUCKET_CHECKSUM_PROBE_H_
