#!/usr/bin/env bash
# Installs the Debian packages ckptdb builds and tests with. Idempotent: packages
# already present are not downloaded again, and apt-get update runs only when
# something is missing. Needs root (or sudo) when anything is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  librocksdb-dev
  libprotobuf-dev protobuf-compiler
  libgloo-dev libhiredis-dev redis-server
  libzstd-dev libxxhash-dev
  libcurl4-openssl-dev libssl-dev libexpat1-dev
  libgtest-dev
  python3
  iproute2
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: need root to install: ${missing[*]}" >&2; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
