#!/usr/bin/env bash
# Measures Conduit against what this machine can do, all in one run (the two vCPUs move between near and
# far placements every minute or so, so only figures from the same run compare):
#   memcpy    single-threaded memcpy of 1 GiB (the one-core ceiling for shm)
#   iperf3    one TCP stream on loopback (what a plain socket moves)
#   conduit   conduit-bench --self for tcp (1 MiB chunks) and shm (16 MiB chunks), 256 MiB, CRC32C-verified
# Usage: bench/baselines.sh [BUILD_DIR]   (ROUNDS=3 by default: each figure is the best median of ROUNDS)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bench=$build/bin/conduit-bench
rounds=${ROUNDS:-3}
[ -x "$bench" ] || { echo "baselines: build first (scripts/build.sh $build)" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "baselines: iperf3 missing (scripts/install-deps.sh)" >&2; exit 1; }

field() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
best() { printf '%s\n' "$@" | sort -g | tail -n1; }

port=$((20000 + RANDOM % 20000))
iperf3 -s -B 127.0.0.1 -p "$port" >/dev/null 2>&1 &
iperf_pid=$!
trap 'kill $iperf_pid 2>/dev/null || true' EXIT
sleep 0.5

memcpy=() iperf=() tcp=() shm=() tcp_rails=() shm_rails=()
for r in $(seq "$rounds"); do
  memcpy+=("$($bench --memcpy --size 1GiB --iterations 3 --json | field "['gbps_median']")")
  iperf+=("$(iperf3 -c 127.0.0.1 -p "$port" -t 3 -P 1 -J | field "['end']['sum_received']['bits_per_second']/8e9")")
  tcp+=("$($bench --self --provider tcp --size 256MiB --chunk 1MiB --window 16 --iterations 5 --json | field "['gbps_median']")")
  tcp_rails+=("$($bench --self --provider tcp --size 256MiB --chunk 1MiB --window 16 --rails 2 --iterations 5 --json | field "['gbps_median']")")
  shm+=("$($bench --self --provider shm --size 256MiB --chunk 16MiB --window 16 --iterations 5 --json | field "['gbps_median']")")
  shm_rails+=("$($bench --self --provider shm --size 256MiB --chunk 16MiB --window 16 --rails 2 --iterations 5 --json | field "['gbps_median']")")
done

m=$(best "${memcpy[@]}") i=$(best "${iperf[@]}") t=$(best "${tcp[@]}") s=$(best "${shm[@]}")
tr=$(best "${tcp_rails[@]}") sr=$(best "${shm_rails[@]}")
python3 - "$m" "$i" "$t" "$tr" "$s" "$sr" <<'PY'
import sys
m, i, t, tr, s, sr = map(float, sys.argv[1:])
print(f"memcpy 1GiB, one thread        {m:6.2f} GB/s")
print(f"iperf3 loopback, one stream    {i:6.2f} GB/s")
print(f"conduit tcp  1MiB chunks       {t:6.2f} GB/s   {t/i:4.2f}x iperf3   (target >= 1.5x)")
print(f"conduit tcp  1MiB, 2 rails     {tr:6.2f} GB/s   {tr/i:4.2f}x iperf3")
print(f"conduit shm 16MiB chunks       {s:6.2f} GB/s   {s/m:4.2f}x memcpy   (target >= 0.8x)")
print(f"conduit shm 16MiB, 2 rails     {sr:6.2f} GB/s   {sr/m:4.2f}x memcpy")
PY
