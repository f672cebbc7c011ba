#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ (clang, ASan + UBSan, coverage in every library they link) and runs
# each for SECONDS over a copy of its seed corpus fuzz/corpus/<target>/ (the repository's stays as it is),
# with a fixed -seed and its dictionary from fuzz/dict/, one target per core at a time (CONDUIT_FUZZ_JOBS).
# Any crash, leak, undefined behaviour, timeout or out-of-memory fails the run and prints the path of the
# input that caused it (kept under BUILD_DIR/fuzz-artifacts/), which `BUILD_DIR/bin/fuzz_<target> <path>`
# replays.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET (20)] [BUILD_DIR (build-fuzz)] [TARGET...(all)]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
build=${2:-build-fuzz}
shift $(($# < 2 ? $# : 2))
cxx=${CONDUIT_FUZZ_CXX:-clang++-14}
command -v "$cxx" > /dev/null || { echo "fuzz: $cxx not found (scripts/install-deps.sh installs clang-14)" >&2; exit 1; }

if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for f in fuzz/*_fuzz.cpp; do targets+=("$(basename "$f" _fuzz.cpp)"); done
fi

# A tree already configured with -DCONDUIT_FUZZ=ON is used as it is: scripts/test.sh's ASan tree builds the
# fuzzers with its tests (same flags as below, plus the tests and CUDA), so they are not built a second time.
if ! grep -qx 'CONDUIT_FUZZ:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  # Debug keeps assertions (nlohmann's among them) on; -O1 keeps the fuzzers fast enough.
  cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link" \
    -DCONDUIT_SANITIZE=ON -DCONDUIT_FUZZ=ON -DBUILD_TESTING=OFF -DCONDUIT_CUDA=OFF > /dev/null
fi
ninja -C "$build" conduit-fuzz-all

dict_for() {
  case "$1" in
    remote_key | agent_request | watch_event | transfer_job | safetensors_header) echo fuzz/dict/json.dict ;;
    yaml_json | kubeconfig) echo fuzz/dict/yaml.dict ;;
    checksum_query) echo fuzz/dict/query.dict ;;
  esac
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:${ASAN_OPTIONS:-}
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}
work="$(mktemp -d "${TMPDIR:-/tmp}/conduit-fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT
repo=$PWD
build=$(cd "$build" && pwd)
artifacts="$build/fuzz-artifacts"
mkdir -p "$artifacts"
# The targets run in $work: libinfinipath (pulled in by libfabric) writes a *.btr backtrace file into the
# current directory when a target aborts, and that must not land in the repository.
cd "$work"
# One target per core at a time: each is single-threaded, and a target's -max_total_time is its own
# whichever others run beside it.
fuzz_one() {
  local t=$1 dict log rc=0
  mkdir -p "$work/$t"
  [ -d "$repo/fuzz/corpus/$t" ] && cp -R "$repo/fuzz/corpus/$t/." "$work/$t/"
  dict=$(dict_for "$t")
  dict=${dict:+$repo/$dict}
  log="$work/$t.log"
  "$build/bin/fuzz_$t" "$work/$t" -seed=1 -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=8192 -print_final_stats=1 -artifact_prefix="$artifacts/$t-" ${dict:+-dict="$dict"} \
    > "$log" 2>&1 || rc=$?
  echo "$rc" > "$work/$t.rc"
}
for t in "${targets[@]}"; do
  [ -x "$build/bin/fuzz_$t" ] || { echo "fuzz: no target $t" >&2; exit 1; }
done
parallel=${CONDUIT_FUZZ_JOBS:-$(nproc)}
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$parallel" ]; then
    wait -n
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait
failed=0
for t in "${targets[@]}"; do
  log="$work/$t.log"
  rc=$(cat "$work/$t.rc")
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  cov=$(grep -E '^#[0-9]+' "$log" | tail -n1 | grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' || true)
  if [ "$rc" -ne 0 ]; then
    failed=$((failed + 1))
    input=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n1)
    cp "$log" "$artifacts/$t.log"
    echo "FAIL - fuzz_$t (exit $rc) after ${runs:-?} runs: $(grep -m1 -E 'ERROR|SUMMARY|runtime error' "$log" || tail -n1 "$log")"
    echo "       input: ${input:-none written}; log: $artifacts/$t.log"
  else
    echo "ok - fuzz_$t: ${runs:-?} runs in ${seconds}s, ${cov:-no stats}"
  fi
done
[ "$failed" -eq 0 ] || { echo "fuzz: $failed of ${#targets[@]} targets failed"; exit 1; }
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, no crash"
