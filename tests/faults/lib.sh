# shellcheck shell=bash
# Sourced by the fault scenarios (tests/faults/*.sh): real conduit-agents (on loopback, or each in its own
# network namespace where a link matters), conduit-controller in local mode on a directory of TransferJob
# YAML files, and helpers to inject a fault mid-transfer, wait for an outcome with a bound, and compare the
# bytes a target ends up with against the source file.
#
#   fault_init NAME [BUILD_DIR]     work dir, token, cleanup trap (kills what was started, removes netns)
#   fault_ok TEXT / fault_fail TEXT / fault_skip TEXT
#   fault_up_nodes NODE...          nodes as network namespaces (scripts/lib/netns.sh); skips without them
#   agent_start NODE [ARGS...]      start (or restart on the same port) NODE's agent, in NODE's namespace
#                                   after fault_up_nodes; sets agent_url[NODE]
#   agent_kill NODE                 SIGKILL
#   api NODE METHOD PATH [BODY]     the agent's REST API (prints the body); api_code: the HTTP status only
#   newest_transfer NODE            the agent's newest transfer (JSON); transfer_past NODE BYTES: running
#                                   and past BYTES; transfer_seconds JSON: its startedAt -> finishedAt
#   metric NODE NAME                a sample of the agent's /metrics
#   agent_healthy NODE              the agent answers /healthz with status ok
#   controller_start                conduit-controller --local-dir $work/jobs for every started agent
#   setup_two_nodes ARGS...         agents node-a and node-b (each with ARGS), a 256 MiB node-a/weights.bin,
#                                   the controller
#   job_apply NAME <<YAML           write $work/jobs/NAME.yaml; job_get NAME JQ: a field of the stored job;
#                                   job_phase, job_condition NAME TYPE, job_events NAME (the controller's)
#   file_job NAME FILE REGION [BYTES] [SPEC...]   job_apply a job: node-a's FILE -> node-b's REGION
#   job_finished NAME               Succeeded or Failed; job_must_succeed NAME WHAT, job_must_be_verified
#                                   NAME, job_must_have_retried NAME REASON: fault_fail otherwise
#   wait_for SECONDS WHAT CMD...    poll CMD every 0.1 s until it succeeds, else fail with WHAT
#   random_file PATH MIB            random bytes (from a seeded openssl stream: fast)
#   save_and_compare NODE REGION SOURCE_FILE   save the region under the node's data dir and cmp it
#   now / elapsed T0 / seconds_between T0 T1   wall-clock seconds (ns precision), 2 decimals
#
# FAULTS_KEEP=1 keeps the work directory (logs, job files); FAULTS_VERBOSE=1 prints the logs' tails on failure.
# Every scenario prints "ok - NAME: ..." lines and ends with exit 0 (passed), 1 (failed, one line of why on
# stderr) or 77 (skipped, one line of why on stdout).

set -uo pipefail

fault_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MiB=$((1 << 20))
declare -A agent_url=() agent_pid=() agent_args=()
agent_nodes=()
fault_pids=()
fault_netns=0
controller_pid=""

# shellcheck source=../../scripts/lib/netns.sh
source "$fault_root/scripts/lib/netns.sh"

fault_init() {
  fault_name="$1"
  local build="${2:-$fault_root/build}"
  [ -d "$build" ] || fault_fail "no build directory $build"
  bin="$(cd "$build" && pwd)/bin"
  for b in conduit-agent conduit-controller; do [ -x "$bin/$b" ] || fault_fail "no $bin/$b: build first"; done
  work="$(mktemp -d "${TMPDIR:-/tmp}/conduit-fault-$fault_name.XXXXXX")"
  mkdir -p "$work/jobs"
  (umask 077; openssl rand -hex 32 > "$work/token")
  token="$(cat "$work/token")"
  trap fault_cleanup EXIT
  trap 'exit 130' INT TERM
}

fault_cleanup() {
  local rc=$?
  trap - EXIT
  [ "${FAULTS_KEEP:-0}" != 1 ] || echo "kept ${work:-}" >&2
  exec 2> /dev/null  # no "Killed" job notices for the processes stopped here
  [ -z "$controller_pid" ] || kill "$controller_pid" 2> /dev/null
  local p
  for p in "${fault_pids[@]}"; do kill -9 "$p" 2> /dev/null; done
  wait 2> /dev/null
  [ "$fault_netns" -eq 0 ] || netns_down
  [ "${FAULTS_KEEP:-0}" = 1 ] || [ -z "${work:-}" ] || rm -rf "$work"
  exit "$rc"
}

