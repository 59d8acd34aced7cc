#!/usr/bin/env bash
# Installs ckptdb from BUILD into a fresh prefix and builds a project outside
# the tree against it, as a user would: through find_package (shared and
# static) and through pkg-config; then packs BUILD as a Debian package
# (cpack -G DEB), checks what it holds, unpacks it into a fresh root and
# builds the project against that too. Every program saves and loads a step.
#   tests/install_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$1"
build="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
consumer="$src/tests/consumer"

check() {  # check PREFIX LABEL: the CMake consumer, shared and static
  local prefix="$1" label="$2"
  cmake -S "$consumer" -B "$work/build-$label" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$work/build-$label" -j 2 >/dev/null
  for kind in shared static; do
    out="$(LD_LIBRARY_PATH="$prefix/lib" "$work/build-$label/consumer_$kind" "$work/store-$label-$kind")"
    [ "$out" = ok ] || { echo "install_test: $label $kind printed '$out'" >&2; exit 1; }
    echo "install_test: find_package($label, $kind): ok"
  done
}

# 1. cmake --install into a prefix.
cmake --install "$build" --prefix "$work/prefix" >/dev/null
for f in include/ckptdb/ckptdb.h lib/libckptdb.so lib/libckptdb.a lib/cmake/ckptdb/ckptdbConfig.cmake \
         lib/pkgconfig/ckptdb.pc bin/ckptdb bin/ckptdb-launch; do
  [ -e "$work/prefix/$f" ] || { echo "install_test: $f was not installed" >&2; exit 1; }
done
# The installed headers need none of RocksDB's, gloo's or Protobuf's.
if grep -rlE '#include <(rocksdb|gloo|google/protobuf)' "$work/prefix/include/ckptdb"; then
  echo "install_test: an installed header includes a dependency's header" >&2; exit 1
fi
check "$work/prefix" prefix

# 2. pkg-config.
PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" \
  c++ -std=c++17 "$consumer/main.cc" -o "$work/consumer_pc" $(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs ckptdb)
out="$(LD_LIBRARY_PATH="$work/prefix/lib" "$work/consumer_pc" "$work/store-pc")"
[ "$out" = ok ] || { echo "install_test: pkg-config build printed '$out'" >&2; exit 1; }
echo "install_test: pkg-config: ok"

# 3. The Debian package.
(cd "$build" && cpack -G DEB -B "$work/deb" >/dev/null)
deb="$(ls "$work"/deb/ckptdb_*.deb)"
info="$(dpkg-deb --info "$deb")"
contents="$(dpkg-deb --contents "$deb")"
grep -q 'Depends: librocksdb-dev' <<<"$info" || { echo "install_test: no Depends in $deb" >&2; exit 1; }
for f in ./usr/include/ckptdb/ckptdb.h ./usr/bin/ckptdb ./usr/lib/cmake/ckptdb/ckptdbConfig.cmake; do
  grep -q " $f\$" <<<"$contents" || { echo "install_test: $deb lacks $f" >&2; exit 1; }
done
dpkg-deb -x "$deb" "$work/root"
check "$work/root/usr" deb
"$work/root/usr/bin/ckptdb" ls "$work/store-deb-static" | grep -q '^7 ' || { echo "install_test: packaged ckptdb ls" >&2; exit 1; }
echo "install_test: $(basename "$deb"): ok"
