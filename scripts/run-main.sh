#!/usr/bin/env bash
# The main job on one machine, no cluster: a 256 MiB one-sided RMA write between two processes over
# libfabric tcp and shm, verified by CRC32C. (Later: a real TransferJob through agents and the controller.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build >/dev/null
echo "== conduit-bench --self: two processes, one-sided writes, CRC32C-verified"
./build/bin/conduit-bench --self --provider tcp --size 256MiB --chunk 1MiB --window 16 --iterations 5
./build/bin/conduit-bench --self --provider shm --size 256MiB --chunk 16MiB --window 16 --iterations 5
