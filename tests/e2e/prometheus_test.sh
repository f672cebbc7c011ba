#!/usr/bin/env bash
# The dashboards and alerts against a real Prometheus (Debian `prometheus`) scraping two real conduit-agents
# and a real conduit-controller in local mode, with metrics/alerts.yaml loaded as a rule file. One
# TransferJob succeeds (256 MiB, crc32c-verified) and one fails (its target node's agent is down); then,
# through Prometheus's HTTP API: every dashboard variable resolves, every panel query parses and returns data,
# every alert rule loads and evaluates, ConduitTransferFailures fires (hold times cut to 0s), and a misspelt query is
# caught. Last, docs/observability.md and metrics/metric_names.txt are checked against what the binaries
# expose (scripts/check-observability.sh).
# Usage: tests/e2e/prometheus_test.sh [BUILD_DIR] (default: build)
# Prints "ok - ..." per check and "prometheus test: N passed, M failed"; exit 1 on any failure.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-build}"
[[ $build = /* ]] || build="$root/$build"
bin="$build/bin"
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok - $*"; }
fail() { failed=$((failed + 1)); echo "FAIL - $*" >&2; }
finish() { echo "prometheus test: $passed passed, $failed failed ($SECONDS s)"; [ "$failed" -eq 0 ]; }
die() { fail "$*"; finish; exit 1; }

for tool in prometheus promtool curl jq ss; do
  command -v "$tool" > /dev/null || die "$tool is not installed (scripts/install-deps.sh)"
done
for b in conduit-agent conduit-controller; do [ -x "$bin/$b" ] || die "$bin/$b is not built"; done

work="$(mktemp -d "${TMPDIR:-/tmp}/conduit-prometheus-e2e.XXXXXX")"
prom_pid=""
controller_pid=""
# shellcheck source=../../scripts/lib/agents.sh
source "$root/scripts/lib/agents.sh"
cleanup() {
  for p in $prom_pid $controller_pid; do kill "$p" 2> /dev/null; done
  stop_agents # also waits for Prometheus and the controller
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A port nothing listens on, below the kernel's ephemeral range (32768-60999 by default), so no outgoing
# connection or port-0 listener takes it between now and its use.
free_port() {
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 12000))
    if [ -z "$(ss -Htln "sport = :$p" 2> /dev/null)" ]; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

# ---- the files themselves
if promtool check rules "$root/metrics/alerts.yaml" > "$work/rules.out" 2>&1; then
  pass "promtool check rules metrics/alerts.yaml: $(grep -o '[0-9]* rules found' "$work/rules.out")"
else
  fail "promtool check rules: $(tr '\n' ' ' < "$work/rules.out")"
fi
dashboards=("$root"/metrics/dashboards/*.json)
[ -e "${dashboards[0]}" ] || die "no dashboards in metrics/dashboards"
for dash in "${dashboards[@]}"; do
  name="$(basename "$dash")"
  # Grafana's shape: a prometheus datasource variable that every panel and target uses, and the
  # namespace/node/transport variables.
  if why="$(jq -r '
      def ds: .datasource.uid == "${datasource}" and .datasource.type == "prometheus";
      [ (if .schemaVersion >= 36 then empty else "schemaVersion \(.schemaVersion)" end),
        (if any(.templating.list[]; .name == "datasource" and .type == "datasource" and .query == "prometheus")
         then empty else "no prometheus datasource variable" end),
        (["namespace", "node", "transport"][] as $v
         | if any(.templating.list[]; .name == $v and .type == "query" and ds) then empty else "no query variable \($v)" end),
        (.panels[] | select(ds | not) | "panel \(.title) does not use ${datasource}"),
        (.panels[] | .title as $t | .targets[] | select(ds | not) | "a target of \($t) does not use ${datasource}"),
        (if ([.panels[].targets[]] | length) > 0 then empty else "no targets" end)
      ] | join("; ")' "$dash" 2>&1)" && [ -z "$why" ]; then
    pass "$name: Grafana dashboard JSON with \${datasource}, namespace, node and transport variables"
  else
    fail "$name: ${why:-not valid JSON}"
  fi
done

# ---- two agents, a Prometheus scraping them and the controller, then the controller with two jobs
two_agents || die "agents node-a and node-b did not start"
dead_port="$(free_port)" && ctl_port="$(free_port)" && prom_port="$(free_port)" || die "no free port"
prom="http://127.0.0.1:$prom_port"

# The shipped rules with every hold time ("for:") cut to 0s: the expressions and labels are the shipped ones,
# and an alert whose condition holds fires at its next evaluation instead of minutes later.
sed -E 's/^([[:space:]]*)for: .*/\1for: 0s/' "$root/metrics/alerts.yaml" > "$work/alerts.yaml"
sed -e "s|@ALERTS@|$work/alerts.yaml|" -e "s|@AGENT_A@|${a#http://}|" -e "s|@AGENT_B@|${b#http://}|" \
  -e "s|@CONTROLLER@|127.0.0.1:$ctl_port|" "$root/tests/e2e/fixtures/prometheus.yml.in" > "$work/prometheus.yml"
if promtool check config "$work/prometheus.yml" > "$work/config.out" 2>&1; then
  pass "promtool check config: scrape config with metrics/alerts.yaml as its rule file"
else
  fail "promtool check config: $(tr '\n' ' ' < "$work/config.out")"
fi
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn > "$work/prometheus.log" 2>&1 &
prom_pid=$!
for _ in $(seq 200); do
  curl -sf --max-time 1 "$prom/-/ready" > /dev/null 2>&1 && break
  kill -0 "$prom_pid" 2> /dev/null || break
  sleep 0.1
done
curl -sf --max-time 1 "$prom/-/ready" > /dev/null 2>&1 || die "Prometheus did not start: $(tail -n 2 "$work/prometheus.log" | tr '\n' ' ')"
pass "Prometheus $(prometheus --version 2>&1 | sed -n '1s/^prometheus, version \([^ ]*\).*/\1/p') ready on 127.0.0.1:$prom_port"

query() { curl -sS --max-time 10 -G "$prom/api/v1/query" --data-urlencode "query=$1" 2>&1; }
# Prints why and returns 1 unless the query parses and returns at least one series with a number in it.
check_expr() {
  local out status n
  out="$(query "$1")"
  status="$(jq -r .status <<< "$out" 2> /dev/null)"
  if [ "$status" != success ]; then
    jq -r '"\(.errorType): \(.error)"' <<< "$out" 2> /dev/null || printf '%s\n' "$out" | head -c 200
    return 1
  fi
  n="$(jq '.data.result | length' <<< "$out")"
  [ "$n" -gt 0 ] || { echo "no data"; return 1; }
  if ! jq -e '[.data.result[] | (.value // .)[1] // empty | select(. != "NaN")] | length > 0' <<< "$out" > /dev/null; then
    echo "only NaN"
    return 1
  fi
  echo "$n series, first $(jq -r '.data.result[0] | (.value // .)[1]' <<< "$out")"
}
wait_for() { # QUERY SECONDS: until the query returns data
  for _ in $(seq $(($2 * 2))); do
    check_expr "$1" > /dev/null && return 0
    sleep 0.5
  done
  return 1
}
# Prometheus applies its targets a few seconds after it starts. The agents are scraped before the jobs start,
# so every counter has a sample from before the transfer and rate() sees it move.
wait_for 'count(up{job="conduit-agent"} == 1) == 2' 30 && pass "Prometheus scrapes both agents" \
  || die "Prometheus does not scrape the agents: $(query 'up' | jq -c .data.result 2> /dev/null)"

checkpoint_job
head -c $((1 << 20)) /dev/urandom > "$work/node-a/small.bin"
"$bin/conduit-controller" --local-dir "$work/jobs" --agents "node-a=$a,node-b=$b,node-c=http://127.0.0.1:$dead_port" \
  --agent-token-file "$work/token" --metrics-listen "127.0.0.1:$ctl_port" --log-level warn > "$work/controller.log" 2>&1 &
controller_pid=$!

phase() { sed -n 's/^  phase: *//p' "$work/jobs/$1.yaml" 2> /dev/null | tr -d "\"'"; }
wait_phase() { # JOB: until it is Succeeded or Failed (2 minutes at most)
  for _ in $(seq 240); do
    case "$(phase "$1")" in Succeeded | Failed) return ;; esac
    kill -0 "$controller_pid" 2> /dev/null || return
    sleep 0.5
  done
}
alert_state() { curl -sS --max-time 10 "$prom/api/v1/alerts" | jq -r --arg a "$1" '[.data.alerts[] | select(.labels.alertname == $a) | .state] | first // "inactive"'; }

wait_phase checkpoint
[ "$(phase checkpoint)" = Succeeded ] && pass "TransferJob checkpoint Succeeded (256 MiB node-a -> node-b, crc32c)" \
  || die "TransferJob checkpoint: phase '$(phase checkpoint)', want Succeeded: $(tail -n 2 "$work/controller.log" | tr '\n' ' ')"
wait_for 'count(up{job=~"conduit-agent|conduit-controller"} == 1) == 3' 10 \
  && pass "Prometheus scrapes 3 targets (2 agents, the controller), all up" \
  || fail "Prometheus does not scrape all 3 targets: $(query 'up' | jq -c '[.data.result[] | {job: .metric.job, instance: .metric.instance, up: .value[1]}]' 2> /dev/null)"
# With only a successful job behind it, the failure alert stays quiet (two rule evaluations after the scrape).
if wait_for 'sum(conduit_agent_transfers_total{node="node-a", result="succeeded"}) >= 1' 20; then
  pass "Prometheus sees node-a's succeeded transfer"
  # The source agent counts what it wrote: 256 MiB, plus any slices the verification sent again.
  wait_for 'sum(conduit_agent_transfer_bytes_total{node="node-a", direction="write"}) >= 268435456' 5 \
    && pass "Prometheus counts the 256 MiB node-a wrote ($(query 'sum(conduit_agent_transfer_bytes_total{node="node-a", direction="write"})' | jq -r '.data.result[0].value[1]') bytes)" \
    || fail "conduit_agent_transfer_bytes_total of node-a is below 256 MiB: $(query 'conduit_agent_transfer_bytes_total' | jq -c '[.data.result[] | {node: .metric.node, direction: .metric.direction, v: .value[1]}]')"
  sleep 2
  state="$(alert_state ConduitTransferFailures)"
  [ "$state" = inactive ] && pass "ConduitTransferFailures is inactive after a successful job" \
    || fail "ConduitTransferFailures is $state after only a successful job, want inactive"
else
  fail "Prometheus does not see the succeeded transfer within 20 s"
fi

# node-c is in --agents, but no agent listens on its port: this job fails without retrying.
cat > "$work/jobs/unreachable.yaml" << 'YAML'
apiVersion: conduit.dev/v1alpha1
kind: TransferJob
metadata:
  name: unreachable
spec:
  source:
    node: node-a
    file: small.bin
  targets:
    - node: node-c
      region: landing
      create:
        bytes: 1048576
  backoffLimit: 0
YAML
wait_phase unreachable
[ "$(phase unreachable)" = Failed ] && pass "TransferJob unreachable Failed: $(grep -o 'gave up[^;]*; last error: [A-Za-z]*' "$work/jobs/unreachable.yaml" | head -n 1)" \
  || die "TransferJob unreachable: phase '$(phase unreachable)', want Failed"

# ---- Prometheus's view
wait_for 'max(conduit_controller_transferjobs{phase="Failed"}) >= 1' 20 &&
  wait_for 'max(conduit_controller_fabricnodes{reachable="false"}) >= 1' 20 &&
  pass "Prometheus sees the Failed TransferJob and the unreachable FabricNode" ||
  fail "Prometheus does not see the Failed TransferJob and the unreachable FabricNode within 20 s"

# Panels: Grafana's built-ins become fixed durations ($__rate_interval 1m, so a rate still holds the transfer
# that ended seconds ago); each variable becomes the values its label_values() query finds (a multi-value or
# All variable as a (v1|v2) regex, as Grafana writes it; a single one as its first value: node-a, the source,
# whose segment latencies exist).
subst='def subst($vars):
  gsub("\\$__rate_interval"; "1m") | gsub("\\$__interval"; "15s") | gsub("\\$__range"; "5m")
  | reduce ($vars | to_entries[]) as $e (.; gsub("\\$\\{?" + $e.key + "\\}?(?![A-Za-z0-9_])"; $e.value));'
for dash in "${dashboards[@]}"; do
  name="$(basename "$dash" .json)"
  vars='{}'
  while IFS= read -r v; do
    var="$(jq -r .name <<< "$v")"
    q="$(jq -r '.query | if type == "object" then .query else . end' <<< "$v")"
    if [[ ! $q =~ ^label_values\((.*),[[:space:]]*([A-Za-z_][A-Za-z0-9_]*)\)$ ]]; then
      fail "$name: variable $var: not a label_values(SELECTOR, LABEL) query: $q"
      continue
    fi
    label="${BASH_REMATCH[2]}"
    selector="$(jq -rn --arg s "${BASH_REMATCH[1]}" --argjson vars "$vars" "$subst"' $s | subst($vars)')"
    values="$(curl -sS --max-time 10 -G "$prom/api/v1/label/$label/values" --data-urlencode "match[]=$selector" | jq -r '.data[]?')"
    if [ -z "$values" ]; then
      fail "$name: variable $var ($q) has no values"
      value="unresolved"
    elif jq -e '.multi or .includeAll' <<< "$v" > /dev/null; then
      value="($(printf '%s\n' "$values" | sed 's/[][\\.*^$+?(){}|]/\\&/g' | paste -sd'|'))"
      pass "$name: variable \$$var = $value"
    else
      value="$(printf '%s\n' "$values" | head -n 1)"
      pass "$name: variable \$$var = $value (first of $(printf '%s\n' "$values" | wc -l))"
    fi
    vars="$(jq -c --arg k "$var" --arg v "$value" '. + {($k): $v}' <<< "$vars")"
  done < <(jq -c '.templating.list[] | select(.type == "query")' "$dash")

  while IFS= read -r t; do
    title="$(jq -r .title <<< "$t")"
    expr="$(jq -r .expr <<< "$t")"
    if [[ $expr == *'$'* ]]; then
      fail "$name / $title: unresolved variable in: $expr"
    elif why="$(check_expr "$expr")"; then
      pass "$name / $title: $why: $expr"
    else
      fail "$name / $title: $why: $expr"
    fi
  done < <(jq -c --argjson vars "$vars" "$subst"' .panels[] | .title as $title | .targets[]
                                           | {title: "\($title) [\(.refId)]", expr: (.expr | subst($vars))}' "$dash")
done

# The check must be able to fail: a misspelt metric and a syntax error are both caught.
why="$(check_expr 'sum(rate(conduit_agent_transfer_byte_total[1m]))')" && fail "a misspelt metric returned data" \
  || pass "a misspelt metric in a query is caught: $why"
why="$(check_expr 'sum(rate(conduit_agent_transfer_bytes_total[1m])')" && fail "a broken query parsed" \
  || pass "a query that does not parse is caught: $why"

# Alerts: every rule of metrics/alerts.yaml loaded and evaluated without error.
want_rules="$(grep -c '^[[:space:]]*- alert:' "$root/metrics/alerts.yaml")"
for _ in $(seq 20); do
  rules="$(curl -sS --max-time 10 "$prom/api/v1/rules?type=alert" | jq -c '[.data.groups[].rules[] | select(.type == "alerting")]')"
  [ "$(jq '[.[] | select(.health == "ok")] | length' <<< "$rules")" = "$want_rules" ] && break
  sleep 0.5
done
[ "$(jq length <<< "$rules")" = "$want_rules" ] && pass "Prometheus loaded the $want_rules alert rules of metrics/alerts.yaml" \
  || fail "Prometheus loaded $(jq length <<< "$rules") alert rules, metrics/alerts.yaml has $want_rules"
while IFS= read -r r; do
  alert="$(jq -r .name <<< "$r")"
  out="$(query "$(jq -r .query <<< "$r")")"
  if [ "$(jq -r .health <<< "$r")" != ok ]; then
    fail "alert $alert: health $(jq -r '"\(.health): \(.lastError // "")"' <<< "$r")"
  elif [ "$(jq -r .status <<< "$out" 2> /dev/null)" != success ]; then
    fail "alert $alert: expression does not evaluate: $(jq -r .error <<< "$out" 2> /dev/null || echo "$out")"
  else
    pass "alert $alert: health ok, expression evaluates ($(jq '.data.result | length' <<< "$out") series now, state $(jq -r .state <<< "$r"))"
  fi
done < <(jq -c '.[]' <<< "$rules")

for alert in ConduitTransferFailures ConduitFabricNodeUnreachable; do
  for _ in $(seq 40); do
    [ "$(alert_state "$alert")" = firing ] && break
    sleep 0.5
  done
  state="$(alert_state "$alert")"
  case "$state" in
    firing) pass "$alert is firing after the failed job" ;;
    *) fail "$alert is $state after the failed job, want firing" ;;
  esac
done
for alert in ConduitControllerNoLeader ConduitTransferStalled ConduitStagedGpuFallback; do
  state="$(alert_state "$alert")"
  [ "$state" = inactive ] && pass "$alert is inactive (nothing wrong of that kind)" || fail "$alert is $state, want inactive"
done

# ---- docs/observability.md and metrics/metric_names.txt against what the binaries expose
curl -sf --max-time 5 "$a/metrics" > "$work/agent.txt" && curl -sf --max-time 5 "http://127.0.0.1:$ctl_port/metrics" > "$work/controller.txt" \
  || fail "scraping the agent and the controller for the doc check failed"
if "$root/scripts/check-observability.sh" --scraped "$work/agent.txt" "$work/controller.txt" > "$work/doc.out" 2>&1; then
  pass "docs/observability.md matches the binaries ($(tail -n 1 "$work/doc.out"))"
else
  sed 's/^/    /' "$work/doc.out" >&2
  fail "docs/observability.md or metrics/metric_names.txt does not match the binaries"
fi

finish