fault_ok() { echo "ok - $fault_name: $*"; }
fault_fail() {
  echo "$fault_name: FAILED: $*" >&2
  if [ -n "${work:-}" ] && [ "${FAULTS_VERBOSE:-0}" = 1 ]; then
    local f
    for f in "$work"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }; done
  fi
  exit 1
}
fault_skip() {
  echo "skip - $fault_name: $*"
  exit 77
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
seconds_between() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# Random but reproducible bytes, ~1 GB/s (AES-CTR keystream of a fixed key): no 256 MiB /dev/urandom wait.
random_file() {
  openssl enc -aes-128-ctr -nosalt -pass "pass:conduit-faults-$2-$(basename "$1")" -pbkdf2 -iter 1 \
    < /dev/zero 2> /dev/null | head -c $(($2 * MiB)) > "$1"
  [ "$(stat -c %s "$1")" -eq $(($2 * MiB)) ] || fault_fail "could not write $1"
}

fault_up_nodes() {
  netns_supported || fault_skip "cannot create network namespaces here (needs root and a working 'ip netns')"
  fault_netns=1
  netns_up "$@" || fault_fail "could not create the network namespaces for $*"
}

# agent_start NODE [ARGS...]: the first start picks a free port; a restart reuses NODE's port and arguments,
# as a DaemonSet pod restarted on the same node would.
agent_start() {
  local node="$1"
  shift
  [ $# -eq 0 ] || agent_args[$node]="$*"
  local host=127.0.0.1 port=0
  [ "$fault_netns" -eq 0 ] || host="${netns_addr[$node]}"
  if [ -n "${agent_url[$node]:-}" ]; then
    port="${agent_url[$node]##*:}"
  else
    agent_nodes+=("$node")
  fi
  mkdir -p "$work/$node"
  : > "$work/$node.out"
  local -a cmd=("$bin/conduit-agent" --listen "$host:$port" --providers tcp --bind-address "$host"
    --token-file "$work/token" --data-dir "$work/$node" --import-socket "$work/$node.sock"
    --log-level "${FAULTS_AGENT_LOG:-info}")
  # shellcheck disable=SC2206
  cmd+=(${agent_args[$node]:-})
  if [ "$fault_netns" -eq 1 ]; then
    # Not through the netns_exec function: in the background that runs in a subshell, and $! would be the
    # subshell's pid, not the agent's (`ip netns exec` execs the agent in its own place).
    NODE_NAME=$node ip netns exec "${netns_name[$node]}" "${cmd[@]}" > "$work/$node.out" 2>> "$work/$node.log" &
  else
    NODE_NAME=$node "${cmd[@]}" > "$work/$node.out" 2>> "$work/$node.log" &
  fi
  agent_pid[$node]=$!
  fault_pids+=($!)
  for _ in $(seq 150); do
    if grep -q '^listening ' "$work/$node.out"; then
      agent_url[$node]="http://$(sed -n 's/^listening //p' "$work/$node.out")"
      return 0
    fi
    kill -0 "${agent_pid[$node]}" 2> /dev/null || break  # exited (its port taken, a bad flag, ...)
    sleep 0.1
  done
  fault_fail "agent $node did not start: $(tail -n 2 "$work/$node.log" | tr '\n' ' ')"
}

# agent_healthy NODE: the agent answers /healthz with status ok.
agent_healthy() { [ "$(curl -s --max-time 5 "${agent_url[$1]}/healthz" | jq -r .status 2> /dev/null)" = ok ]; }

agent_kill() {
  kill -9 "${agent_pid[$1]}" 2> /dev/null
  wait "${agent_pid[$1]}" 2> /dev/null
  return 0
}

api() {
  curl -s --max-time "${API_TIMEOUT:-30}" -X "$2" -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' ${4:+--data "$4"} "${agent_url[$1]}$3"
}
api_code() {
  curl -s -o /dev/null -w '%{http_code}' --max-time "${API_TIMEOUT:-30}" -X "$2" \
    -H "Authorization: Bearer $token" -H 'Content-Type: application/json' ${4:+--data "$4"} "${agent_url[$1]}$3"
}
# The source agent's newest transfer (GET /v1/transfers is newest first), or {} when it does not answer.
newest_transfer() { api "$1" GET /v1/transfers 2> /dev/null | jq -c '.items[0] // {}' 2> /dev/null || echo '{}'; }
metric() {
  curl -s --max-time 10 "${agent_url[$1]}/metrics" | awk -v m="$2" '$1 == m { print $2; f = 1 } END { if (!f) print 0 }'
}

controller_start() {
  local agents="" n
  for n in "${agent_nodes[@]}"; do agents+="${agents:+,}$n=${agent_url[$n]}"; done
  "$bin/conduit-controller" --local-dir "$work/jobs" --agents "$agents" --agent-token-file "$work/token" \
    --log-level info > "$work/controller.out" 2>> "$work/controller.log" &
  controller_pid=$!
  fault_pids+=($!)
}

# setup_two_nodes ARGS...: agents node-a and node-b (each with ARGS), 256 MiB of random bytes as node-a's
# weights.bin, and the controller: where most scenarios start.
setup_two_nodes() {
  local n
  for n in node-a node-b; do agent_start "$n" "$@"; done
  random_file "$work/node-a/weights.bin" 256
  controller_start
}

job_apply() { cat > "$work/jobs/.$1.tmp" && mv "$work/jobs/.$1.tmp" "$work/jobs/$1.yaml"; }
# job_get NAME JQ_FILTER: from the job's YAML file, which the controller rewrites atomically (rename).
job_get() {
  python3 - "$work/jobs/$1.yaml" "$2" << 'EOF' 2> /dev/null
import json, subprocess, sys, yaml
with open(sys.argv[1]) as f:
    doc = yaml.safe_load(f) or {}
out = subprocess.run(["jq", "-r", sys.argv[2]], input=json.dumps(doc, default=str), capture_output=True, text=True)
sys.stdout.write(out.stdout)
EOF
}
job_phase() { job_get "$1" '.status.phase // ""'; }
job_condition() { job_get "$1" ".status.conditions[]? | select(.type == \"$2\") | \"\(.status) \(.reason): \(.message)\""; }
# The controller's Events for a job (local mode logs them: event job=... type=... reason=... message=...).
job_events() { grep 'msg="event"' "$work/controller.log" | grep -E "job=([^ ]*/)?$1 " | sed 's/^.*type=/type=/'; }

# file_job NAME FILE REGION [BYTES] [SPEC...]: job_apply NAME moving node-a's FILE into REGION on node-b
# (created with BYTES unless BYTES is ""), over tcp, verified crc32c, plus SPEC lines ("backoffLimit: 6").
file_job() {
  local name="$1" file="$2" region="$3" create="" spec="" line
  shift 3
  [ -z "${1:-}" ] || create=$'\n'"      create:"$'\n'"        bytes: $1"
  [ $# -eq 0 ] || shift
  for line in "$@"; do spec+=$'\n'"  $line"; done
  job_apply "$name" << YAML
apiVersion: conduit.dev/v1alpha1
kind: TransferJob
metadata:
  name: $name
spec:
  source:
    node: node-a
    file: $file
  targets:
    - node: node-b
      region: $region$create
  transport:
    type: tcp
  verify: crc32c$spec
YAML
}

# job_finished NAME: the job's phase is Succeeded or Failed.
job_finished() { case "$(job_phase "$1")" in Succeeded | Failed) return 0 ;; *) return 1 ;; esac; }
# job_must_succeed NAME WHAT: fault_fail "WHAT PHASE: the Failed condition" unless the job Succeeded.
job_must_succeed() {
  local phase
  phase="$(job_phase "$1")"
  [ "$phase" = Succeeded ] || fault_fail "$2 $phase: $(job_condition "$1" Failed)"
}
# job_must_be_verified NAME: fault_fail unless its Complete condition is True TransferSucceeded, verified crc32c.
job_must_be_verified() {
  job_condition "$1" Complete | grep -q '^True TransferSucceeded: .*verified crc32c' \
    || fault_fail "Complete condition does not say verified: $(job_condition "$1" Complete)"
}
# job_must_have_retried NAME REASON: fault_fail unless the controller logged a Retrying event naming REASON.
job_must_have_retried() {
  job_events "$1" | grep -q "reason=Retrying.*$2" \
    || fault_fail "no Retrying event naming $2: $(job_events "$1" | tr '\n' ' ')"
}

wait_for() {
  local limit="$1" what="$2"
  shift 2
  local deadline
  deadline=$(awk -v n="$(now)" -v l="$limit" 'BEGIN { printf "%.3f", n + l }')
  while :; do
    "$@" && return 0
    if awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n > d) }'; then
      fault_fail "$what: not within ${limit} s"
    fi
    sleep 0.1
  done
}

