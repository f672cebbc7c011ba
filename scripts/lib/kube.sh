# shellcheck shell=bash
# shellcheck disable=SC2154 # $root, $work and netns_addr[] are the caller's
# Sourced by tests that run conduit against a real kube-apiserver (scripts/kube-env.sh). Needs $root (the
# repository), $work (a temp dir), $KUBECTL and the caller's fail function (one line of why, then exit).
#
#   kube_up NAMESPACE             etcd + kube-apiserver in $work/env, the CRDs Established, NAMESPACE created
#   kc ARGS...                    kubectl in that namespace
#   agent_endpointslice PORT NODE...   the agent Service and the EndpointSlice that list the nodes' agents

# kube_up NAMESPACE: start etcd and kube-apiserver in $work/env (exports KUBECONFIG), apply the CRDs, create NAMESPACE.
kube_up() {
  local out
  kube_ns="$1"
  out="$("$root/scripts/kube-env.sh" start "$work/env" 2> "$work/env-start.err")" \
    || fail "kube-env start: $(grep -m1 'kube-env:' "$work/env-start.err" || tail -n1 "$work/env-start.err")"
  eval "$out"
  kc apply -f "$root/crds/transferjobs.conduit.dev.yaml" -f "$root/crds/fabricnodes.conduit.dev.yaml" > /dev/null \
    && kc wait --for=condition=Established --timeout=30s crd/transferjobs.conduit.dev crd/fabricnodes.conduit.dev \
      > /dev/null && kc create namespace "$kube_ns" > /dev/null || fail "CRDs or namespace not accepted"
}

# kc ARGS...: kubectl in kube_up's namespace, each request bounded to 20 s.
kc() { "$KUBECTL" --request-timeout=20s -n "$kube_ns" "$@"; }

# agent_endpointslice PORT NODE...: YAML of the headless agent Service and the EndpointSlice listing each NODE's
# agent at netns_addr[NODE]:PORT, as the endpointslice controller writes it for the agent DaemonSet.
agent_endpointslice() {
  local port="$1" n
  shift
  cat << YAML
apiVersion: v1
kind: Service
metadata: {name: conduit-agent}
spec:
  clusterIP: None
  ports: [{name: http, port: $port}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: conduit-agent-x1
  labels: {kubernetes.io/service-name: conduit-agent}
addressType: IPv4
ports: [{name: http, port: $port, protocol: TCP}]
endpoints:
YAML
  for n in "$@"; do
    printf '  - {addresses: ["%s"], nodeName: %s, conditions: {ready: true}}\n' "${netns_addr[$n]}" "$n"
  done
}
