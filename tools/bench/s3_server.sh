# Sourced by the bucket benchmarks (tools/bench-s3.sh, tools/bench-s3-gc.sh).
# bench_s3_server DIR BUCKET starts one SeaweedFS in DIR (tools/seaweedfs.sh),
# points AWS's variables at it (and at nothing else: no profile, session or
# CA bundle of the user's), creates BUCKET, and exports BENCH_S3_SERVER_PID
# (the benchmarks read the server's CPU seconds from /proc). The caller stops
# it: tools/seaweedfs.sh stop DIR.
bench_s3_server() {
  local dir="$1" bucket="$2" tools
  tools="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  "$tools/seaweedfs.sh" start "$dir" >/dev/null
  # shellcheck disable=SC1091
  . "$dir/server.env"
  BENCH_S3_SERVER_PID="$(cat "$dir/weed.pid")"
  export BENCH_S3_SERVER_PID
  export AWS_ENDPOINT_URL_S3="$CKPTDB_S3_ENDPOINT" AWS_ENDPOINT_URL="$CKPTDB_S3_ENDPOINT" \
    AWS_ACCESS_KEY_ID="$CKPTDB_S3_ACCESS_KEY" AWS_SECRET_ACCESS_KEY="$CKPTDB_S3_SECRET_KEY" AWS_REGION=us-east-1
  unset AWS_PROFILE AWS_SESSION_TOKEN AWS_CA_BUNDLE AWS_DEFAULT_REGION
  curl -sS -f -o /dev/null --aws-sigv4 "aws:amz:us-east-1:s3" -u "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
    -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -X PUT "$AWS_ENDPOINT_URL_S3/$bucket"
}
