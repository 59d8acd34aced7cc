#!/usr/bin/env bash
# Ranks on different hosts (tools/hosts.sh: network namespaces joined by a
# bridge, each host's name resolving to its address), with the store on a
# file system every host sees. No rank is given CKPTDB_BIND_ADDRESS (each
# listens on its host name's address, as PyTorch's gloo does) except in 3,
# where it is set explicitly:
#   1. save on 3 hosts x 2 ranks (file:// rendezvous on the shared disk);
#   2. load on 2 hosts x 3 ranks, as column shards (another world size and
#      sharding), every byte checked by the ranks;
#   3. save on 3 hosts x 2 ranks with a redis:// rendezvous served from host 0;
#   4. a whole host dies mid-save (both its ranks killed after writing):
#      every survivor fails within the timeout and nothing is committed;
#   5. a host is unplugged mid-save (its link cut while its ranks stall after
#      writing: no connection is closed, nothing answers): the same;
#   6. each host has only its own disk (a mount namespace per rank): the
#      ranks that do not see the coordinator's store fail clearly, naming
#      their hosts, on every rank, and nothing is committed, also with a
#      timeout (4 s) shorter than the wait for a network file system (10 s);
#   7. the same disks with the store on the coordinator's host only
#      (StoreAccess::kCoordinatorOnly): a save on 3 hosts x 2 ranks sends
#      every rank's files to host 0, and nothing lands on the other disks;
#   8. a load of it on 2 hosts x 3 ranks as column shards, each rank
#      fetching its chunks from host 0;
#   9. a host dies while its ranks send their files: every survivor fails,
#      nothing more is committed;
#  10. async saves (AsyncSaver) on 3 hosts x 2 ranks, into the shared store
#      and into the store on host 0 only, each loaded back on 2 hosts x 3;
#  11. host names that resolve to loopback (127.0.0.1 on host 0, 127.0.1.1
#      on host 1) or not at all (host 2), no setting: a save with the redis://
#      rendezvous (each rank listens on its route to the Redis host) and a
#      load with the file:// one (each host's only network address) work;
#      so does CKPTDB_SOCKET_IFNAME=eth0; a rank forced onto loopback
#      (CKPTDB_BIND_ADDRESS=127.0.0.1) fails the job at once on every rank,
#      naming the rank, its host, the address and both settings, and nothing
#      is committed;
#  12. a store in a bucket served from host 0 (SeaweedFS on its address),
#      each host with only its own disk: a save on 3 hosts x 2 ranks,
#      loaded on 2 hosts x 3 as column shards; then the coordinator and the
#      other rank of its host are killed after uploading: every survivor
#      fails, nothing of the step is visible, and `ckptdb gc` deletes what
#      the save left once it counts as abandoned, not before.
# The test bed is always torn down. Skipped (exit 77) where network
# namespaces cannot be made.
#   tests/hosts_test.sh SOURCE_DIR RANK_HELPER CKPTDB_CLI S3_FIXTURE
set -uo pipefail
src="$1"; helper="$2"; cli="$3"; s3_fixture="${4:-}"
hosts="$src/tools/hosts.sh"
name="ckh$$"
work="$(mktemp -d)"
redis_pid=""
cleanup() {
  if [ -n "$redis_pid" ]; then kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; fi
  [ ! -d "$work/weed" ] || "$src/tools/seaweedfs.sh" stop "$work/weed"
  "$hosts" down "$name" 3
  rm -rf "$work"
}
trap cleanup EXIT
if [ "$(id -u)" -ne 0 ] || ! "$hosts" up "$name" 3 2>"$work/up.err"; then
  echo "hosts_test: skipped: cannot create network namespaces: $(cat "$work/up.err" 2>/dev/null)"
  exit 77
fi
store="$work/store"
fail() { echo "hosts_test: FAILED: $*" >&2; exit 1; }