# transfer_past NODE BYTES: the agent's newest transfer is running and has moved BYTES.
transfer_past() {
  local t
  t="$(newest_transfer "$1")"
  [ "$(jq -r '.state // ""' <<< "$t")" = Running ] && [ "$(jq -r '.bytesDone // 0' <<< "$t")" -ge "$2" ]
}

# transfer_seconds JSON: a finished agent transfer's startedAt -> finishedAt, in seconds (the agent's clock).
transfer_seconds() {
  python3 -c '
import datetime, json, sys
t = json.loads(sys.argv[1])
at = lambda s: datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
print("%.2f" % (at(t["finishedAt"]) - at(t["startedAt"])).total_seconds())' "$1" 2> /dev/null || echo "?"
}

save_and_compare() {
  local node="$1" region="$2" src="$3" out
  out="$(api "$node" POST "/v1/regions/$region/save" "{\"file\":\"saved-$region.bin\"}")"
  [ "$(jq -r '.bytes // 0' <<< "$out" 2> /dev/null)" -gt 0 ] || fault_fail "saving $region on $node: $out"
  local size
  size="$(stat -c %s "$src")"
  cmp -s -n "$size" "$src" "$work/$node/saved-$region.bin" \
    || fault_fail "region $region on $node differs from $src: $(cmp -n "$size" "$src" "$work/$node/saved-$region.bin" 2>&1 | head -1)"
  rm -f "$work/$node/saved-$region.bin"
}
