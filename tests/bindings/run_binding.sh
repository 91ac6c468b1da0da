#!/bin/sh
# Runs one binding's sample program (samples/*, over bindings/{python,rust,csharp}) on the tiny
# model and compares its stdout byte for byte with the C++ API's transcript (written by
# uocr_ref_ocr with the same arguments), or runs a binding's API checks. Exit 77 (meson's skip)
# when the binding's toolchain or the model is missing.
#
#   run_binding.sh KIND REF_FILE LIBUOCR WORK_DIR SOURCE_ROOT [ARG...]
#   KIND c:                          ARG = C_EXE, then the sample's arguments
#        python | rust | csharp:     ARG = the sample's arguments (-n N [...] MODEL_DIR IMAGE...)
#        python_package:             the same, the Python sample on `pip install bindings/python`
#        python_api:                 ARG = MODEL_DIR IMAGE
#        rust_api | csharp_api:      ARG = MODEL_DIR PAGE0 PAGE1 PAGE2
#        exports | pkgconfig:        no ARG
set -u
kind=$1 ref=$2 lib=$3 work=$4 src=$5
shift 5

skip() { echo "SKIP: $*"; exit 77; }
die() { echo "FAIL: $*"; exit 1; }

libdir=$(cd "$(dirname "$lib")" && pwd) || die "no library directory for $lib"
lib="$libdir/$(basename "$lib")"
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$work" || die "cannot create $work"
# One reference may serve several tests, one test several references: name files after both.
tag="$(basename "$ref" .txt)-$kind"
out="$work/$tag.stdout"
err="$work/$tag.stderr"

case $kind in
exports)
  # Only the C ABI may be exported: everything else is hidden (visibility + version script).
  command -v nm >/dev/null 2>&1 || skip "nm not found"
  bad=$(nm -D --defined-only "$lib" | awk 'NF >= 3 {print $3}' | grep -v '^uocr_' | grep -v '^UOCR_0$')
  [ -z "$bad" ] || die "libuocr exports non-uocr_ symbols: $(echo "$bad" | head -20)"
  n=$(nm -D --defined-only "$lib" | grep -c ' T uocr_')
  echo "libuocr exports $n uocr_* functions and nothing else"
  exit 0 ;;
pkgconfig)
  # The uninstalled pkg-config file meson generates must be enough to build the C sample.
  command -v pkg-config >/dev/null 2>&1 || skip "pkg-config not found"
  command -v cc >/dev/null 2>&1 || skip "cc not found"
  pcdir=$(dirname "$libdir")/meson-uninstalled
  [ -f "$pcdir/uocr-uninstalled.pc" ] || die "$pcdir/uocr-uninstalled.pc not generated"
  flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs uocr) || die "pkg-config --cflags --libs uocr failed"
  echo "pkg-config uocr: $flags"
  # shellcheck disable=SC2086
  cc -std=c99 -Wall -Wextra -Werror -pedantic -o "$work/ocr_pkgconfig" "$src/samples/c/ocr.c" $flags ||
    die "building samples/c/ocr.c with the pkg-config flags failed"
  "$work/ocr_pkgconfig" >/dev/null 2>&1
  [ $? -eq 2 ] || die "the pkg-config-built sample did not run (expected its usage exit status 2)"
  exit 0 ;;
esac

[ -f "$ref" ] || die "reference transcript $ref missing"
if head -c 9 "$ref" | grep -q '^UOCR-SKIP'; then skip "$(cat "$ref")"; fi

# Offline, no registry: CARGO_HOME and the target dir live in the build tree (cargo locks the
# target dir, so the Rust tests may run in parallel). CRATE: bindings/rust or samples/rust.
#   cargo_in_tree CRATE COMMAND [ARG...]
cargo_in_tree() {
  command -v cargo >/dev/null 2>&1 || skip "cargo not found (install the Debian packages cargo and rustc)"
  crate=$1 cmd=$2
  shift 2
  CARGO_HOME="$work/cargo-home" UOCR_LIB_DIR="$libdir" cargo "$cmd" --quiet --offline --locked \
    --manifest-path "$src/$crate/Cargo.toml" --target-dir "$work/rust-target" "$@"
}
# Compiles the C# binding with a program to $work/$tag.exe.
mcs_in_tree() {
  command -v mcs >/dev/null 2>&1 || skip "mcs not found (install mono-mcs)"
  command -v mono >/dev/null 2>&1 || skip "mono not found (install mono-runtime)"
  mcs -nologo -warnaserror -out:"$work/$tag.exe" "$src/bindings/csharp/Uocr.cs" "$1" >"$err" 2>&1 ||
    { cat "$err"; die "mcs failed"; }
}