# run_job WORLD PER_HOST RENDEZVOUS OUT TIMEOUT_MS OP STEP [OPTIONS...]:
# starts WORLD ranks of the helper, PER_HOST on each host in order, and
# waits for all of them.
run_job() {
  local world="$1" per_host="$2" rdv="$3" out="$4" timeout="$5" op="$6" step="$7"; shift 7
  local job="job-$RANDOM$RANDOM" pids=()
  mkdir -p "$out"
  for r in $(seq 0 $(( world - 1 ))); do
    local h=$(( r / per_host ))
    local wrap=()
    if [ -n "${local_disks:-}" ]; then
      # This host's own disk at $work/local: the store is not shared.
      mkdir -p "$work/disk-h$h/tmp" "$work/local"
      wrap=(unshare -m sh -c 'mount --bind "$1" "$2" && shift 2 && exec "$@"' sh "$work/disk-h$h" "$work/local"
            env TMPDIR="$work/local/tmp")
    fi
    local bind=()
    [ -z "${bind_explicit:-}" ] || bind=(CKPTDB_BIND_ADDRESS="$("$hosts" addr "$h")")
    [ "${loopback_rank:--1}" != "$r" ] || bind=(CKPTDB_BIND_ADDRESS=127.0.0.1)
    [ -z "${ifname:-}" ] || bind+=(CKPTDB_SOCKET_IFNAME="$ifname")
    "$hosts" exec "$name" "$h" "${wrap[@]}" env -u CKPTDB_BIND_ADDRESS CKPTDB_RANK="$r" CKPTDB_WORLD_SIZE="$world" \
      CKPTDB_RENDEZVOUS="$rdv" CKPTDB_JOB_ID="$job" CKPTDB_LAUNCH_ID="$job" "${bind[@]}" CKPTDB_TIMEOUT_MS="$timeout" \
      "$helper" "$op" "${store_path:-$store}" "$step" "$out" "$@" >"$out/stdout-$r.txt" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do { wait "$p"; } 2>/dev/null; done
}
expect_ok() {  # expect_ok OUT WORLD
  for r in $(seq 0 $(( $2 - 1 ))); do
    [ "$(head -1 "$1/rank-$r.txt" 2>/dev/null)" = OK ] || fail "$1 rank $r: $(cat "$1/rank-$r.txt" "$1/stdout-$r.txt" 2>/dev/null)"
  done
}

# expect_survivors_failed OUT WHAT: ranks 0-3 (hosts 0 and 1) all failed, and
# the store still holds steps 1 and 2 only.
expect_survivors_failed() {
  for r in 0 1 2 3; do
    code="$(head -1 "$1/rank-$r.txt" 2>/dev/null)"
    [ -n "$code" ] && [ "$code" != OK ] || fail "survivor $r after $2: '$code' $(tail -5 "$1/stdout-$r.txt" 2>/dev/null)"
  done
  steps="$("$cli" ls "$store" --json | grep -o '"step": [0-9]*' | tr -d '"step: ' | tr '\n' ' ')"
  [ "$steps" = "1 2 " ] || fail "steps after $2: '$steps'"
}

mkdir -p "$work/rdv"
run_job 6 2 "file://$work/rdv" "$work/save1" 10000 save 1
expect_ok "$work/save1" 6
echo "hosts_test: save on 3 hosts x 2 ranks: ok"

run_job 6 3 "file://$work/rdv" "$work/load1" 10000 load 1 --layout cols
expect_ok "$work/load1" 6
echo "hosts_test: load on 2 hosts x 3 ranks as column shards: ok"

port=$(( 20000 + $$ % 20000 ))
"$hosts" exec "$name" 0 redis-server --bind "$("$hosts" addr 0)" --port "$port" --save "" --appendonly no --protected-mode no \
  >"$work/redis.log" 2>&1 &  # (it listens only inside the test bed)
redis_pid=$!
for _ in $(seq 50); do
  "$hosts" exec "$name" 2 redis-cli -h "$("$hosts" addr 0)" -p "$port" ping 2>/dev/null | grep -q PONG && break
  sleep 0.1
done
bind_explicit=1 run_job 6 2 "redis://$("$hosts" addr 0):$port" "$work/save2" 10000 save 2
expect_ok "$work/save2" 6
echo "hosts_test: save with a redis:// rendezvous on host 0 (CKPTDB_BIND_ADDRESS set): ok"

