#!/usr/bin/env bash
# Uses an installed libwspool (make c-install PREFIX=$1/prefix) the way a
# user would: pkg-config (wspool.pc shared, wspool-static.pc static, and a
# fully static executable) and CMake's find_package (shared and static).
# Every program runs with LD_LIBRARY_PATH unset, as a user's would: the
# shared ones must find the installed library through their rpath.
# Fails on any problem; skips only the CMake part, loudly, when cmake is
# missing and cannot be installed (not root).
set -euo pipefail
dir=$1
prefix=$dir/prefix
here=$(cd "$(dirname "$0")/../.." && pwd)
hello=$here/examples-c/hello.c
lib=$prefix/lib

fail() { echo "install test: $*" >&2; exit 1; }

for f in lib/libwspool.so lib/libwspool.so.0 lib/libwspool.a include/libwspool.h share/wspool/tsan.supp \
         lib/pkgconfig/wspool.pc lib/pkgconfig/wspool-static.pc lib/cmake/wspool/wspoolConfig.cmake lib/cmake/wspool/wspoolConfigVersion.cmake; do
  [ -e "$prefix/$f" ] || fail "missing $prefix/$f"
done
readelf -d "$lib/libwspool.so" | grep -q 'SONAME.*\[libwspool.so.0\]' || fail "installed library lacks SONAME libwspool.so.0"

# Runs a program the way a user would (no LD_LIBRARY_PATH) and checks which
# libwspool it used: the installed .so for shared links, none for static ones.
check_run() {
  local exe=$1 want_shared=$2 deps
  deps=$(env -u LD_LIBRARY_PATH ldd "$exe" 2>&1 || true)
  if [ "$want_shared" = yes ]; then
    readelf -d "$exe" | grep -q 'NEEDED.*\[libwspool.so.0\]' || fail "$exe does not need libwspool.so.0"
    grep -q "libwspool.so.0 => $lib/libwspool.so.0" <<< "$deps" \
      || { echo "$deps"; fail "$exe does not find the installed libwspool.so.0 without LD_LIBRARY_PATH"; }
  else
    if grep -q libwspool <<< "$deps"; then echo "$deps"; fail "$exe should not depend on libwspool.so (static link)"; fi
  fi
  env -u LD_LIBRARY_PATH "$exe" > "$exe.out" || { cat "$exe.out"; fail "$exe failed"; }
  grep -q "ran 100001 tasks" "$exe.out" || { cat "$exe.out"; fail "$exe printed an unexpected result"; }
  echo "install test: $(basename "$exe") ok (no LD_LIBRARY_PATH; ldd: $(grep -c '=>' <<< "$deps") shared libraries, $([ "$want_shared" = yes ] && echo "libwspool from $lib" || echo "no libwspool"))"
}

# Installs a Debian package when missing and we are root; otherwise says why not.
need() {
  local cmd=$1 pkg=$2
  command -v "$cmd" >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "install test: $cmd is missing; installing Debian's $pkg"
    apt-get install -y "$pkg" >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y "$pkg" >/dev/null; }
    return 0
  fi
  return 1
}

need pkg-config pkg-config || fail "pkg-config is missing and installing it needs root (apt-get install pkg-config)"
export PKG_CONFIG_PATH=$lib/pkgconfig
[ "$(pkg-config --modversion wspool)" = "$(sed -n 's/^version = "\([0-9.]*\)"/\1/p' "$here/Cargo.toml" | head -n 1)" ] \
  || fail "pkg-config reports version $(pkg-config --modversion wspool)"
# The routes exactly as docs/c-api.md gives them.
# shellcheck disable=SC2046
gcc -std=c11 -O2 -Wall -Werror "$hello" -o "$dir/hello_pkgconfig" $(pkg-config --cflags --libs wspool) -pthread
check_run "$dir/hello_pkgconfig" yes
# shellcheck disable=SC2046
gcc -std=c11 -O2 -Wall -Werror "$hello" -o "$dir/hello_pkgconfig_static" $(pkg-config --cflags --libs wspool-static) -pthread
check_run "$dir/hello_pkgconfig_static" no
# Fully static (no shared library at all): libgcc_s has no archive, libgcc_eh is its static part.
# shellcheck disable=SC2046
gcc -static -std=c11 -O2 -Wall -Werror "$hello" -o "$dir/hello_fully_static" \
  $(pkg-config --cflags --libs wspool-static | sed 's/-lgcc_s/-lgcc_eh/') -pthread 2> "$dir/static-link.log" \
  || { cat "$dir/static-link.log"; fail "gcc -static failed"; }
file "$dir/hello_fully_static" | grep -q 'statically linked' || fail "hello_fully_static is not statically linked"
check_run "$dir/hello_fully_static" no

# ThreadSanitizer with the installed suppression file, found through pkg-config
# as docs/c-api.md says: the shared consumer built with -fsanitize=thread runs
# clean (halt_on_error: any report fails it). Without the file TSan reports the
# library's own allocations as races (printed, not required: a blinded TSan is
# caught by test-c-tsan's canary).
supp=$(pkg-config --variable=tsan_suppressions wspool)
[ "$supp" = "$prefix/share/wspool/tsan.supp" ] || fail "pkg-config names $supp as the TSan suppressions"
[ -f "$supp" ] || fail "missing $supp"
# shellcheck disable=SC2046
gcc -std=c11 -O1 -g -fsanitize=thread -Wall -Werror "$hello" -o "$dir/hello_tsan" $(pkg-config --cflags --libs wspool) -pthread
env -u LD_LIBRARY_PATH TSAN_OPTIONS="halt_on_error=1 suppressions=$supp" "$dir/hello_tsan" > "$dir/hello_tsan.out" 2>&1 \
  || { cat "$dir/hello_tsan.out"; fail "hello_tsan failed under TSan with the installed suppressions"; }
grep -q "ran 100001 tasks" "$dir/hello_tsan.out" || { cat "$dir/hello_tsan.out"; fail "hello_tsan printed an unexpected result"; }
! grep -q "ThreadSanitizer" "$dir/hello_tsan.out" || { cat "$dir/hello_tsan.out"; fail "TSan reported with the installed suppressions"; }
unsuppressed=$(env -u LD_LIBRARY_PATH TSAN_OPTIONS="halt_on_error=0 exitcode=0" "$dir/hello_tsan" 2>&1 | grep -c "WARNING: ThreadSanitizer" || true)
echo "install test: hello_tsan ok under TSan with $supp (without it: $unsuppressed reports inside the library)"

if ! need cmake cmake; then
  echo "install test: SKIPPED the CMake part: cmake is missing and installing it needs root (apt-get install cmake)"
  exit 0
fi
cmake -S "$here/tests/c/cmake_consumer" -B "$dir/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DHELLO_SRC="$hello" >/dev/null
cmake --build "$dir/cmake" >/dev/null
check_run "$dir/cmake/hello_shared" yes
check_run "$dir/cmake/hello_static" no
echo "install test: pkg-config and CMake consumers built and ran against $prefix"
