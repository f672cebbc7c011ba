#!/usr/bin/env bash
# Configures and builds one tree, showing ninja's progress.
# Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...] [-- TARGET...]   (no targets: everything)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake_args=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  cmake_args+=("$1")
  shift
done
[ "${1:-}" = "--" ] && shift
cmake -S . -B "$dir" -G Ninja "${cmake_args[@]}" >/dev/null
ninja -C "$dir" "$@"
