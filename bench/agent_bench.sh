#!/usr/bin/env bash
# Agent figures, in one run on this machine:
#   1. a 1 GiB region moved agent to agent through the REST API, against conduit-bench --self of the same
#      size and provider (the ratio is what the agent's control path and segmenting cost);
#   2. GET /v1/transfers/{id} latency at ~200 requests/s from wrk (one connection, 5 ms between requests).
# Usage: bench/agent_bench.sh [BUILD_DIR] [PROVIDER]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
provider=${2:-tcp}
bin=$build/bin
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
echo "bench-token" > "$work/token"
export CONDUIT_TOKEN=bench-token

start_agent() {  # name -> prints URL
  mkdir -p "$work/$1"
  "$bin/conduit-agent" --listen 127.0.0.1:0 --providers "$provider" --bind-address 127.0.0.1 \
    --token-file "$work/token" --data-dir "$work/$1" --memory-cap 3GiB --log-level warn \
    --import-socket "$work/$1.sock" > "$work/$1.out" 2> "$work/$1.log" &
  pids+=($!)
  for _ in $(seq 100); do
    if grep -q '^listening ' "$work/$1.out"; then sed -n 's/^listening /http:\/\//p' "$work/$1.out"; return; fi
    sleep 0.1
  done
  echo "agent $1 did not start: $(cat "$work/$1.log")" >&2; exit 1
}
a=$(start_agent a)
b=$(start_agent b)
CONDUIT_AGENT=$a "$bin/conduit" regions create src --bytes 1GiB >/dev/null
CONDUIT_AGENT=$b "$bin/conduit" regions create dst --bytes 1GiB >/dev/null

best_agent=0
for _ in 1 2 3; do
  out=$("$bin/conduit" --json transfer --from "$a/src" --to "$b/dst" --verify none)
  gbps=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['throughputBytesPerSecond']/1e9)" "$out")
  best_agent=$(python3 -c "print(max($best_agent, $gbps))")
done
best_bench=0
for _ in 1 2 3; do
  gbps=$("$bin/conduit-bench" --self --provider "$provider" --size 1GiB --iterations 3 --json |
    python3 -c "import json,sys; print(json.load(sys.stdin)['gbps_median'])")
  best_bench=$(python3 -c "print(max($best_bench, $gbps))")
done
python3 -c "a,b=$best_agent,$best_bench; print(f'agent-to-agent 1GiB ($provider): {a:.2f} GB/s; conduit-bench: {b:.2f} GB/s; ratio {a/b:.2f}x (target >= 0.9x)')"

# A finished transfer to query.
id=$("$bin/conduit" --json transfer --from "$a/src" --to "$b/dst" --verify none |
  python3 -c "import json,sys; print(json.load(sys.stdin)['id'])")
cat > "$work/get.lua" <<LUA
wrk.headers["Authorization"] = "Bearer bench-token"
function delay() return 5 end
LUA
echo "GET /v1/transfers/$id, 1 connection, 5 ms between requests (~200 req/s), 10 s:"
wrk -t1 -c1 -d10s --latency -s "$work/get.lua" "$a/v1/transfers/$id" | grep -E "Requests/sec|50%|90%|99%|Non-2xx" || true
