#!/usr/bin/env bash
# What an install gives a C++ user: `meson install` into a scratch folder, then tests/install/
# consumer.cpp built against nothing but the installed headers and libraries (and the system's
# Eigen, nlohmann-json, stb, libjpeg, Vulkan), and run on the installed demo model. Checks that the
# installed headers stand alone and that libuocr_vulkan.a registers the Vulkan backend through its
# public face.
#   test_install.sh BUILD_DIR PREFIX INCLUDEDIR LIBDIR DATADIR VULKAN(0|1) LIBJPEG(0|1) CXX [FLAGS...]
set -euo pipefail
build=$1 prefix=$2 includedir=$3 libdir=$4 datadir=$5 vulkan=$6 libjpeg=$7
shift 7
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --no-rebuild --quiet --destdir "$dest" >/dev/null
root=$dest$prefix
[[ $includedir = /* ]] || includedir=$prefix/$includedir
[[ $libdir = /* ]] || libdir=$prefix/$libdir
[[ $datadir = /* ]] || datadir=$prefix/$datadir
inc=$dest$includedir lib=$dest$libdir

if grep -rn '#include "backends/' "$inc"; then
  echo "FAIL: installed headers include a backend's own code (not installed)"
  exit 1
fi

pkgs=(eigen3 nlohmann_json stb)
defs=()
libs=(-fopenmp -lpthread)
if [[ $libjpeg = 1 ]]; then pkgs+=(libjpeg); defs+=(-DUOCR_HAVE_LIBJPEG); libs+=(-ljpeg); fi
expected="backends: cpu"
if [[ $vulkan = 1 ]]; then
  [[ -f $lib/libuocr_vulkan.a ]] || { echo "FAIL: no libuocr_vulkan.a under $lib"; exit 1; }
  pkgs+=(vulkan); defs+=(-DUOCR_HAVE_VULKAN=1); libs=("$lib/libuocr_vulkan.a" -lvulkan "${libs[@]}")
  expected="backends: cpu, vulkan"
fi
src=$(dirname "$0")/consumer.cpp
# shellcheck disable=SC2046
"$@" -std=c++17 -O1 "${defs[@]}" -I"$inc" $(pkg-config --cflags "${pkgs[@]}") "$src" -o "$dest/consumer" "${libs[@]}"
out=$("$dest/consumer" "$dest$datadir/uocr/models/uocr-demo")
echo "$out"
grep -qx "$expected" <<<"$out" || { echo "FAIL: expected '$expected'"; exit 1; }
opened="opened: cpu"
[[ $vulkan = 1 ]] && opened="opened: vulkan"
grep -qx "$opened" <<<"$out" || { echo "FAIL: expected '$opened'"; exit 1; }
echo "PASS"
