#!/usr/bin/env bash
# Installs the Debian packages that building and testing uocr needs. As root it installs them
# itself; otherwise it re-runs itself through sudo, where there is one.
set -euo pipefail
if ((EUID != 0)); then
  if command -v sudo >/dev/null 2>&1; then
    exec sudo -- bash "$0" "$@"
  fi
  echo "install_deps.sh: installing packages needs root: run it as root (su -c 'bash $0'), or install sudo" >&2
  exit 1
fi
packages=(g++ meson ninja-build pkg-config libeigen3-dev nlohmann-json3-dev libstb-dev libjpeg-dev doctest-dev
  python3 python3-wheel mono-mcs mono-runtime poppler-utils $(command -v cargo >/dev/null 2>&1 || echo cargo rustc))  # bindings tests; cargo+rustc only if no cargo on PATH (e.g. rustup)
packages+=(libcpp-httplib-dev libhiredis-dev libcurl4-openssl-dev)  # uocr serve and uocr worker (Redis; S3 storage)
packages+=(redis-server)  # the fleet's tests run a real Redis (tests/serve/test_fleet.py)
packages+=(chromium chromium-driver curl)  # uocr serve's tests: its web page in a headless browser, a burst from curl
packages+=(clang libclang-rt-14-dev)  # libFuzzer targets (tests/fuzz/run.sh)
packages+=(glslc libvulkan-dev mesa-vulkan-drivers vulkan-validationlayers)  # Vulkan backend; lavapipe runs its tests without a GPU
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
