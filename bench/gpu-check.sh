#!/usr/bin/env bash
# GPU check: Conduit's CUDA memory on a real GPU machine that has a CUDA driver but no package registry.
# It runs the self-contained bundle bench/prepare-gpu-bundle.sh made on a build machine (binaries, their
# libraries, the loader: docs/gpu.md) and, in a couple of minutes:
#   1. probes CUDA through the bundle (driver, devices, DMA-BUF) and measures pinned host<->device copy
#      bandwidth (what cudaMemcpy between pinned memory and the GPU reaches);
#   2. runs the CUDA unit tests on the device (allocation, stream copier, device CRC32C);
#   3. starts two conduit-agent processes on loopback over tcp;ofi_rxm and moves SIZE (1 GiB) host -> GPU
#      region and GPU region -> GPU region, each timed without verify, its bytes compared by CRC32C through
#      both agents, then once more with the agents' own verify: crc32c; and over any transport whose
#      gpuDirect is dmabuf (none with Debian's libfabric: the script says why);
#   4. checks the paths are visible (gpuDirect in /v1/node, gpuPath/staged in the transfer status,
#      conduit_agent_staged_fallback_total) and that a missing driver is a clear 422;
# then prints each throughput next to the copy bandwidth. Any failure: exit 1 with one line of why.
#
# Usage: bench/gpu-check.sh [BUNDLE_DIR]       (default: build-gpu-bundle at the repository root)
# Environment: CONDUIT_GPU_CHECK_SIZE (default 1GiB); CONDUIT_CUDA_DRIVER (the libcuda.so.1 to load, read by
# the agents as their --cuda-driver option, by conduit-gpu-probe and conduit_cuda_tests alike; found with
# ldconfig otherwise); CONDUIT_GPU_CHECK_DOUBLE=1 runs every step against the CUDA host double, a
# host-memory stand-in device (the bundle's test builds conduit-agent-cuda-double,
# conduit-gpu-probe-cuda-double and conduit_cuda_double_tests), to test this script on a machine without a
# GPU (its figures mean nothing).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bundle=$(cd "${1:-${CONDUIT_GPU_BUNDLE:-$root/build-gpu-bundle}}" 2>/dev/null && pwd) || bundle=${1:-$root/build-gpu-bundle}
size=${CONDUIT_GPU_CHECK_SIZE:-1GiB}
bin=$bundle/bin
work=$(mktemp -d "${TMPDIR:-/tmp}/conduit-gpu-check.XXXXXX")
pids=()
agent_program=conduit-agent probe_program=conduit-gpu-probe tests_program=conduit_cuda_tests
if [ "${CONDUIT_GPU_CHECK_DOUBLE:-}" = 1 ]; then
  agent_program=conduit-agent-cuda-double probe_program=conduit-gpu-probe-cuda-double
  tests_program=conduit_cuda_double_tests
fi

cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "gpu-check: FAIL: $*" >&2
  exit 1
}
say() { echo "gpu-check: $*" >&2; }

[ -x "$bin/$agent_program" ] && [ -x "$bin/conduit" ] && [ -x "$bin/$probe_program" ] ||
  fail "no bundle at $bundle (make one on a build machine with bench/prepare-gpu-bundle.sh; docs/gpu.md)"
[ -f "$bundle/MANIFEST" ] && say "bundle: $(head -1 "$bundle/MANIFEST")"

# The bundle brings its own loader and libraries; the CUDA driver must come from this machine. The bundle's
# loader may not search where this distribution keeps it, so find it the system's way.
if [ -z "${CONDUIT_CUDA_DRIVER:-}" ] && [ "${CONDUIT_GPU_CHECK_DOUBLE:-}" != 1 ]; then
  driver=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}')
  if [ -z "$driver" ]; then
    for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /usr/local/nvidia/lib \
      /usr/lib/wsl/lib /usr/local/cuda/compat /usr/local/cuda/lib64; do
      if [ -e "$d/libcuda.so.1" ]; then driver=$d/libcuda.so.1 && break; fi
    done
  fi
  [ -n "$driver" ] && export CONDUIT_CUDA_DRIVER=$driver
fi
say "CUDA driver: ${CONDUIT_CUDA_DRIVER:-libcuda.so.1 (not found by ldconfig or in the usual places)}"

# 1. CUDA through the bundle, and the copy bandwidth to compare with.
probe=$("$bin/$probe_program" --bandwidth "$size" 2>&1)
rc=$?
printf '%s\n' "$probe" | sed 's/^/  /' >&2
if [ $rc -ne 0 ]; then
  why=$(printf '%s\n' "$probe" | sed -n 's/^error //p' | head -1)
  fail "${why:-conduit-gpu-probe exited $rc: $(printf '%s\n' "$probe" | tail -1)}"