start=$(date +%s%N)
run_job 6 2 "file://$work/rdv" "$work/save3" 3000 save 3 --kill-in-write 4 --kill-in-write 5
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
expect_survivors_failed "$work/save3" "host 2 died"
[ "$took_ms" -lt 9000 ] || fail "survivors took $took_ms ms (timeout 3 s)"
"$cli" verify "$store" >/dev/null || fail "verify after the failed save"
echo "hosts_test: host 2 died mid-save: survivors failed in ${took_ms} ms, nothing committed: ok"

# A host unplugged: its ranks stall 3 s after writing; the link goes down
# after 1 s, so their reports never arrive and no socket is closed.
start=$(date +%s%N)
run_job 6 2 "file://$work/rdv" "$work/save4" 3000 save 4 --stall-in-write 4 --stall-in-write 5 &
job=$!
sleep 1
"$hosts" cut "$name" 2
{ wait "$job"; } 2>/dev/null
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
expect_survivors_failed "$work/save4" "host 2 was unplugged"
[ "$took_ms" -lt 15000 ] || fail "the job took $took_ms ms (timeout 3 s)"
"$hosts" plug "$name" 2
echo "hosts_test: host 2 unplugged mid-save: every survivor failed ($(sed -n 4p "$work/save4/rank-0.txt" | cut -c1-160)), the job ended in ${took_ms} ms, nothing committed: ok"

# No shared file system: every rank sees its own host's disk at one path.
# A 4 s timeout: the wait to see the coordinator's staging directory (up to
# 10 s for a network file system) must leave the verdict time to reach
# every rank.
local_disks=1 store_path="$work/local/store" run_job 6 2 "file://$work/rdv" "$work/save5" 4000 save 5
for r in 0 1 2 3 4 5; do
  code="$(head -1 "$work/save5/rank-$r.txt" 2>/dev/null)"
  [ "$code" = FailedPrecondition ] || fail "rank $r with a store no other host sees: '$code' $(cat "$work/save5/rank-$r.txt")"
  for h in 1 2; do
    grep -q "is not shared with the coordinator: on this host ($name-h$h)" "$work/save5/rank-$r.txt" \
      || fail "rank $r does not name host $name-h$h: $(cat "$work/save5/rank-$r.txt")"
  done
done
[ "$(sed -n 2p "$work/save5/rank-0.txt")" = "2 3 4 5" ] || fail "failed ranks: $(sed -n 2p "$work/save5/rank-0.txt")"
[ ! -e "$work/disk-h0/store/db" ] || [ -z "$("$cli" ls "$work/disk-h0/store" --json | grep '"step"')" ] \
  || fail "a step was committed on host 0's disk"
echo "hosts_test: a store on each host's own disk: every rank failed clearly ($(sed -n 4p "$work/save5/rank-0.txt" | cut -c1-140)...), nothing committed: ok"

# No shared file system, and the store on the coordinator's host only.
local_disks=1 store_path="$work/local/store" run_job 6 2 "file://$work/rdv" "$work/save6" 20000 save 6 --coordinator-only
expect_ok "$work/save6" 6
steps="$("$cli" ls "$work/disk-h0/store" --json | grep -o '"step": [0-9]*' | tr -d '"step: ' | tr '\n' ' ')"
[ "$steps" = "6 " ] || fail "steps on host 0's disk after the save: '$steps'"
"$cli" verify "$work/disk-h0/store" >/dev/null || fail "verify of host 0's store"
for h in 1 2; do
  [ ! -e "$work/disk-h$h/store" ] || fail "host $h's disk has a store: $(ls -R "$work/disk-h$h/store" | head)"
  [ -z "$(ls -A "$work/disk-h$h/tmp")" ] || fail "host $h kept staging files: $(ls -A "$work/disk-h$h/tmp")"
done
echo "hosts_test: no shared file system, store on host 0 only: save on 3 hosts x 2 ranks sent every file to host 0, nothing on the other disks: ok"

local_disks=1 store_path="$work/local/store" run_job 6 3 "file://$work/rdv" "$work/load6" 20000 load 6 --coordinator-only --layout cols
expect_ok "$work/load6" 6
[ ! -e "$work/disk-h1/store" ] || fail "host 1's disk has a store after the load"
echo "hosts_test: no shared file system: load on 2 hosts x 3 ranks as column shards, chunks fetched from host 0: ok"

