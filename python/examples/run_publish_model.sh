#!/usr/bin/env bash
# Runs publish_model.py against two conduit-agents on loopback (node-a, node-b; tcp), started here and stopped
# at the end (as scripts/run-main.sh does).
#
#   python/examples/run_publish_model.sh [--steps N] [--width W]      (after scripts/build.sh build)
#
# Python: the scenario suites' venv (scripts/python-env.sh: numpy, torch) with python/ on the path; set PYTHON
# to use another interpreter that has the SDK and torch installed (pip install './python[torch]').
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
bin=$root/build/bin
[ -x "$bin/conduit-agent" ] || {
  echo "no $bin/conduit-agent: build first (scripts/build.sh build)" >&2
  exit 1
}
python=${PYTHON:-"$(scripts/python-env.sh)/bin/python"}

work=$(mktemp -d)
source scripts/lib/agents.sh
cleanup() {
  stop_agents
  rm -rf "$work"
}
trap cleanup EXIT
two_agents
echo "agents: node-a=$a node-b=$b"
PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" "$python" "$root/python/examples/publish_model.py" \
  --agents "$a,$b" --import-sockets "$work/node-a.sock,$work/node-b.sock" --token-file "$work/token" "$@"