fi
field() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
copy=$(printf '%s\n' "$probe" | grep '^copy ')
h2d=$(field "$copy" h2d)
d2h=$(field "$copy" d2h)
d2d=$(field "$copy" d2d)
[ -n "$h2d" ] || fail "conduit-gpu-probe measured no copy bandwidth"

# 2. The CUDA unit tests on the device: none may fail, the device ones may not skip.
if [ -x "$bin/$tests_program" ]; then
  "$bin/$tests_program" > "$work/unit.log" 2>&1 ||
    fail "$tests_program: $(grep -m1 -E '^\[  FAILED  \]|Failure' "$work/unit.log" || tail -1 "$work/unit.log")"
  grep -q "SKIPPED \] CudaStaging\.\|SKIPPED \] CudaDevice\." "$work/unit.log" &&
    fail "$tests_program skipped its device tests: $(grep -m1 -A1 'Skipped' "$work/unit.log" | tail -1)"
  say "$tests_program: $(grep -m1 -E '^\[  PASSED  \]' "$work/unit.log")"
fi

# 3. Two agents on loopback.
token=gpu-check-$RANDOM$RANDOM$RANDOM
printf '%s\n' "$token" > "$work/token"
export CONDUIT_TOKEN=$token
url_a="" url_b="" url_c="" url_d="" url_nodriver=""
start_agent() { # NAME PROVIDERS: starts an agent, sets url_NAME; the caller's environment goes with it
  local name=$1 providers=$2 line=""
  mkdir -p "$work/$name/data"
  "$bin/$agent_program" --listen 127.0.0.1:0 --providers "$providers" --bind-address 127.0.0.1 \
    --token-file "$work/token" --data-dir "$work/$name/data" --memory-cap 64GiB \
    --import-socket "$work/$name/import.sock" --log-level warn > "$work/$name/out" 2> "$work/$name/err" &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 1 300); do
    line=$(grep -m1 '^listening ' "$work/$name/out" 2>/dev/null) && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$line" ] || fail "agent $name did not start: $(tail -1 "$work/$name/err" 2>/dev/null)"
  printf -v "url_$name" '%s' "http://${line#listening }"
}
start_agent a tcp,shm
start_agent b tcp,shm
a=$url_a
b=$url_b
cli() { "$bin/conduit" --json "$@"; }

node=$(cli --agent "$a" node) || fail "GET /v1/node: $node"
gpu_direct=$(printf '%s' "$node" | tr -d ' \n' | grep -o '"gpuDirect":"[a-z]*"' | cut -d'"' -f4 | tr '\n' ' ')
say "gpuDirect per transport (tcp, shm): $gpu_direct"
printf '%s' "$gpu_direct" | grep -q "none" && fail "an agent reports gpuDirect none although CUDA is usable"

# SIZE bytes of random data in a file under a's data directory, loaded into a host region.
bytes=$(field "$copy" bytes)
[ $((bytes % 16777216)) -eq 0 ] || fail "CONDUIT_GPU_CHECK_SIZE must be a multiple of 16 MiB"
dd if=/dev/urandom of="$work/a/data/src.bin" bs=16M count=$((bytes / 16777216)) status=none 2>/dev/null ||
  fail "cannot write $bytes bytes of test data under $work"
cli --agent "$a" regions create src --file src.bin > /dev/null || fail "loading the source file into a host region"
cli --agent "$b" regions create gpu-b --bytes "$bytes" --memory cuda:0 > "$work/r" 2>&1 || fail "$(tail -1 "$work/r")"
cli --agent "$a" regions create gpu-a --bytes "$bytes" --memory cuda:0 > "$work/r" 2>&1 || fail "$(tail -1 "$work/r")"

