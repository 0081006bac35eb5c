#!/usr/bin/env bash
# Uses an installed libwspool (make c-install PREFIX=$1/prefix) from C++ the
# way a user would: CMake's find_package(wspool) with wspool::wspool_cpp, and
# pkg-config (the header needs nothing more than the C library's flags).
# Programs run with LD_LIBRARY_PATH unset: they find the installed library
# through their rpath. Fails on any problem; the CMake part is skipped, loudly,
# only when cmake is missing and cannot be installed (not root).
set -euo pipefail
dir=$1
prefix=$dir/prefix
here=$(cd "$(dirname "$0")/../.." && pwd)
hello=$here/examples-cpp/hello.cpp
fail() { echo "cpp install test: $*" >&2; exit 1; }

[ -f "$prefix/include/wspool.hpp" ] || fail "missing $prefix/include/wspool.hpp"
cmp -s "$prefix/include/wspool.hpp" "$here/include/wspool.hpp" || fail "the installed wspool.hpp differs from include/"
grep -q "wspool::wspool_cpp" "$prefix/lib/cmake/wspool/wspoolConfig.cmake" || fail "wspoolConfig.cmake has no wspool::wspool_cpp"

run() {
  local exe=$1 dyn deps
  # Captured first: `cmd | grep -q` under pipefail fails when grep exits
  # before cmd has written everything (SIGPIPE).
  dyn=$(readelf -d "$exe")
  deps=$(env -u LD_LIBRARY_PATH ldd "$exe" 2>&1 || true)
  grep -q 'NEEDED.*\[libwspool.so.0\]' <<< "$dyn" || fail "$exe does not need libwspool.so.0"
  grep -q "libwspool.so.0 => $prefix/lib/libwspool.so.0" <<< "$deps" \
    || { echo "$deps"; fail "$exe does not find the installed libwspool.so.0 without LD_LIBRARY_PATH"; }
  env -u LD_LIBRARY_PATH "$exe" > "$exe.out" || { cat "$exe.out"; fail "$exe failed"; }
  grep -q "ran 100001 tasks" "$exe.out" || { cat "$exe.out"; fail "$exe printed an unexpected result"; }
  echo "cpp install test: $(basename "$exe") ok (no LD_LIBRARY_PATH)"
}

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# The route docs/cpp.md gives.
# shellcheck disable=SC2046
g++ -std=c++17 -O2 -Wall -Wextra -Werror "$hello" -o "$dir/hello_pkgconfig" $(pkg-config --cflags --libs wspool) -pthread
run "$dir/hello_pkgconfig"

if ! command -v cmake >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    echo "cpp install test: cmake is missing; installing Debian's cmake"
    apt-get install -y cmake >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y cmake >/dev/null; }
  else
    echo "cpp install test: SKIPPED the CMake part: cmake is missing and installing it needs root (apt-get install cmake)"
    exit 0
  fi
fi
cmake -S "$here/tests/cpp/cmake_consumer" -B "$dir/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DHELLO_SRC="$hello" >/dev/null
cmake --build "$dir/cmake" >/dev/null
run "$dir/cmake/hello_cpp"
echo "cpp install test: CMake (wspool::wspool_cpp) and pkg-config consumers built and ran against $prefix"
