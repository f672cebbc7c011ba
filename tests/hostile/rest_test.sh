#!/usr/bin/env bash
# Hostile input against a real conduit-agent (tcp provider, loopback, a token, a 64 MiB memory cap, a data
# directory in a temp dir):
#   - schemathesis (pinned, tests/hostile/requirements.txt) drives every operation of agent/openapi.yaml with a
#     fixed seed: first invalid requests only, which must all be refused with a 4xx and leave the agent's
#     state exactly as it was (regions, grants, transfers, memory used, the data directory's files); then
#     valid and invalid ones mixed, at least 5,000 cases, with zero 5xx and every documented answer matching
#     its schema;
#   - oversized bodies (100 MiB by Content-Length, chunked, without a length; JSON nested 10^6 deep);
#   - file names that leave the data directory (.., absolute paths, symbolic links) for load and save;
#   - transfers to random remote keys (addresses of every size, unknown providers, extreme ranges);
#   - 200 clients that send their headers a byte a second, 1,000 that send nothing, 1,000 connections at once;
#   - after each, the agent still runs and answers /healthz.
# Usage: tests/hostile/rest_test.sh [BUILD_DIR]. Prints "hostile rest: N passed, M failed"; exit 1 on a failure.
# CONDUIT_HOSTILE_CASES (default 5000) and CONDUIT_HOSTILE_SEED (default 20240611) size and seed the run.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$(cd "${1:-$root/build}" 2>/dev/null && pwd)" || { echo "hostile rest: no build directory ${1:-build}"; exit 1; }
bin="$build/bin"
cases=${CONDUIT_HOSTILE_CASES:-5000}
seed=${CONDUIT_HOSTILE_SEED:-20240611}
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok - $*"; }
fail() { failed=$((failed + 1)); echo "FAIL - $*" >&2; }
finish() { echo "hostile rest: $passed passed, $failed failed"; [ "$failed" -eq 0 ]; }
die() { fail "$*"; finish; exit 1; }

[ -x "$bin/conduit-agent" ] || die "no $bin/conduit-agent: build first (scripts/build.sh)"
venv="$("$root/scripts/python-env.sh")" || die "the Python venv could not be made (scripts/python-env.sh)"
work="$(mktemp -d "${TMPDIR:-/tmp}/conduit-hostile.XXXXXX")"
# shellcheck source=scripts/lib/agents.sh
source "$root/scripts/lib/agents.sh"
trap 'stop_agents; rm -rf "$work"' EXIT
started=$SECONDS

py() { timeout 300 "$venv/bin/python" "$root/tests/hostile/hostile.py" "$@"; }
alive() { # the agent process still runs and answers /healthz
  kill -0 "${agent_pids[0]}" 2>/dev/null || die "the agent died $1: $(tail -n 3 "$work/hostile.log")"
  curl -sf --max-time 5 "$url/healthz" > /dev/null || die "the agent does not answer /healthz $1"
}

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token"
token="$(cat "$work/token")"
: > "$work/hostile.out"
start_agent hostile tcp 64MiB || die "the agent did not start: $(tail -n 3 "$work/hostile.log")"
url=$agent_url
data="$work/hostile"

# schemathesis, shared options: the agent's token, bounded requests, no example database in the repository.
st() {
  (cd "$work" && timeout $((600 + cases / 10)) "$venv/bin/schemathesis" run "$root/agent/openapi.yaml" --url "$url" \
    -H "Authorization: Bearer $token" --seed "$seed" --request-timeout 10 --generation-database none \
    --no-color --suppress-health-check all "$@")
}
# The number of test cases schemathesis generated and sent, from the line after "Test cases:" in its summary.
cases_run() { sed -n '/Test cases:/{n;s/^ *\([0-9][0-9]*\) generated.*/\1/p}' "$1" | tail -n1; }
# On a failure the whole output is kept where the one line of why says.
keep() { cp "$1" "${TMPDIR:-/tmp}/conduit-hostile-$(basename "$1")" && echo "${TMPDIR:-/tmp}/conduit-hostile-$(basename "$1")"; }