checksum() { cli --agent "$1" regions checksum "$2" --slice 64MiB | tr -d ' \n' | grep -o '"crc32c":\[[^]]*\]'; }
rate_of() { sed -n 's/.*"throughputBytesPerSecond": *\([0-9.e+-]*\).*/\1/p' "$1" | head -1; }
gbps() { awk -v r="$1" 'BEGIN { printf "%.2f", r / 1e9 }'; }
results=()
# transfer NAME FROM TO: timed without verify, compared by CRC32C, then again with the agents' verify.
transfer() {
  local name=$1 from=$2 to=$3
  cli transfer --from "$from" --to "$to" --verify none --chunk 1MiB > "$work/$name.json" 2> "$work/$name.err" ||
    fail "$name: $(tail -1 "$work/$name.err")"
  local want got
  want=$(checksum "${from%/*}" "${from##*/}") || fail "$name: checksum of the source"
  got=$(checksum "${to%/*}" "${to##*/}") || fail "$name: checksum of the target"
  [ -n "$want" ] && [ "$want" = "$got" ] || fail "$name: the target's CRC32C differs from the source's"
  local rate path staged
  rate=$(rate_of "$work/$name.json")
  path=$(tr -d ' \n' < "$work/$name.json" | grep -o '"gpuPath":"[a-z]*"' | cut -d'"' -f4)
  staged=$(tr -d ' \n' < "$work/$name.json" | grep -o '"staged":[a-z]*' | cut -d: -f2)
  cli transfer --from "$from" --to "$to" --verify crc32c > "$work/$name.v.json" 2> "$work/$name.v.err" ||
    fail "$name with verify crc32c: $(tail -1 "$work/$name.v.err")"
  grep -q '"slicesResent": *0' "$work/$name.v.json" || fail "$name: verify re-sent slices of an identical copy"
  results+=("$(printf '%-34s %8s GB/s  (verified run %s GB/s)  source %-7s target staged=%s' \
    "$name" "$(gbps "$rate")" "$(gbps "$(rate_of "$work/$name.v.json")")" "$path" "$staged")")
}
transfer "host->GPU over tcp" "$a/src" "$b/gpu-b"
transfer "GPU->GPU over tcp" "$b/gpu-b" "$a/gpu-a"

# 4. Never silent: the staged ends were counted on both nodes.
for agent in "$a" "$b"; do
  count=$(curl -s "$agent/metrics" 2>/dev/null | awk '/^conduit_agent_staged_fallback_total /{print $2}')
  if [ -z "$count" ] && command -v python3 > /dev/null; then
    count=$(python3 -c "import urllib.request,sys; print([l.split()[1] for l in urllib.request.urlopen(sys.argv[1]+'/metrics').read().decode().splitlines() if l.startswith('conduit_agent_staged_fallback_total ')][0])" "$agent" 2>/dev/null)
  fi
  if printf '%s' "$gpu_direct" | grep -q '^staged'; then
    [ -z "$count" ] && say "no curl or python3 here: conduit_agent_staged_fallback_total not read"
    [ -n "$count" ] && [ "${count%.*}" -lt 1 ] && fail "$agent staged transfers but conduit_agent_staged_fallback_total is $count"
  fi
done

# DMA-BUF: wherever a transport of these agents registered device memory as a DMA-BUF, move GPU->GPU over it.
dmabuf_provider=$(printf '%s' "$node" | tr -d ' \n' | grep -o '{[^{}]*"gpuDirect":"dmabuf"[^{}]*}' | grep -o '"provider":"[^"]*"' | head -1 | cut -d'"' -f4)
if [ -n "$dmabuf_provider" ]; then
  # Two more agents with that transport as their primary (the one the CLI's grants use).
  start_agent c "$dmabuf_provider"
  start_agent d "$dmabuf_provider"
  for x in "$url_c" "$url_d"; do
    cli --agent "$x" regions create gpu --bytes "$bytes" --memory cuda:0 > "$work/r" 2>&1 || fail "$(tail -1 "$work/r")"
  done
  transfer "GPU->GPU over $dmabuf_provider" "$url_c/gpu" "$url_d/gpu"
  tr -d ' \n' < "$work/GPU->GPU over $dmabuf_provider.json" | grep -q '"gpuPath":"dmabuf"' ||
    fail "the transfer over $dmabuf_provider did not take the DMA-BUF path"
else
  why=$(printf '%s' "$node" | tr -d '\n' | grep -o '"gpuDirectDetail": *"[^"]*"' | head -1 | cut -d'"' -f4)
  results+=("DMA-BUF: not available with these providers ($why)")
fi

# A machine without the driver gets a clear 422, not a crash.
CONDUIT_CUDA_DRIVER=/nonexistent/libcuda.so.1 agent_program=conduit-agent start_agent nodriver tcp
out=$(cli --agent "$url_nodriver" regions create g --bytes 4096 --memory cuda:0 2>&1)
printf '%s' "$out" | grep -q "no CUDA device 0: no CUDA driver (/nonexistent/libcuda.so.1 not found" ||
  fail "without a driver, cuda:0 did not answer the no-driver reason: $out"

echo "gpu-check: OK ($size; $(printf '%s\n' "$probe" | sed -n 's/^device ordinal=0 .*name=//p'))"
printf '  %-34s %8s GB/s\n' "pinned cudaMemcpy host->device" "$(gbps "$h2d")" "pinned cudaMemcpy device->host" "$(gbps "$d2h")" \
  "cudaMemcpy device->device" "$(gbps "$d2d")"
for r in "${results[@]}"; do echo "  $r"; done