start=$(date +%s%N)
local_disks=1 store_path="$work/local/store" run_job 6 2 "file://$work/rdv" "$work/save7" 3000 save 7 --coordinator-only \
  --tag 7 --kill-in-send 4 --kill-in-send 5  # (other contents: deduplicated ranks would send nothing)
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
for r in 0 1 2 3; do
  code="$(head -1 "$work/save7/rank-$r.txt" 2>/dev/null)"
  [ -n "$code" ] && [ "$code" != OK ] || fail "survivor $r after host 2 died sending: '$code'"
done
[ "$took_ms" -lt 15000 ] || fail "the job took $took_ms ms (timeout 3 s)"
[ "$(sed -n 2p "$work/save7/rank-0.txt")" = "4 5" ] || fail "the coordinator names ranks '$(sed -n 2p "$work/save7/rank-0.txt")'"
steps="$("$cli" ls "$work/disk-h0/store" --json | grep -o '"step": [0-9]*' | tr -d '"step: ' | tr '\n' ' ')"
[ "$steps" = "6 " ] || fail "steps on host 0's disk after host 2 died sending: '$steps'"
echo "hosts_test: no shared file system: host 2 died while sending its files: survivors failed in ${took_ms} ms ($(sed -n 4p "$work/save7/rank-0.txt" | cut -c1-140)), nothing committed: ok"

run_job 6 2 "file://$work/rdv" "$work/save8" 10000 save 8 --async --tag 8
expect_ok "$work/save8" 6
run_job 6 3 "file://$work/rdv" "$work/load8" 10000 load 8 --tag 8 --layout cols
expect_ok "$work/load8" 6
local_disks=1 store_path="$work/local/store" run_job 6 2 "file://$work/rdv" "$work/save9" 20000 save 9 --coordinator-only \
  --async --tag 9
expect_ok "$work/save9" 6
local_disks=1 store_path="$work/local/store" run_job 6 3 "file://$work/rdv" "$work/load9" 20000 load 9 --coordinator-only \
  --tag 9
expect_ok "$work/load9" 6
echo "hosts_test: async saves on 3 hosts x 2 ranks, shared and on host 0 only, loaded on 2 hosts x 3: ok"

# 11. Host names that resolve to loopback or not at all.
"$hosts" names "$name" loopback debian none
run_job 6 2 "redis://$("$hosts" addr 0):$port" "$work/save12" 10000 save 12
expect_ok "$work/save12" 6
run_job 6 3 "file://$work/rdv" "$work/load12" 10000 load 12 --layout cols
expect_ok "$work/load12" 6
ifname=eth0 run_job 6 2 "file://$work/rdv" "$work/save13" 10000 save 13
expect_ok "$work/save13" 6
echo "hosts_test: host names resolving to 127.0.0.1, 127.0.1.1 and nothing, no setting: save (redis://) and load (file://) on 3 hosts, and CKPTDB_SOCKET_IFNAME=eth0: ok"
start=$(date +%s%N)
loopback_rank=3 run_job 6 2 "file://$work/rdv" "$work/save14" 10000 save 14
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
for r in 0 1 2 3 4 5; do
  code="$(head -1 "$work/save14/rank-$r.txt" 2>/dev/null)"
  [ "$code" = InvalidArgument ] || fail "rank $r with rank 3 on loopback: '$code' $(cat "$work/save14/rank-$r.txt" "$work/save14/stdout-$r.txt" 2>/dev/null)"
  for want in "rank 3 on host $name-h1 listens on 127.0.0.1" CKPTDB_SOCKET_IFNAME CKPTDB_BIND_ADDRESS "spans 3 hosts"; do
    grep -qF "$want" "$work/save14/rank-$r.txt" || fail "rank $r does not say '$want': $(cat "$work/save14/rank-$r.txt")"
  done