# 1. Only invalid requests: every one refused with a 4xx, and nothing about the agent changes.
py fixtures "$url" "$token" > "$work/fixtures.out" || die "fixtures: $(cat "$work/fixtures.out")"
py snapshot "$url" "$token" "$data" > "$work/before.json" || die "snapshot: $(cat "$work/before.json")"
t0=$SECONDS
# No stateful phase here: it chains valid requests (list the grants, then revoke one) on purpose.
st --mode negative --phases examples,coverage,fuzzing --max-examples 100 \
  --checks not_a_server_error,negative_data_rejection > "$work/negative.out" 2>&1
rc=$?
n=$(cases_run "$work/negative.out")
if [ "$rc" -eq 0 ]; then
  pass "schemathesis: ${n:-?} invalid requests, every one refused with a 4xx ($((SECONDS - t0))s)"
else
  fail "schemathesis (invalid only) failed, see $(keep "$work/negative.out")"
fi
alive "after invalid requests"
py snapshot "$url" "$token" "$data" > "$work/after.json" || die "snapshot: $(cat "$work/after.json")"
if cmp -s "$work/before.json" "$work/after.json"; then
  pass "state unchanged by refused requests ($(grep -c '"name"' "$work/before.json") regions, grants, transfers, memory, files)"
else
  diff "$work/before.json" "$work/after.json" > "$work/state.diff"
  fail "refused requests changed the agent's state, see $(keep "$work/state.diff")"
fi

# 2. Valid and invalid requests mixed: no 5xx, documented answers match their schemas.
t0=$SECONDS
st --mode all --max-examples $((cases / 10)) \
  --checks not_a_server_error,response_schema_conformance,content_type_conformance \
  --max-response-time 5 > "$work/all.out" 2>&1
rc=$?
n=$(cases_run "$work/all.out")
if [ "$rc" -ne 0 ]; then
  fail "schemathesis failed, see $(keep "$work/all.out")"
elif [ "${n:-0}" -lt "$cases" ]; then
  fail "schemathesis ran only ${n:-0} cases, fewer than $cases"
else
  pass "schemathesis: $n cases, zero 5xx, answers match agent/openapi.yaml ($((SECONDS - t0))s)"
fi
alive "after schemathesis"
pass "agent alive and healthy after schemathesis"

# 3. Bodies no one should send.
if msg="$(py bigbody "$url" "$token")"; then pass "huge bodies: $msg"; else fail "huge bodies: $msg"; fi
alive "after huge bodies"

# 4. File names that leave the data directory.
if msg="$(py traversal "$url" "$token" "$data")"; then pass "path traversal: $msg"; else fail "path traversal: $msg"; fi
alive "after path traversal"

# 5. Transfers whose grant keys point nowhere (random addresses, providers, ranges).
if msg="$(py keys "$url" "$token" 40)"; then pass "random remote keys: $msg"; else fail "random remote keys: $msg"; fi
alive "after random remote keys"

# 6. Slow and idle clients, several times the agent's 64 request threads: 200 sending their headers a byte a
# second are each cut by the 10 s request deadline, 1,000 sending nothing by the 5 s keep-alive timeout, and
# /healthz answers within 2 s all along (the agent holds waiting connections without a thread).
if msg="$(py slowloris "$url" 200 14 2 13)"; then pass "slowloris: $msg"; else fail "slowloris: $msg"; fi
if msg="$(py idle "$url" 1000 8 2)"; then pass "idle connections: $msg"; else fail "idle connections: $msg"; fi
alive "after slow and idle clients"

# 7. 1,000 connections at once, each asking for the region list.
if msg="$(py flood "$url" "$token" 1000 0.99)"; then pass "flood: $msg"; else fail "flood: $msg"; fi
alive "after 1,000 connections"

kill -0 "${agent_pids[0]}" 2>/dev/null && pass "agent still running after everything ($((SECONDS - started))s in all)"
finish
