#!/usr/bin/env bash
# The CRDs against a real kube-apiserver (scripts/kube-env.sh) with real kubectl: both CRDs are accepted and
# Established, every valid example is created, every invalid example is rejected with the message its
# `# expect:` line names, spec is immutable except suspend/ttlSecondsAfterFinished, and the printer columns
# show what the controller writes to status.
# Prints "crd e2e: N passed, M failed"; exit 1 on any failure.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok - $*"; }
fail() { failed=$((failed + 1)); echo "FAIL - $*" >&2; }
finish() { echo "crd e2e: $passed passed, $failed failed"; [ "$failed" -eq 0 ]; }

paths="$("$root/scripts/kube-tools.sh" --print 2>/dev/null)" || { fail "kube tools not built: run scripts/kube-tools.sh"; finish; exit 1; }
KUBECTL="${KUBECTL:-$(printf '%s\n' "$paths" | sed -n 's/^KUBECTL=//p')}"
work="$(mktemp -d "${TMPDIR:-/tmp}/conduit-crd-e2e.XXXXXX")"
trap '"$root/scripts/kube-env.sh" stop "$work/env" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
out="$("$root/scripts/kube-env.sh" start "$work/env" 2> "$work/start.err")" || { fail "kube-env start: $(tail -n1 "$work/start.err")"; finish; exit 1; }
eval "$out"
kc() { "$KUBECTL" --request-timeout=20s "$@"; }

# CRDs
if kc apply -f "$root/crds/transferjobs.conduit.dev.yaml" -f "$root/crds/fabricnodes.conduit.dev.yaml" > "$work/apply.out" 2>&1 \
  && kc wait --for=condition=Established --timeout=30s crd/transferjobs.conduit.dev crd/fabricnodes.conduit.dev > /dev/null 2>&1; then
  pass "CRDs accepted and Established"
else
  fail "CRDs: $(tail -n2 "$work/apply.out")"; finish; exit 1
fi
if grep -qi warning "$work/apply.out"; then fail "CRD apply warned: $(grep -i warning "$work/apply.out")"; else pass "CRD apply without warnings"; fi

# Valid examples are created; invalid ones (the shipped examples' and the table in tests/hostile/transferjobs/,
# listed in docs/reliability.md) rejected with their expected message.
for f in "$root"/crds/examples/*.yaml "$root"/tests/hostile/transferjobs/*.yaml; do
  name="$(basename "$f")"
  expect="$(sed -n 's/^# expect: //p' "$f" | head -n1)"
  if [ -z "$expect" ]; then
    if msg="$(kc create -f "$f" 2>&1)"; then pass "$name created"; else fail "$name rejected: $msg"; fi
  else
    if msg="$(kc create -f "$f" 2>&1)"; then
      fail "$name was accepted, expected rejection with: $expect"
    elif printf '%s' "$msg" | grep -qF -- "$expect"; then
      pass "$name rejected: $expect"
    else
      fail "$name rejected with another message: $msg"
    fi
  fi
done

# Immutability: spec.chunkBytes may not change, suspend may.
job="$(kc get transferjobs -o jsonpath='{.items[0].metadata.name}' 2>/dev/null)"
if [ -n "$job" ]; then
  if msg="$(kc patch transferjob "$job" --type=merge -p '{"spec":{"chunkBytes":2097152}}' 2>&1)"; then
    fail "chunkBytes of $job changed"
  elif printf '%s' "$msg" | grep -q immutable; then pass "chunkBytes is immutable"; else fail "chunkBytes change: $msg"; fi
  if msg="$(kc patch transferjob "$job" --type=merge -p '{"spec":{"suspend":true}}' 2>&1)"; then
    pass "suspend can change"
  else fail "suspend change rejected: $msg"; fi
  # Printer columns show the status the controller writes.
  kc patch transferjob "$job" --subresource=status --type=merge \
    -p '{"status":{"phase":"Running","progress":"42%","throughput":"5.2 GB/s"}}' > /dev/null 2>&1
  row="$(kc get transferjob "$job" --no-headers 2>&1)"
  if printf '%s' "$row" | grep -q "Running" && printf '%s' "$row" | grep -q "42%" && printf '%s' "$row" | grep -q "5.2 GB/s"; then
    pass "printer columns: $row"
  else fail "printer columns show: $row"; fi
else
  fail "no TransferJob to test immutability on"
fi

finish
