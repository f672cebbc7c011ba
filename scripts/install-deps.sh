#!/usr/bin/env bash
# Installs every Debian package Conduit builds, tests and benchmarks with.
# Idempotent: when all packages are present it does nothing (no apt-get update).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libfabric-dev libfabric-bin
  libibverbs-dev librdmacm-dev ibverbs-providers
  libisal-dev
  prometheus-cpp-dev
  libcpp-httplib-dev libssl-dev
  libboost-program-options-dev
  nlohmann-json3-dev
  libyaml-cpp-dev
  libgtest-dev libgmock-dev
  clang-format
  iperf3 wrk curl
  procps iproute2 openssl etcd-server
  prometheus jq
  clang-14 libclang-rt-14-dev
  lld  # the linker cmake/build_speed.cmake uses where present
  ccache  # in front of the compiler (cmake/build_speed.cmake); its cache is ~/.cache/ccache
  python3 python3-yaml python3-venv
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages (${missing[*]}); run as root to install them" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
