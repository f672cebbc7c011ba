#!/usr/bin/env bash
# Builds the bundle bench/gpu-check.sh runs on a GPU machine that has a CUDA driver but no package registry
# and none of Conduit's libraries. Run it on a build machine (Debian 12 with scripts/install-deps.sh done):
#   1. CUDA driver headers from PyPI's nvidia-cuda-runtime-cu12 wheel (scripts/cuda-headers.sh, cached in
#      ~/.cache/conduit-cuda) unless CUDA_HOME has a toolkit; no CUDA library is linked (libcuda.so.1 is
#      dlopen'ed on the GPU machine);
#   2. a CUDA build of conduit-agent, conduit, conduit-gpu-probe and conduit_cuda_tests in BUILD_DIR, and of
#      the test builds over the CUDA host double that CONDUIT_GPU_CHECK_DOUBLE=1 bench/gpu-check.sh runs;
#   3. BUNDLE_DIR/libexec: those binaries without debug info; BUNDLE_DIR/lib: every shared library they load
#      (ldd), the C library and the loader included, so the GPU machine's own (possibly older) glibc and
#      libstdc++ do not matter; BUNDLE_DIR/bin: one wrapper per binary that starts it with the bundle's
#      loader and --library-path BUNDLE_DIR/lib; BUNDLE_DIR/MANIFEST: what went in.
# Then carry BUNDLE_DIR with the tree (it is under /build*, which git ignores) and run bench/gpu-check.sh.
#
# Usage: bench/prepare-gpu-bundle.sh [BUNDLE_DIR [BUILD_DIR]]
#        defaults: build-gpu-bundle and build-gpu at the repository root; JOBS=N for the build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bundle=${1:-$root/build-gpu-bundle}
build=${2:-$root/build-gpu}
programs=(conduit-agent conduit conduit-gpu-probe conduit_cuda_tests
  conduit-agent-cuda-double conduit-gpu-probe-cuda-double conduit_cuda_double_tests)

headers=()
if [ -z "${CUDA_HOME:-}" ]; then
  headers=(-DCONDUIT_CUDA_INCLUDE_DIR="$("$root/scripts/cuda-headers.sh")")
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCONDUIT_CUDA=ON "${headers[@]}" > /dev/null
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "${programs[@]}"

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/libexec" "$bundle/lib"
loader=""
for p in "${programs[@]}"; do
  cp "$build/bin/$p" "$bundle/libexec/$p"
  strip --strip-debug "$bundle/libexec/$p"
  # "libfoo.so.1 => /path (0x...)" and the loader's own "/lib64/ld-linux-x86-64.so.2 (0x...)".
  while read -r lib; do
    [ -n "$lib" ] || continue
    case "$lib" in
      */ld-linux*) loader=$lib ;;
    esac
    [ -e "$bundle/lib/$(basename "$lib")" ] || cp -L "$lib" "$bundle/lib/$(basename "$lib")"
  done < <(ldd "$build/bin/$p" | awk '/=> \// {print $3} /^\t\/.*ld-linux/ {print $1}')
  if ldd "$build/bin/$p" | grep -q "not found"; then
    echo "prepare-gpu-bundle: $p has unresolved libraries:" >&2
    ldd "$build/bin/$p" | grep "not found" >&2
    exit 1
  fi
  cat > "$bundle/bin/$p" <<EOF
#!/bin/sh
# Starts libexec/$p with the bundle's own loader and libraries (built on $(. /etc/os-release && echo "$PRETTY_NAME")),
# so this machine needs none of them. The CUDA driver is this machine's: CONDUIT_CUDA_DRIVER (the agent's
# --cuda-driver), or wherever the loader finds libcuda.so.1.
b=\$(cd "\$(dirname "\$0")/.." && pwd)
exec "\$b/lib/$(basename "$loader")" --library-path "\$b/lib" "\$b/libexec/$p" "\$@"
EOF
  chmod +x "$bundle/bin/$p"
done
[ -n "$loader" ] || { echo "prepare-gpu-bundle: no loader found in ldd's output" >&2; exit 1; }
chmod +x "$bundle/lib/$(basename "$loader")"

{
  echo "conduit $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown) built $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(ldd --version | head -1 | awk '{print $NF}'), CUDA headers $(grep -m1 '^#define CUDA_VERSION' "$(grep "^CONDUIT_CUDA_INCLUDE_DIR:" "$build/CMakeCache.txt" | cut -d= -f2)/cuda.h" | awk '{print $3}')"
  echo "programs: ${programs[*]}"
  echo "libraries:"
  (cd "$bundle/lib" && ls -1)
} > "$bundle/MANIFEST"
# The bundle must run from here as it will there.
"$bundle/bin/conduit" --help > /dev/null
echo "prepare-gpu-bundle: $bundle ($(du -sh "$bundle" | cut -f1)); run bench/gpu-check.sh $bundle on the GPU machine" >&2
