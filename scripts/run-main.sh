#!/usr/bin/env bash
# The main job on one machine, no cluster: two conduit-agents on loopback; a 256 MiB checkpoint file is
# loaded into a region on node-a, moved one-sided over libfabric tcp into node-b with crc32c verification,
# saved to a file on node-b and compared byte for byte. Then the raw data plane figures from conduit-bench.
# (The TransferJob/controller path replaces the CLI step once the controller lands.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build >/dev/null
bin=$PWD/build/bin

work=$(mktemp -d)
source scripts/lib/agents.sh
trap 'stop_agents; rm -rf "$work"' EXIT
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token"
export CONDUIT_TOKEN_FILE=$work/token

start_agent node-a tcp 1GiB && a=$agent_url
start_agent node-b tcp 1GiB && b=$agent_url
echo "== agents: node-a at $a, node-b at $b"

head -c $((256 << 20)) /dev/urandom > "$work/node-a/checkpoint.bin"
"$bin/conduit" --agent "$a" regions create checkpoint --file checkpoint.bin
"$bin/conduit" --agent "$b" regions create checkpoint --bytes 256MiB
echo "== conduit transfer node-a/checkpoint -> node-b/checkpoint (one-sided writes, crc32c verified)"
"$bin/conduit" transfer --from "$a/checkpoint" --to "$b/checkpoint" --verify crc32c
"$bin/conduit" --agent "$b" regions save checkpoint --file restored.bin
if cmp -s "$work/node-a/checkpoint.bin" "$work/node-b/restored.bin"; then
  echo "== node-b/restored.bin is byte-identical to node-a/checkpoint.bin"
else
  echo "run-main: restored file differs" >&2
  exit 1
fi

echo "== conduit-bench --self: the raw data plane, two processes, CRC32C-verified"
"$bin/conduit-bench" --self --provider tcp --size 256MiB --chunk 1MiB --window 16 --iterations 5
"$bin/conduit-bench" --self --provider shm --size 256MiB --chunk 16MiB --window 16 --iterations 5
