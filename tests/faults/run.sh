#!/usr/bin/env bash
# The fault suite: each scenario runs real conduit-agents and conduit-controller (local mode), moves
# >= 256 MiB with crc32c verification, injects one fault mid-transfer and checks the documented outcome
# (docs/reliability.md) and that the target bytes are right or the job Failed with a reason.
#
#   tests/faults/run.sh [BUILD_DIR]        (default: build)
#
# Prints the scenarios' "ok - ..." lines (with measured recovery times), "skip - ..." for a scenario this
# machine cannot run (no network namespaces, ...), and "faults: N passed, 0 failed"; on a failure, one line
# of why and exit 1. Needs root for the network-namespace scenarios (link-cut, lossy-link).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "${1:-$here/../../build}" 2> /dev/null && pwd)" || {
  echo "faults: FAILED: no build directory ${1:-build}" >&2
  echo "faults: 0 passed, 1 failed"
  exit 1
}
scenarios=(source_killed target_killed link_cut lossy_link byte_flip memory_cap)
limit=${FAULTS_SCENARIO_TIMEOUT:-180}
passed=0 skipped=0
t_all=$(date +%s)
for s in "${scenarios[@]}"; do
  t0=$(date +%s)
  out="$(mktemp)"
  err="$(mktemp)"
  timeout -k 10 "$limit" "$here/$s.sh" "$build" > "$out" 2> "$err"
  rc=$?
  grep -E '^(ok|skip) - ' "$out"
  case $rc in
    0)
      passed=$((passed + 1))
      echo "# $s: $(($(date +%s) - t0)) s"
      ;;
    77) skipped=$((skipped + 1)) ;;
    *)
      why="$(grep -m1 'FAILED' "$err" || tail -n 1 "$err")"
      [ $rc -ne 124 ] || why="$s did not finish within $limit s; ${why:-no output}"
      echo "faults: FAILED: ${why:-$s exited $rc}" >&2
      [ "${FAULTS_VERBOSE:-0}" != 1 ] || cat "$err" >&2
      rm -f "$out" "$err"
      echo "faults: $passed passed, 1 failed"
      exit 1
      ;;
  esac
  rm -f "$out" "$err"
done
echo "faults: $passed passed, 0 failed$([ $skipped -eq 0 ] || echo ", $skipped skipped") ($(($(date +%s) - t_all)) s)"
