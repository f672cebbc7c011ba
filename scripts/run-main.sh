#!/usr/bin/env bash
# The main job on one machine, no cluster: two conduit-agents on loopback and conduit-controller in local mode
# on a directory of YAML objects. A TransferJob there loads a 256 MiB checkpoint file into a region on node-a,
# moves it one-sided over libfabric tcp into a new region on node-b with crc32c verification and saves it to a
# file on node-b; the controller writes progress into the job's file and exits when the job is done. The saved
# file is compared byte for byte. Then the raw data plane figures from conduit-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
echo "== building conduit-agent, conduit-controller and conduit-bench (the first build takes a few minutes)"
scripts/build.sh build -- conduit-agent conduit-controller conduit-bench
bin=$PWD/build/bin

work=$(mktemp -d)
source scripts/lib/agents.sh
trap 'stop_agents; rm -rf "$work"' EXIT
two_agents
export CONDUIT_TOKEN_FILE=$work/token
echo "== agents: node-a at $a, node-b at $b"

checkpoint_job restored.bin
echo "== TransferJob $work/jobs/checkpoint.yaml: node-a checkpoint.bin -> node-b/checkpoint (crc32c verified)"
echo "== conduit-controller --local-dir $work/jobs (progress below; status is written into the job's file)"
# --once-job: exits 0 when the job Succeeded, 1 when it Failed, with one summary line on stdout.
rc=0
timeout 600 "$bin/conduit-controller" --local-dir "$work/jobs" --agents "node-a=$a,node-b=$b" \
  --agent-token-file "$work/token" --once-job checkpoint || rc=$?
echo "== final status (from $work/jobs/checkpoint.yaml)"
sed -n '/^status:/,$p' "$work/jobs/checkpoint.yaml"
if [ "$rc" -ne 0 ]; then
  echo "run-main: the TransferJob did not succeed (conduit-controller exit $rc)" >&2
  exit 1
fi
if cmp -s "$work/node-a/checkpoint.bin" "$work/node-b/restored.bin"; then
  echo "== node-b/restored.bin is byte-identical to node-a/checkpoint.bin"
else
  echo "run-main: restored file differs" >&2
  exit 1
fi

echo "== conduit-bench --self: the raw data plane, two processes, CRC32C-verified"
"$bin/conduit-bench" --self --provider tcp --size 256MiB --chunk 1MiB --window 16 --iterations 5
"$bin/conduit-bench" --self --provider shm --size 256MiB --chunk 16MiB --window 16 --iterations 5