done
[ "$took_ms" -lt 8000 ] || fail "the job with a rank on loopback took $took_ms ms to fail (timeout 10 s)"
steps="$("$cli" ls "$store" --json | grep -o '"step": [0-9]*' | tr -d '"step: ' | tr '\n' ' ')"
case " $steps" in *" 14 "*) fail "step 14 was committed: '$steps'" ;; esac
"$hosts" names "$name" own own own
echo "hosts_test: rank 3 forced onto loopback in a job across hosts: every rank failed in ${took_ms} ms ($(sed -n 4p "$work/save14/rank-0.txt" | cut -c1-200)...), nothing committed: ok"

# 12. A bucket served from host 0; no shared file system.
if [ -z "$s3_fixture" ]; then
  echo "hosts_test: bucket store part skipped: no S3 fixture binary given"
  exit 0
fi
weed_rc=0
"$hosts" exec "$name" 0 env CKPTDB_SEAWEEDFS_IP="$("$hosts" addr 0)" "$src/tools/seaweedfs.sh" start "$work/weed" \
  >"$work/weed-start.log" 2>&1 || weed_rc=$?
if [ "$weed_rc" -eq 3 ]; then
  echo "hosts_test: bucket store part skipped: SeaweedFS could not be installed"; exit 0
fi
[ "$weed_rc" -eq 0 ] || fail "SeaweedFS did not start on host 0: $(tail -5 "$work/weed-start.log")"
bucket="$("$hosts" exec "$name" 0 "$s3_fixture" "$work/weed/server.env" hosts-test)" || fail "cannot create the bucket"
set -a; . "$work/weed/server.env"; set +a
export AWS_ENDPOINT_URL="$CKPTDB_S3_ENDPOINT" AWS_ACCESS_KEY_ID="$CKPTDB_S3_ACCESS_KEY" \
  AWS_SECRET_ACCESS_KEY="$CKPTDB_S3_SECRET_KEY" AWS_REGION=us-east-1
url="s3://$bucket/job"
on_host0() { "$hosts" exec "$name" 0 "$@"; }
local_disks=1 store_path="$url" run_job 6 2 "file://$work/rdv" "$work/save10" 20000 save 10
expect_ok "$work/save10" 6
for h in 0 1 2; do  # (each rank's local files of the upload are gone)
  ! ls -A "$work/disk-h$h/tmp" 2>/dev/null | grep -q ckptdb-bucket || fail "host $h kept local files: $(ls -A "$work/disk-h$h/tmp")"
done
local_disks=1 store_path="$url" run_job 6 3 "file://$work/rdv" "$work/load10" 20000 load 10 --layout cols
expect_ok "$work/load10" 6
on_host0 "$cli" verify "$url" >/dev/null || fail "verify of the bucket store"
echo "hosts_test: a bucket on host 0, each host its own disk: save on 3 hosts x 2 ranks, load on 2 hosts x 3 as column shards: ok"

local_disks=1 store_path="$url" run_job 6 2 "file://$work/rdv" "$work/save11" 3000 save 11 --tag 11 \
  --kill-in-write 0 --kill-in-write 1
for r in 2 3 4 5; do
  code="$(head -1 "$work/save11/rank-$r.txt" 2>/dev/null)"
  [ -n "$code" ] && [ "$code" != OK ] || fail "survivor $r after the coordinator died saving into the bucket: '$code'"
done
steps="$(on_host0 "$cli" ls "$url" --json | grep -o '"step": [0-9]*' | tr -d '"step: ' | tr '\n' ' ')"
[ "$steps" = "10 " ] || fail "steps in the bucket after the coordinator died: '$steps'"
kept="$(on_host0 "$cli" gc "$url" --json)" || fail "gc: $kept"
echo "$kept" | grep -q '"failed_saves": 0' || fail "gc deleted a save it must take as running: $kept"
swept="$(on_host0 "$cli" gc "$url" --abandoned-after 0 --json)" || fail "gc: $swept"
echo "$swept" | grep -q '"failed_saves": 1' || fail "gc did not delete the dead save: $swept"
on_host0 "$cli" verify "$url" >/dev/null || fail "verify after gc"
echo "hosts_test: the coordinator died saving into the bucket: survivors failed, nothing visible, gc deleted the leftovers once abandoned: ok"
