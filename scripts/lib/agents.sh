# Sourced by scripts that run conduit-agents on this machine. Needs $bin (the build's bin/) and $work (a
# temp dir the caller removes); agents' pids collect in ${agent_pids[@]} for the caller to stop.
agent_pids=()

# start_agent NAME PROVIDER MEMORY_CAP: sets $agent_url once the agent listens. Not in a $(...) subshell,
# so its pid stays in agent_pids for stop_agents.
start_agent() {
  mkdir -p "$work/$1"
  NODE_NAME=$1 "$bin/conduit-agent" --listen 127.0.0.1:0 --providers "$2" --bind-address 127.0.0.1 \
    --token-file "$work/token" --data-dir "$work/$1" --memory-cap "$3" --log-level warn \
    --import-socket "$work/$1.sock" > "$work/$1.out" 2> "$work/$1.log" &
  agent_pids+=($!)
  for _ in $(seq 100); do
    if grep -q '^listening ' "$work/$1.out"; then
      agent_url=$(sed -n 's/^listening /http:\/\//p' "$work/$1.out")
      return
    fi
    sleep 0.1
  done
  echo "agent $1 did not start: $(tail -n 3 "$work/$1.log")" >&2
  return 1
}

stop_agents() {
  for p in "${agent_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
