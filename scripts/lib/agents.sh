# shellcheck shell=bash
# Sourced by scripts that run conduit-agents on this machine. Needs $bin (the build's bin/) and $work (a
# temp dir the caller removes); agents' pids collect in ${agent_pids[@]} for the caller to stop.
agent_pids=()

# new_token: 32 random bytes in hex as the agents' token, in $work/token.
new_token() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token"; }

# start_agent NAME PROVIDER MEMORY_CAP: sets $agent_url once the agent listens. Not in a $(...) subshell,
# so its pid stays in agent_pids for stop_agents.
start_agent() {
  mkdir -p "$work/$1"
  : > "$work/$1.out" # grepped below, maybe before the agent's redirection creates it
  NODE_NAME=$1 "$bin/conduit-agent" --listen 127.0.0.1:0 --providers "$2" --bind-address 127.0.0.1 \
    --token-file "$work/token" --data-dir "$work/$1" --memory-cap "$3" --log-level warn \
    --import-socket "$work/$1.sock" > "$work/$1.out" 2> "$work/$1.log" &
  agent_pids+=($!)
  agent_listening "$1" || { echo "agent $1 did not start: $(tail -n 3 "$work/$1.log")" >&2; return 1; }
}

# agent_listening NAME: waits up to 10 s for NAME's agent to print "listening HOST:PORT" to $work/NAME.out;
# sets $agent_url, or returns 1.
agent_listening() {
  for _ in $(seq 100); do
    if grep -q '^listening ' "$work/$1.out"; then
      agent_url=$(sed -n 's/^listening /http:\/\//p' "$work/$1.out")
      return
    fi
    sleep 0.1
  done
  return 1
}

# two_agents: a new token, then agents node-a and node-b (tcp, 1 GiB memory cap each); sets $a and $b to
# their URLs.
# shellcheck disable=SC2034 # a and b are for the caller
two_agents() {
  new_token
  start_agent node-a tcp 1GiB && a=$agent_url && start_agent node-b tcp 1GiB && b=$agent_url
}

# checkpoint_job [SAVE_AS]: 256 MiB of random bytes as node-a's checkpoint.bin and $work/jobs/checkpoint.yaml,
# the TransferJob that moves it into a new region on node-b over tcp, crc32c-verified (and saves it there as
# SAVE_AS).
# shellcheck disable=SC2120 # SAVE_AS is optional
checkpoint_job() {
  head -c $((256 << 20)) /dev/urandom > "$work/node-a/checkpoint.bin"
  mkdir -p "$work/jobs"
  local job="$(dirname "${BASH_SOURCE[0]}")/checkpoint-job.yaml"
  if [ -z "${1:-}" ]; then
    cp "$job" "$work/jobs/checkpoint.yaml"
  else
    # The same job, then saving the region to $1 on node-b.
    sed -e "s|^# CRC32C\.$|# CRC32C, then save the region to $1 on node-b.|" \
      -e "s|^        bytes: 268435456$|&\n      file: $1|" "$job" > "$work/jobs/checkpoint.yaml"
  fi
}

stop_agents() {
  for p in "${agent_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
