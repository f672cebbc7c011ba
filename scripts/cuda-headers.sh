#!/usr/bin/env bash
# Prints the directory of the CUDA driver headers (cuda.h) Conduit builds its CUDA code with, fetching them
# on first use from PyPI's nvidia-cuda-runtime-cu12 wheel into a cache outside the repository:
#   ${CONDUIT_CUDA_CACHE:-~/.cache/conduit-cuda}/nvidia-cuda-runtime-cu12-<version>/include
# Only the headers are kept: Conduit loads the driver (libcuda.so.1) with dlopen at run time and links no
# CUDA library, so a build made with these headers still runs (and says why) on machines without a GPU.
# A machine with a CUDA toolkit needs none of this (cmake finds $CUDA_HOME or /usr/local/cuda).
# Usage: cmake -B build -DCONDUIT_CUDA=ON -DCONDUIT_CUDA_INCLUDE_DIR="$(scripts/cuda-headers.sh)"
set -euo pipefail
version=${CONDUIT_CUDA_WHEEL_VERSION:-12.9.79}
dir=${CONDUIT_CUDA_CACHE:-$HOME/.cache/conduit-cuda}/nvidia-cuda-runtime-cu12-$version
if [ ! -f "$dir/.complete" ]; then
  echo "cuda-headers: fetching nvidia-cuda-runtime-cu12==$version into $dir" >&2
  python=/usr/bin/python3
  [ -x "$python" ] || python=$(command -v python3)
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  pip=("$python" -m pip)
  if ! "${pip[@]}" --version >/dev/null 2>&1; then
    # Debian's python3 has no pip module; a throwaway venv (python3-venv) brings one.
    "$python" -m venv "$work/venv" >&2
    pip=("$work/venv/bin/python" -m pip)
  fi
  "${pip[@]}" download --quiet --disable-pip-version-check --no-input --no-deps --only-binary=:all: \
    --dest "$work" "nvidia-cuda-runtime-cu12==$version" >&2
  wheel=$(ls "$work"/nvidia_cuda_runtime_cu12-*.whl)
  rm -rf "$dir"
  mkdir -p "$dir/include"
  "$python" - "$wheel" "$dir/include" <<'PY'
import sys, zipfile, os
wheel, out = sys.argv[1], sys.argv[2]
prefix = "nvidia/cuda_runtime/include/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            target = os.path.join(out, name[len(prefix):])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(name) as src, open(target, "wb") as dst:
                dst.write(src.read())
PY
  [ -f "$dir/include/cuda.h" ] || { echo "cuda-headers: the wheel has no cuda.h" >&2; exit 1; }
  touch "$dir/.complete"
fi
echo "$dir/include"
