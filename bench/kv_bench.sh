#!/usr/bin/env bash
# Small and scattered transfers (docs/kv-cache.md), in one run on this machine:
#   1. one op at a time on the transport alone against the bare provider (conduit-bench --latency), and
#      1,000 scattered 16 KiB blocks against one contiguous 16 MiB on both;
#   2. the same through two agents' API: POST /v1/transfers?waitSeconds with one op, submit to completion;
#      and 1,000 scattered 16 KiB blocks in one request against one contiguous 16 MiB transfer.
# Usage: bench/kv_bench.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
bin=$build/bin
work=$(mktemp -d)
source scripts/lib/agents.sh
trap 'stop_agents; rm -rf "$work"' EXIT
echo "bench-token" > "$work/token"

"$bin/conduit-bench" --latency --provider tcp --iterations "$rounds"
start_agent a tcp 1GiB && a=$agent_url
start_agent b tcp 1GiB && b=$agent_url
"$bin/conduit-bench" --agent-latency "$a,$b" --token-file "$work/token" --iterations "$rounds"
