#!/usr/bin/env bash
# Runs weights_broadcast.py against four conduit-agents on loopback (node-a..node-d, tcp) and conduit-controller
# in local mode, all started here and stopped at the end (as scripts/run-main.sh does for two agents).
#
#   python/examples/run_weights_broadcast.sh [--steps N] [--mib M]      (after scripts/build.sh build)
#
# Python: the scenario suites' venv (scripts/python-env.sh: numpy, requests, PyYAML) with python/ on the path;
# set PYTHON to use another interpreter that has the SDK installed (pip install ./python).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
bin=$root/build/bin
[ -x "$bin/conduit-agent" ] && [ -x "$bin/conduit-controller" ] || {
  echo "no $bin/conduit-agent or conduit-controller: build first (scripts/build.sh build)" >&2
  exit 1
}
python=${PYTHON:-"$(scripts/python-env.sh)/bin/python"}

work=$(mktemp -d)
source scripts/lib/agents.sh
controller_pid=
cleanup() {
  [ -n "$controller_pid" ] && kill "$controller_pid" 2> /dev/null
  stop_agents
  rm -rf "$work"
}
trap cleanup EXIT
new_token
agents=()
for node in node-a node-b node-c node-d; do
  start_agent "$node" tcp "${AGENT_MEMORY_CAP:-3GiB}"
  agents+=("$node=$agent_url")
done
list=$(IFS=,; echo "${agents[*]}")
mkdir -p "$work/jobs"
"$bin/conduit-controller" --local-dir "$work/jobs" --agents "$list" --agent-token-file "$work/token" \
  --log-level warn 2> "$work/controller.log" &
controller_pid=$!
echo "agents: $list; controller on $work/jobs"

PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" "$python" "$root/python/examples/weights_broadcast.py" \
  --agents "$list" --jobs-dir "$work/jobs" --token-file "$work/token" --import-socket "$work/node-a.sock" "$@"