case $kind in
c)
  exe=$1
  shift
  "$exe" -q "$@" >"$out" 2>"$err" ;;
python)
  command -v python3 >/dev/null 2>&1 || skip "python3 not found"
  PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$src/bindings/python" UOCR_LIBRARY="$lib" \
    python3 "$src/samples/python/ocr.py" -q "$@" >"$out" 2>"$err" ;;
python_api)
  command -v python3 >/dev/null 2>&1 || skip "python3 not found"
  PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$src/bindings/python" UOCR_LIBRARY="$lib" \
    python3 "$src/tests/bindings/python_api_check.py" "$@"
  exit $? ;;
python_package)
  # Offline, so no build isolation: pip builds with the setuptools it has, which needs the wheel
  # package below setuptools 70.1.
  command -v python3 >/dev/null 2>&1 || skip "python3 not found"
  python3 -c '
import importlib.util as u, sys, setuptools
ok = int(setuptools.__version__.split(".")[0]) >= 61 and u.find_spec("pip")
sys.exit(0 if ok and (u.find_spec("wheel") or u.find_spec("setuptools.command.bdist_wheel")) else 1)' 2>/dev/null ||
    skip "installing bindings/python offline needs pip, setuptools >= 61 and wheel (or setuptools >= 70.1)"
  # pip builds in the folder it is given (build/, uocr.egg-info/): a copy.
  pkg="$work/python-package"
  rm -rf "$pkg"
  mkdir -p "$pkg" || die "cannot create $pkg"
  cp -R "$src/bindings/python" "$pkg/src" || die "cannot copy bindings/python to $pkg"
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --no-build-isolation --no-deps --no-index \
    --no-cache-dir --disable-pip-version-check --target "$pkg/site" "$pkg/src" >"$err" 2>&1 ||
    { cat "$err"; die "pip install bindings/python failed"; }
  PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$pkg/site" UOCR_LIBRARY="$lib" python3 -c '
import os, sys, uocr
sys.exit(not os.path.samefile(uocr.__file__, sys.argv[1]))' "$pkg/site/uocr.py" ||
    die "the installed module is not the one imported (or does not load)"
  PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$pkg/site" UOCR_LIBRARY="$lib" \
    python3 "$src/samples/python/ocr.py" -q "$@" >"$out" 2>"$err" ;;
rust)
  cargo_in_tree samples/rust build >"$err" 2>&1 || { cat "$err"; die "cargo build failed"; }
  "$work/rust-target/debug/ocr" -q "$@" >"$out" 2>"$err" ;;
rust_api)
  [ $# -eq 4 ] || die "rust_api needs MODEL_DIR and three pages"
  model=$1
  shift
  pages=$(printf '%s:' "$@")
  UOCR_TEST_MODEL="$model" UOCR_TEST_PAGES="${pages%:}" cargo_in_tree bindings/rust test --test api -- --test-threads=1 ||
    die "the Rust API checks failed"
  cargo_in_tree bindings/rust test --doc || die "the Rust documentation examples do not build"
  exit 0 ;;
csharp)
  mcs_in_tree "$src/samples/csharp/Ocr.cs"
  mono "$work/$tag.exe" -q "$@" >"$out" 2>"$err" ;;
csharp_api)
  mcs_in_tree "$src/tests/bindings/csharp_api_check.cs"
  mono "$work/$tag.exe" "$@"
  exit $? ;;
*)
  die "unknown binding kind $kind" ;;
esac
rc=$?
cat "$err"
[ $rc -eq 0 ] || die "the $kind sample exited with status $rc"
if cmp -s "$ref" "$out"; then
  echo "$kind binding: $(wc -c <"$out") bytes, identical to the C++ API's transcript"
  exit 0
fi
echo "--- C++ API ($ref)"; od -c "$ref" | head -20
echo "--- $kind binding ($out)"; od -c "$out" | head -20
die "the $kind binding's transcript differs from the C++ API's"
