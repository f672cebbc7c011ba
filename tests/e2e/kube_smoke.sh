#!/usr/bin/env bash
# Smoke test of the end-to-end Kubernetes environment: starts a real etcd + kube-apiserver
# (scripts/kube-env.sh) in a temp dir, talks to it with kubectl, stops it.
# Needs the tools built by scripts/kube-tools.sh. $KUBECTL overrides the kubectl it uses.
# Prints "kube smoke: N passed, 0 failed" on success; on failure one line of why, then the counts, exit 1.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
passed=0

fail() {
  echo "kube smoke: FAILED: $*" >&2
  echo "kube smoke: $passed passed, 1 failed"
  exit 1
}
pass() { passed=$((passed + 1)); echo "ok - $*"; }

paths="$("$root/scripts/kube-tools.sh" --print 2>/dev/null)" \
  || fail "kube tools not built: run scripts/kube-tools.sh ($(printf '%s' "$paths" | tr '\n' ' '))"
if [ -z "${KUBECTL:-}" ]; then
  KUBECTL="$(printf '%s\n' "$paths" | sed -n 's/^KUBECTL=//p')"
fi
[ -x "$KUBECTL" ] || fail "no kubectl at $KUBECTL"

work="$(mktemp -d "${TMPDIR:-/tmp}/conduit-kube-smoke.XXXXXX")"
cleanup() {
  "$root/scripts/kube-env.sh" stop "$work/env" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 1. start
t0=$(date +%s)
if ! out="$("$root/scripts/kube-env.sh" start "$work/env" 2> "$work/start.err")"; then
  fail "kube-env start: $(grep -m1 'kube-env:' "$work/start.err" || tail -n1 "$work/start.err")"
fi
eval "$out"
[ "${KUBECONFIG:-}" = "$work/env/kubeconfig" ] || fail "kube-env start printed '$out', not the kubeconfig export"
etcd_bin="$(printf '%s\n' "$paths" | sed -n 's/^ETCD=//p')"
etcd_version="$("${ETCD:-$etcd_bin}" --version 2>/dev/null | sed -n 's/^etcd Version: //p')"
pass "etcd ${etcd_version:-?} + kube-apiserver $("$KUBECTL" version -o json 2>/dev/null \
  | sed -n 's/.*"gitVersion": "\([^"]*\)".*/\1/p' | tail -n1) ready in $(( $(date +%s) - t0 )) s"

kc() { "$KUBECTL" --request-timeout=20s "$@"; }

# 2. readyz through kubectl (TLS verified against the CA in the kubeconfig, token auth)
r="$(kc get --raw /readyz 2>&1)" || fail "kubectl get --raw /readyz: $(echo "$r" | tail -n1)"
[ "$r" = ok ] || fail "kubectl get --raw /readyz answered '$r'"
pass "kubectl get --raw /readyz = ok"

# 3. discovery
r="$(kc api-resources 2>&1)" || fail "kubectl api-resources: $(echo "$r" | tail -n1)"
printf '%s\n' "$r" | head
printf '%s\n' "$r" | grep -qE '^namespaces[[:space:]]' || fail "kubectl api-resources lists no namespaces"
printf '%s\n' "$r" | grep -qE '^customresourcedefinitions[[:space:]]' \
  || fail "kubectl api-resources lists no customresourcedefinitions"
pass "kubectl api-resources ($(printf '%s\n' "$r" | tail -n +2 | wc -l) resources)"

# 4. who am I: the static token's user is in system:masters
r="$(kc auth can-i '*' '*' --all-namespaces 2>&1)" || fail "kubectl auth can-i '*' '*': $r"
[ "$r" = yes ] || fail "conduit-admin cannot do everything: '$r'"
pass "conduit-admin may do everything (system:masters)"

# 5. namespace create
ns="conduit-smoke-$$"
r="$(kc create namespace "$ns" 2>&1)" || fail "kubectl create namespace: $r"
phase="$(kc get namespace "$ns" -o jsonpath='{.status.phase}' 2>&1)" || fail "kubectl get namespace: $phase"
[ "$phase" = Active ] || fail "namespace $ns phase '$phase', not Active"
pass "namespace $ns created (Active)"

# 6. namespace delete. No controller-manager runs, so nothing removes the namespace's "kubernetes" finalizer:
# the namespace stays Terminating until the finalize subresource clears it, as the namespace controller would.
r="$(kc delete namespace "$ns" --wait=false 2>&1)" || fail "kubectl delete namespace: $r"
phase="$(kc get namespace "$ns" -o jsonpath='{.status.phase}' 2>&1)" || fail "kubectl get namespace: $phase"
[ "$phase" = Terminating ] || fail "deleted namespace $ns phase '$phase', not Terminating"
r="$(printf '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"%s"},"spec":{"finalizers":[]}}' "$ns" \
     | kc replace --raw "/api/v1/namespaces/$ns/finalize" -f - 2>&1)" || fail "finalize namespace: $r"
gone=0
for _ in $(seq 100); do
  if r="$(kc get namespace "$ns" 2>&1)"; then sleep 0.1; continue; fi
  case "$r" in *NotFound*|*"not found"*) gone=1; break ;; esac
  fail "kubectl get namespace after delete: $r"
done
[ "$gone" -eq 1 ] || fail "namespace $ns still exists 10 s after it was finalized"
pass "namespace $ns deleted"

# 7. stop: both processes exit
pids="$(cat "$work/env/etcd.pid" "$work/env/kube-apiserver.pid" 2>/dev/null)"
r="$("$root/scripts/kube-env.sh" stop "$work/env" 2>&1)" || fail "kube-env stop: $r"
for p in $pids; do
  kill -0 "$p" 2>/dev/null && fail "pid $p still runs after kube-env stop"
done
[ -n "$pids" ] || fail "no pids recorded in $work/env"
pass "kube-env stop stopped etcd and kube-apiserver"

echo "kube smoke: $passed passed, 0 failed"
