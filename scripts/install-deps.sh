#!/usr/bin/env bash
# Installs every Debian package Conduit builds, tests and benchmarks with.
# Idempotent: when all packages are present it does nothing (no apt-get update).
#
#   scripts/install-deps.sh          what the build, the tests and the benches need
#   scripts/install-deps.sh --node   also what a real test node needs (scripts/kube-node.sh): containerd 1.6,
#                                    runc, the CNI plugins, and buildah for images without a registry
#                                    (scripts/kube-images.sh)
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
if [ "${1:-}" = --node ]; then
  packages+=(containerd runc containernetworking-plugins buildah)
elif [ $# -gt 0 ]; then
  echo "usage: $0 [--node]" >&2
  exit 2
fi

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
