// Whether an S3 server enforces the conditional writes a bucket store rests
// on. Every commit, delete and tag is one conditional write of the store's
// index (If-None-Match: * for the first, If-Match: ETAG after): on a server
// that ignores those headers, two writers of the index both "win" and a
// committed step can silently drop out of the history. AWS enforces them on
// PUT only since 2024, other S3-compatible servers not at all; so a store
// asks before its first write, and refuses to write where they are ignored
// (reading needs none of it).
//
// The probe, under PREFIX/probe/<random>, once the bucket is known to exist
// (HeadBucket: NotFound naming it otherwise): a PUT, a PUT with If-None-Match: *
// onto it (must fail: 412), a PUT with If-Match naming an ETag it does not
// have (must fail: 412), then the object is deleted. Conditional
// CompleteMultipartUpload is not probed: nothing that commits uses it.
//
// Thread safety: ConditionalWriteVerdict caches per endpoint, behind a lock.
#ifndef CKPTDB_SRC_BUCKET_CONDITIONAL_PROBE_H_
#define CKPTDB_SRC_BUCKET_CONDITIONAL_PROBE_H_

#include <string>

#include "ckptdb/status.h"
#include "s3/s3_client.h"

namespace ckptdb {
namespace bucket {

// Runs the probe. OK when both preconditions were enforced;
// FailedPrecondition naming the server, the header it ignored and what
// follows when one was not; the client's own error (Unavailable, ...) when
// the probe could not run.
Status ProbeConditionalWrites(s3::S3Client* client, const std::string& bucket, const std::string& prefix);

// The probe's verdict for (endpoint, bucket), run once per process and
// remembered: a verdict of OK or FailedPrecondition is cached, an error that
// kept the probe from running is not (the next call probes again).
Status ConditionalWriteVerdict(s3::S3Client* client, const std::string& bucket, const std::string& prefix);

}  // namespace bucket
}  // namespace ckptdb

#endif  // CKPTDB_SRC_BUCKET_CONDITIONAL_PROBE_H_
