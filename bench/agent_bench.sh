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
source scripts/lib/agents.sh
trap 'stop_agents; rm -rf "$work"' EXIT
echo "bench-token" > "$work/token"
export CONDUIT_TOKEN=bench-token

start_agent a "$provider" 3GiB && a=$agent_url
start_agent b "$provider" 3GiB && b=$agent_url
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
