#!/usr/bin/env bash
# Keeps docs/observability.md and metrics/metric_names.txt true to the binaries: every metric the agent and
# the controller expose on /metrics is in the doc's tables with the same type and label set, every metric in
# the tables is exposed, metric_names.txt lists exactly the agent's series names, and the doc's alert table
# names exactly the alerts in metrics/alerts.yaml.
#
#   scripts/check-observability.sh [BUILD_DIR]            starts an agent and a local-mode controller from
#                                                        BUILD_DIR (default: build) and scrapes them
#   scripts/check-observability.sh --scraped AGENT CONTROLLER
#                                                        checks two /metrics texts scraped already
# Prints "ok - ..." per check and "observability check: N passed, M failed"; exit 1 on any failure.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
doc="$root/docs/observability.md"
names_file="$root/metrics/metric_names.txt"
alerts_file="$root/metrics/alerts.yaml"
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok - $*"; }
fail() { failed=$((failed + 1)); echo "FAIL - $*" >&2; }
finish() { echo "observability check: $passed passed, $failed failed"; [ "$failed" -eq 0 ]; }

# "family type label,label" per metric family of an exposition text; labels sorted, `le` left out,
# "-" for none and "?" when the family has no series yet.
families() {
  awk '
    /^# TYPE / { type[$3] = $4; if (!($3 in labels)) labels[$3] = "?"; next }
    /^#/ || NF == 0 { next }
    {
      name = $0; sub(/[{ ].*/, "", name)
      set = ""
      if (index($0, "{") > 0 && index($0, "{") < index($0, " ")) {
        set = $0; sub(/^[^{]*\{/, "", set); sub(/\}.*/, "", set)
        gsub(/="([^"\\]|\\.)*"/, "", set)
      }
      family = name
      if (!(family in type)) {
        base = name; sub(/_(bucket|sum|count)$/, "", base)
        if (base in type) family = base
      }
      n = split(set, parts, ",")
      out = ""
      for (i = 1; i <= n; i++) if (parts[i] != "" && parts[i] != "le") keep[parts[i]] = 1
      m = asort_keys(keep, sorted)
      for (i = 1; i <= m; i++) out = out (i > 1 ? "," : "") sorted[i]
      for (k in keep) delete keep[k]
      if (out == "") out = "-"
      if (labels[family] == "?" || labels[family] == "") labels[family] = out
      else if (labels[family] != out) labels[family] = labels[family] "|" out
    }
    # Insertion sort of the keys of a (tiny) set; mawk has no asorti.
    function asort_keys(set, out,   k, n, i, j, t) {
      n = 0
      for (k in set) out[++n] = k
      for (i = 2; i <= n; i++) for (j = i; j > 1 && out[j - 1] > out[j]; j--) { t = out[j]; out[j] = out[j - 1]; out[j - 1] = t }
      return n
    }
    END { for (f in type) print f, type[f], labels[f] }
  ' "$1" | sort
}

# The same three fields from the doc's metric tables: | `name` | type | `label`, `label` | meaning |
# A fourth, "lazy", when the meaning says the family "appears with the first" event: prometheus-cpp exposes
# no family before its first series.
documented() {
  awk -F'|' -v prefix="$1" '
    $2 ~ "^ *`" prefix {
      name = $2; gsub(/[ `]/, "", name)
      type = $3; gsub(/ /, "", type)
      rest = $4; n = 0
      while (match(rest, /`[a-zA-Z_][a-zA-Z0-9_]*`/)) {
        l[++n] = substr(rest, RSTART + 1, RLENGTH - 2); rest = substr(rest, RSTART + RLENGTH)
      }
      for (i = 2; i <= n; i++) for (j = i; j > 1 && l[j - 1] > l[j]; j--) { t = l[j]; l[j] = l[j - 1]; l[j - 1] = t }
      out = ""
      for (i = 1; i <= n; i++) out = out (i > 1 ? "," : "") l[i]
      print name, type, (out == "" ? "-" : out), ($5 ~ /appears with the first/ ? "lazy" : "")
    }
  ' "$doc" | sort
}

# Compares one component's exposed families with its doc table.
compare() {
  local what=$1 prefix=$2 scraped=$3
  local exposed doc_rows
  exposed="$(families "$scraped" | grep "^$prefix")"
  doc_rows="$(documented "$prefix")"
  if [ -z "$exposed" ]; then fail "$what exposes no $prefix* metric"; return; fi
  local name type labels doc_type doc_labels lazy
  while read -r name type labels; do
    read -r _ doc_type doc_labels _ <<< "$(printf '%s\n' "$doc_rows" | awk -v n="$name" '$1 == n')"
    if [ -z "$doc_type" ]; then
      fail "$what exposes $name ($type, labels $labels), which docs/observability.md does not list"
    elif [ "$doc_type" != "$type" ]; then
      fail "$name is a $type, docs/observability.md says $doc_type"
    elif [ "$labels" = "?" ]; then
      pass "$name: $type (no series yet: labels not observed; doc says $doc_labels)"
    elif [ "$labels" != "$doc_labels" ]; then
      fail "$name has labels {$labels}, docs/observability.md says {$doc_labels}"
    else
      pass "$name: $type {$labels} as documented"
    fi
  done <<< "$exposed"
  while read -r name doc_type _ lazy; do
    [ -z "$name" ] && continue
    if printf '%s\n' "$exposed" | awk -v n="$name" '$1 == n { found = 1 } END { exit !found }'; then
      continue
    elif [ "$lazy" = lazy ]; then
      pass "$name: not exposed yet, as documented (it appears with its first event)"
    else
      fail "docs/observability.md lists $name ($doc_type), which $what does not expose"
    fi
  done <<< "$doc_rows"
}

check() {
  local agent=$1 controller=$2
  compare conduit-agent conduit_agent_ "$agent"
  compare conduit-controller conduit_controller_ "$controller"

  # metric_names.txt: every agent family (exposed, or documented as appearing later), plus _bucket/_count/_sum
  # for histograms.
  local want have
  want="$({ families "$agent"; documented conduit_agent_ | awk '$4 == "lazy"'; } |
    awk '$1 ~ /^conduit_agent_/ && !seen[$1]++ { print $1; if ($2 == "histogram") { print $1 "_bucket"; print $1 "_count"; print $1 "_sum" } }' | sort)"
  have="$(grep -v '^[[:space:]]*$' "$names_file" | sort)"
  if [ "$want" = "$have" ]; then
    pass "metrics/metric_names.txt lists the agent's $(printf '%s\n' "$want" | wc -l) series names"
  else
    fail "metrics/metric_names.txt differs from what the agent exposes (< exposed, > listed): $(diff <(printf '%s\n' "$want") <(printf '%s\n' "$have") | grep '^[<>]' | tr '\n' ' ')"
  fi

  # Alerts: the doc's table and the rule file name the same alerts.
  want="$(sed -n 's/^[[:space:]]*- alert:[[:space:]]*\([A-Za-z0-9_]*\).*/\1/p' "$alerts_file" | sort)"
  have="$(awk -F'|' '$2 ~ /^ *`Conduit/ { n = $2; gsub(/[ `]/, "", n); print n }' "$doc" | sort)"
  if [ -n "$want" ] && [ "$want" = "$have" ]; then
    pass "docs/observability.md lists the $(printf '%s\n' "$want" | wc -l) alerts of metrics/alerts.yaml"
  else
    fail "alerts differ (< alerts.yaml, > doc): $(diff <(printf '%s\n' "$want") <(printf '%s\n' "$have") | grep '^[<>]' | tr '\n' ' ')"
  fi
}

if [ "${1:-}" = "--scraped" ]; then
  [ $# -eq 3 ] || { echo "usage: $0 --scraped AGENT_METRICS CONTROLLER_METRICS" >&2; exit 2; }
  check "$2" "$3"
  finish
  exit
fi

build="${1:-build}"
[[ $build = /* ]] || build="$root/$build"
bin="$build/bin"
for b in conduit-agent conduit-controller; do
  [ -x "$bin/$b" ] || { fail "$bin/$b not built"; finish; exit 1; }
done
work="$(mktemp -d "${TMPDIR:-/tmp}/conduit-obs-check.XXXXXX")"
controller_pid=""
# shellcheck source=lib/agents.sh
source "$root/scripts/lib/agents.sh"
cleanup() {
  [ -n "$controller_pid" ] && kill "$controller_pid" 2>/dev/null
  stop_agents
  rm -rf "$work"
}
trap cleanup EXIT
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token"

: > "$work/node-a.out" # start_agent greps it, maybe before the agent process has created it
start_agent node-a tcp 64MiB || { fail "agent did not start"; finish; exit 1; }
mkdir -p "$work/jobs"
port=""
for _ in $(seq 20); do
  port=$((20000 + RANDOM % 12000))
  "$bin/conduit-controller" --local-dir "$work/jobs" --agents "node-a=$agent_url" --agent-token-file "$work/token" \
    --metrics-listen "127.0.0.1:$port" --log-level warn > "$work/controller.log" 2>&1 &
  controller_pid=$!
  for _ in $(seq 50); do
    curl -sf --max-time 2 "http://127.0.0.1:$port/metrics" > "$work/controller.txt" 2>/dev/null && break 2
    kill -0 "$controller_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill "$controller_pid" 2>/dev/null
  wait "$controller_pid" 2>/dev/null
  controller_pid=""
done
[ -n "$controller_pid" ] || { fail "controller metrics endpoint did not come up: $(tail -n 2 "$work/controller.log")"; finish; exit 1; }
curl -sf --max-time 5 "$agent_url/metrics" > "$work/agent.txt" || { fail "scraping $agent_url/metrics failed"; finish; exit 1; }
check "$work/agent.txt" "$work/controller.txt"
finish
