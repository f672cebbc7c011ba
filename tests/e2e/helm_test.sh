#!/usr/bin/env bash
# The Helm chart (helm/conduit) with the real helm 3 and kubectl of scripts/kube-tools.sh:
#   1. the chart's copies of crds/ and metrics/ files are in sync (scripts/sync-chart-files.sh --check);
#   2. `helm lint --strict` and `helm template` with the defaults and with every values file in
#      tests/e2e/helm-values/ (every switch flipped, monitoring on, RDMA device plugin);
#   3. values.schema.json rejects each tests/e2e/helm-values/bad-*.yaml with the message its `# expect:` names;
#   4. against a real kube-apiserver (scripts/kube-env.sh): every rendering, the CRD hook Job included, passes
#      a server-side dry run; `helm install` with monitoring on (stand-in monitoring.coreos.com CRDs from
#      tests/e2e/fixtures/) puts every object in the apiserver with the settings the chart promises; the
#      controller's and the CRD hook's RBAC allow exactly what their code and command need (kubectl auth can-i,
#      then the real conduit-controller and the hook's own kubectl command run with those ServiceAccounts'
#      tokens); `helm upgrade` makes revision 2 with the change visible and the agent token kept;
#      `helm uninstall` removes every object.
# No kubelet or controller-manager runs: pods never start and Jobs never run, so the install turns the CRD
# hook Job off (Helm would wait for it to complete) and the test runs the hook's command itself.
#
# Needs scripts/kube-tools.sh (kubectl, helm, kube-apiserver, etcd) and a build with bin/conduit-controller
# ($CONDUIT_BUILD_DIR, default build). CONDUIT_HELM_CHART tests another copy of the chart (to see it fail).
# Prints "ok - ..." per check and "helm test: N passed, 0 failed"; on failure one line of why, exit 1.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
chart="${CONDUIT_HELM_CHART:-$root/helm/conduit}"
values="$root/tests/e2e/helm-values"
build="${CONDUIT_BUILD_DIR:-$root/build}"
passed=0
t_start=$(date +%s)

fail() {
  echo "helm test: FAILED: $*" >&2
  echo "helm test: $passed passed, 1 failed"
  exit 1
}
pass() { passed=$((passed + 1)); echo "ok - $*"; }

paths="$("$root/scripts/kube-tools.sh" --print 2>/dev/null)" \
  || fail "kube tools not built: run scripts/kube-tools.sh ($(printf '%s' "$paths" | tr '\n' ' '))"
KUBECTL="${KUBECTL:-$(printf '%s\n' "$paths" | sed -n 's/^KUBECTL=//p')}"
HELM="${HELM:-$(printf '%s\n' "$paths" | sed -n 's/^HELM=//p')}"
[ -x "$KUBECTL" ] || fail "no kubectl at $KUBECTL"
[ -x "$HELM" ] || fail "no helm at $HELM"
[ -d "$chart/templates" ] || fail "no chart at $chart"

work="$(mktemp -d "${TMPDIR:-/tmp}/conduit-helm-test.XXXXXX")"
controller_pid=""
cleanup() {
  if [ -n "$controller_pid" ]; then
    kill -TERM "$controller_pid" 2>/dev/null
    wait "$controller_pid" 2>/dev/null
  fi
  "$root/scripts/kube-env.sh" stop "$work/env" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# helm keeps its config, cache and release-less state here, not in the user's home.
export HELM_CONFIG_HOME="$work/helm/config" HELM_CACHE_HOME="$work/helm/cache" HELM_DATA_HOME="$work/helm/data"
hl() { "$HELM" "$@"; }
kc() { "$KUBECTL" --request-timeout=20s "$@"; }
# last: the last line of a command's output, for one-line failure messages.
last() { tail -n "${2:-1}" "$1" | tr '\n' ' '; }

# ---- 1. the chart's copies are the canonical files --------------------------------------------------------
if ! CONDUIT_CHART_DIR="$chart" "$root/scripts/sync-chart-files.sh" --check > "$work/sync.out" 2>&1; then
  fail "chart files out of sync: $(grep -m1 -E 'differs|missing|stale|no source' "$work/sync.out")" \
       "— run scripts/sync-chart-files.sh"
fi
pass "chart copies of crds/*.yaml, metrics/alerts.yaml, metrics/dashboards/*.json are identical"
project_version="$(sed -n 's/^project(conduit VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")"
app_version="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$chart/Chart.yaml")"
[ -n "$project_version" ] || fail "no project(conduit VERSION ...) in CMakeLists.txt"
[ "$app_version" = "$project_version" ] \
  || fail "Chart.yaml appVersion '$app_version' is not the project version '$project_version' (CMakeLists.txt)"
pass "Chart.yaml appVersion $app_version = the project version in CMakeLists.txt"

# ---- 2. lint and template: defaults and every good values file ------------------------------------------
good=(default)
for f in "$values"/*.yaml; do
  case "$(basename "$f")" in bad-*) ;; *) good+=("$(basename "$f" .yaml)") ;; esac
done
[ ${#good[@]} -ge 3 ] || fail "expected values files in $values"
vflag() { [ "$1" = default ] || printf -- '-f\n%s\n' "$values/$1.yaml"; }

for v in "${good[@]}"; do
  mapfile -t vf < <(vflag "$v")
  hl lint --strict "$chart" "${vf[@]}" > "$work/lint-$v.out" 2>&1 \
    || fail "helm lint --strict ($v): $(grep -m2 -E '\[(ERROR|WARNING)\]|Error' "$work/lint-$v.out" | tr '\n' ' ')"
  hl template conduit "$chart" -n conduit-render --include-crds "${vf[@]}" > "$work/render-$v.yaml" 2> "$work/render-$v.err" \
    || fail "helm template ($v): $(last "$work/render-$v.err" 2)"
  n="$(grep -c '^kind: ' "$work/render-$v.yaml")"
  pass "helm lint --strict and helm template with $v values ($n objects)"
done

# The renderings differ where the switches say (spot checks; the apiserver checks the rest below).
grep -q '^kind: Job$' "$work/render-default.yaml" || fail "default rendering has no CRD hook Job"
grep -q '^kind: Job$' "$work/render-flipped.yaml" && fail "crds.upgradeJob.enabled=false still renders the hook Job"
grep -q 'hostNetwork: true' "$work/render-flipped.yaml" && fail "agent.hostNetwork=false still renders hostNetwork"
grep -q '^kind: ServiceMonitor$' "$work/render-default.yaml" && fail "ServiceMonitor rendered though off by default"
grep -q '^kind: ClusterRole$' "$work/render-flipped.yaml" && fail "rbac.create=false still renders ClusterRoles"
grep -q 'path: /dev/infiniband' "$work/render-flipped.yaml" && fail "agent.rdma.enabled=false still mounts /dev/infiniband"
grep -q -- '- --stripe-all-rails' "$work/render-flipped.yaml" || fail "agent.stripeAllRails=true does not pass --stripe-all-rails"
grep -q 'rdma/rdma_shared_device_a: "1"' "$work/render-rdma-device-plugin.yaml" \
  || fail "agent.rdma.resourceName is not requested"
pass "switches change the rendering (hook Job, hostNetwork, monitoring, RBAC, RDMA mounts and resource)"

# ---- 3. the schema rejects bad values, naming the key ----------------------------------------------------
nbad=0
for f in "$values"/bad-*.yaml; do
  name="$(basename "$f")"
  expect="$(sed -n 's/^# expect: //p' "$f" | head -n1)"
  [ -n "$expect" ] || fail "$name has no '# expect:' line"
  if hl template conduit "$chart" -f "$f" > /dev/null 2> "$work/bad.err"; then
    fail "$name was accepted; the schema should reject it with: $expect"
  fi
  grep -qF -- "$expect" "$work/bad.err" || fail "$name rejected with another message: $(last "$work/bad.err" 2)"
  grep -q "values don't meet the specifications of the schema" "$work/bad.err" \
    || fail "$name rejected, but not by values.schema.json: $(last "$work/bad.err" 2)"
  nbad=$((nbad + 1))
done
[ "$nbad" -ge 4 ] || fail "only $nbad bad values files in $values (want at least 4)"
pass "values.schema.json rejects $nbad bad values files, each message naming the key"

# ---- 4. a real apiserver ---------------------------------------------------------------------------------
t0=$(date +%s)
out="$("$root/scripts/kube-env.sh" start "$work/env" 2> "$work/start.err")" \
  || fail "kube-env start: $(grep -m1 'kube-env:' "$work/start.err" || last "$work/start.err")"
eval "$out"
pass "kube-apiserver ready in $(( $(date +%s) - t0 )) s"

kc apply -f "$root/tests/e2e/fixtures/monitoring-coreos-crds.yaml" > "$work/mon.out" 2>&1 \
  || fail "monitoring.coreos.com stand-in CRDs: $(last "$work/mon.out")"
kc wait --for=condition=Established --timeout=30s \
  crd/servicemonitors.monitoring.coreos.com crd/prometheusrules.monitoring.coreos.com > /dev/null 2>&1 \
  || fail "monitoring.coreos.com stand-in CRDs not Established"
pass "stand-in ServiceMonitor and PrometheusRule CRDs Established"

# Every rendering (the chart's CRDs, the hook Job and its RBAC included) through the apiserver's validation
# and admission, without storing anything. The namespaces must exist; the monitoring kinds need the CRDs above.
for n in conduit-render monitoring; do
  kc create namespace "$n" > /dev/null 2>&1 || fail "create namespace $n"
done
for v in "${good[@]}"; do
  kc apply --dry-run=server -f "$work/render-$v.yaml" > "$work/dry-$v.out" 2>&1 \
    || fail "server-side dry run of the $v rendering: $(grep -m2 -iE 'error|invalid|denied' "$work/dry-$v.out" | tr '\n' ' ')"
  grep -qi 'warning' "$work/dry-$v.out" && fail "server-side dry run of $v warned: $(grep -m1 -i warning "$work/dry-$v.out")"
  pass "server-side dry run of the $v rendering: $(grep -c . "$work/dry-$v.out") objects valid, no warnings"
done

# ---- install ----------------------------------------------------------------------------------------------
ns=conduit-system
rel=conduit
t0=$(date +%s)
hl install "$rel" "$chart" -n "$ns" --create-namespace -f "$values/monitoring.yaml" --timeout 2m \
  > "$work/install.out" 2>&1 || fail "helm install: $(last "$work/install.out" 2)"
status="$(hl status "$rel" -n "$ns" 2>&1 | sed -n 's/^STATUS: //p')"
[ "$status" = deployed ] || fail "helm status after install: '$status'"
grep -q 'kubectl get fabricnodes' "$work/install.out" || fail "helm install printed no NOTES with next steps"
pass "helm install: STATUS deployed in $(( $(date +%s) - t0 )) s, NOTES say what to run next"

kc wait --for=condition=Established --timeout=30s crd/transferjobs.conduit.dev crd/fabricnodes.conduit.dev \
  > /dev/null 2>&1 || fail "the chart's CRDs are not Established"
pass "helm installed the chart's crds/: TransferJob and FabricNode CRDs Established"

# Every object of the release is in the apiserver.
hl get manifest "$rel" -n "$ns" > "$work/manifest-1.yaml" || fail "helm get manifest"
want="$(grep -c '^kind: ' "$work/manifest-1.yaml")"
kc get -f "$work/manifest-1.yaml" -o name > "$work/objects-1.txt" 2> "$work/objects.err" \
  || fail "kubectl get of the release's objects: $(last "$work/objects.err")"
got="$(grep -c . "$work/objects-1.txt")"
[ "$got" -eq "$want" ] || fail "the release has $want objects, the apiserver returned $got"
for kind in daemonset deployment service secret serviceaccount clusterrole clusterrolebinding role rolebinding \
            poddisruptionbudget configmap servicemonitor prometheusrule; do
  grep -q "^$kind\." "$work/objects-1.txt" || grep -q "^$kind/" "$work/objects-1.txt" \
    || fail "no $kind among the installed objects: $(tr '\n' ' ' < "$work/objects-1.txt")"
done
pass "all $want objects stored: $(sed 's|/.*||; s|\..*||' "$work/objects-1.txt" | sort | uniq -c | awk '{printf "%s %s, ", $1, $2}' | sed 's/, $//')"

# What the chart promises, read back from the stored objects.
jp() { kc get "$1" -n "$ns" -o "jsonpath=$2" 2>&1; }
ds="daemonset/$rel-agent"
[ "$(jp "$ds" '{.spec.template.spec.hostNetwork}')" = true ] || fail "agent not hostNetwork"
[ "$(jp "$ds" '{.spec.template.spec.automountServiceAccountToken}')" = false ] || fail "agent mounts an API token"
[ "$(jp "$ds" '{.spec.template.spec.priorityClassName}')" = system-node-critical ] || fail "agent priorityClassName"
[ "$(jp "$ds" '{.spec.template.spec.containers[0].securityContext.capabilities.add}')" = '["IPC_LOCK"]' ] \
  || fail "agent capabilities: $(jp "$ds" '{.spec.template.spec.containers[0].securityContext.capabilities}')"
[ "$(jp "$ds" '{.spec.template.spec.containers[0].env[?(@.name=="NODE_NAME")].valueFrom.fieldRef.fieldPath}')" = spec.nodeName ] \
  || fail "agent NODE_NAME is not the downward API's spec.nodeName"
[ "$(jp "$ds" '{.spec.template.spec.containers[0].readinessProbe.httpGet.path} {.spec.template.spec.containers[0].livenessProbe.httpGet.path}')" = "/readyz /healthz" ] \
  || fail "agent probes"
[ "$(jp "$ds" '{.spec.template.spec.volumes[?(@.name=="infiniband")].hostPath.path}')" = /dev/infiniband ] \
  || fail "agent does not mount /dev/infiniband"
[ "$(jp "$ds" '{.spec.template.spec.volumes[?(@.name=="pod-resources")].hostPath.path}')" = /var/lib/kubelet/pod-resources ] \
  || fail "agent does not mount the pod-resources socket directory"
[ "$(jp "$ds" '{.spec.template.spec.nodeSelector.feature\.node\.kubernetes\.io/pci-15b3\.present}')" = true ] \
  || fail "agent nodeSelector: $(jp "$ds" '{.spec.template.spec.nodeSelector}')"
[ "$(jp "$ds" '{.spec.template.spec.tolerations[?(@.key=="nvidia.com/gpu")].effect}')" = NoSchedule ] \
  || fail "agent does not tolerate nvidia.com/gpu"
args="$(jp "$ds" '{.spec.template.spec.containers[0].args}')"
for a in --listen=0.0.0.0:7070 --token-file= --providers= --data-dir= --memory-cap= --log-format=json; do
  case "$args" in *"$a"*) ;; *) fail "agent args lack $a: $args" ;; esac
done
pass "agent DaemonSet: hostNetwork, IPC_LOCK, no API token, system-node-critical, NODE_NAME, probes, mounts, NFD nodeSelector, GPU toleration, flags"

dep="deployment/$rel-controller"
[ "$(jp "$dep" '{.spec.replicas}')" = 2 ] || fail "controller replicas: $(jp "$dep" '{.spec.replicas}')"
args="$(jp "$dep" '{.spec.template.spec.containers[0].args}')"
for a in --leader-elect "--agent-service=$rel-agent" --agent-token-file= --metrics-listen=0.0.0.0:8080; do
  case "$args" in *"$a"*) ;; *) fail "controller args lack $a: $args" ;; esac
done
sc="$(jp "$dep" '{.spec.template.spec.containers[0].securityContext}')"
for s in '"runAsNonRoot":true' '"readOnlyRootFilesystem":true' '"drop":["ALL"]' '"type":"RuntimeDefault"' '"allowPrivilegeEscalation":false'; do
  case "$sc" in *"$s"*) ;; *) fail "controller securityContext lacks $s: $sc" ;; esac
done
[ "$(jp "pdb/$rel-controller" '{.spec.minAvailable}')" = 1 ] || fail "controller PodDisruptionBudget minAvailable"
pass "controller Deployment: 2 replicas, leader election, agent Service, non-root read-only no-caps seccomp, PDB minAvailable 1"

[ "$(jp "service/$rel-agent" '{.spec.clusterIP} {.spec.ports[0].name}')" = "None http" ] || fail "agent Service not headless with port http"
token="$(jp "secret/$rel-agent-token" '{.data.token}' | base64 -d)"
[ "${#token}" -eq 48 ] || fail "generated agent token has ${#token} characters, want 48"
want_dash="$(find "$chart/files/dashboards" -name '*.json' | wc -l)"
got_dash="$(kc get configmap -n "$ns" -l grafana_dashboard=1 -o name | wc -l)"
[ "$got_dash" -eq "$want_dash" ] || fail "$got_dash dashboard ConfigMaps labelled grafana_dashboard=1, want $want_dash"
want_alerts="$(sed -n 's/^ *- alert: *//p' "$chart/files/alerts.yaml" | sort | tr '\n' ' ')"
got_alerts="$(kc get prometheusrule "$rel" -n "$ns" -o jsonpath='{range .spec.groups[*].rules[*]}{.alert}{"\n"}{end}' | sed '/^$/d' | sort | tr '\n' ' ')"
[ -n "$want_alerts" ] || fail "no alerts in $chart/files/alerts.yaml"
[ "$got_alerts" = "$want_alerts" ] || fail "PrometheusRule alerts '$got_alerts', files/alerts.yaml has '$want_alerts'"
[ "$(kc get servicemonitor -n "$ns" -o name | wc -l)" -eq 2 ] || fail "want 2 ServiceMonitors"
pass "headless agent Service (port http), generated 48-char token, $got_dash dashboard ConfigMaps, PrometheusRule with $(echo "$want_alerts" | wc -w) alerts, 2 ServiceMonitors"

# ---- RBAC: what the controller's code calls is allowed, nothing else ---------------------------------------
sa="system:serviceaccount:$ns:$rel-controller"
can() { kc auth can-i --as="$sa" "$@" > /dev/null 2>&1; }
allowed=(
  "get transferjobs.conduit.dev -A" "list transferjobs.conduit.dev -A" "watch transferjobs.conduit.dev -A"
  "patch transferjobs.conduit.dev -n team-a" "delete transferjobs.conduit.dev -n team-a"
  "patch transferjobs.conduit.dev --subresource=status -n team-a"
  "get fabricnodes.conduit.dev" "create fabricnodes.conduit.dev" "patch fabricnodes.conduit.dev"
  "patch fabricnodes.conduit.dev --subresource=status"
  "create events -n team-a" "patch events -n team-a"
  "list endpointslices.discovery.k8s.io -n $ns" "watch endpointslices.discovery.k8s.io -n $ns"
  "create leases.coordination.k8s.io -n $ns"
  "get leases.coordination.k8s.io/conduit-controller -n $ns" "update leases.coordination.k8s.io/conduit-controller -n $ns"
)
denied=(
  "create transferjobs.conduit.dev -n team-a" "update transferjobs.conduit.dev -n team-a"
  "update transferjobs.conduit.dev --subresource=status -n team-a"
  "list fabricnodes.conduit.dev" "delete fabricnodes.conduit.dev"
  "list endpointslices.discovery.k8s.io -n team-a" "get secrets -n $ns" "list pods -A"
  "update leases.coordination.k8s.io/other-lease -n $ns" "get leases.coordination.k8s.io/conduit-controller -n team-a"
  "delete leases.coordination.k8s.io/conduit-controller -n $ns" "patch customresourcedefinitions"
)
for c in "${allowed[@]}"; do
  # shellcheck disable=SC2086  # each entry is a word list of can-i arguments
  can $c || fail "the controller's RBAC does not allow: $c"
done
for c in "${denied[@]}"; do
  # shellcheck disable=SC2086
  can $c && fail "the controller's RBAC allows more than it uses: $c"
done
pass "controller RBAC allows the ${#allowed[@]} requests its code makes and denies ${#denied[@]} it does not"
asa="system:serviceaccount:$ns:$rel-agent"
for c in "get secrets -n $ns" "list transferjobs.conduit.dev -A" "get fabricnodes.conduit.dev" "list pods -n $ns"; do
  # shellcheck disable=SC2086
  kc auth can-i --as="$asa" $c > /dev/null 2>&1 && fail "the agent's ServiceAccount may: $c"
done
pass "agent ServiceAccount has no API permissions"

# The real controller with its ServiceAccount's token: it must lead, sync and reconcile a TransferJob with no
# 403. (Tokens come from the TokenRequest API, which the apiserver serves without a controller-manager.)
ctl="$build/bin/conduit-controller"
[ -x "$ctl" ] || fail "no $ctl: build first (scripts/build.sh), or set CONDUIT_BUILD_DIR"
sa_token="$(kc create token "$rel-controller" -n "$ns" --duration=1h 2>&1)" || fail "kubectl create token: $sa_token"
kc config view --raw --minify > "$work/controller.kubeconfig" 2>&1 || fail "kubectl config view"
"$KUBECTL" --kubeconfig "$work/controller.kubeconfig" config set-credentials conduit-admin --token="$sa_token" > /dev/null \
  || fail "kubeconfig for the controller's ServiceAccount"
kc create namespace team-a > /dev/null 2>&1 || fail "create namespace team-a"
kc apply -n team-a -f "$root/crds/examples/point-to-point.yaml" > /dev/null 2>&1 || fail "apply the point-to-point example"
jp "secret/$rel-agent-token" '{.data.token}' | base64 -d > "$work/agent-token"
# A free port for its /readyz (racy as any picked port; a lost race fails the start below, visibly).
for _ in $(seq 50); do
  port=$(( 20000 + RANDOM % 40000 ))
  [ -z "$(ss -Hltn "sport = :$port" 2>/dev/null)" ] && break
done
"$ctl" --kubeconfig "$work/controller.kubeconfig" --leader-elect --leader-election-namespace "$ns" \
  --agent-service "$rel-agent" --agent-service-namespace "$ns" --agent-token-file "$work/agent-token" \
  --metrics-listen "127.0.0.1:$port" > "$work/controller.log" 2>&1 < /dev/null &
controller_pid=$!
ok=0
for _ in $(seq 300); do
  kill -0 "$controller_pid" 2>/dev/null || fail "conduit-controller exited: $(last "$work/controller.log" 2)"
  holder="$(jp lease/conduit-controller '{.spec.holderIdentity}' 2>/dev/null)"
  phase="$(kc get transferjob point-to-point -n team-a -o jsonpath='{.status.phase}' 2>/dev/null)"
  fin="$(kc get transferjob point-to-point -n team-a -o jsonpath='{.metadata.finalizers}' 2>/dev/null)"
  ready="$(curl -s --max-time 2 "http://127.0.0.1:$port/readyz" 2>/dev/null)"
  if [ -n "$holder" ] && [ -n "$phase" ] && [ -n "$fin" ] && [ "$ready" = ok ]; then ok=1; break; fi
  sleep 0.1
done
[ "$ok" -eq 1 ] || fail "controller with its ServiceAccount: lease holder '$holder', job phase '$phase', finalizers '$fin', readyz '$ready' after 30 s: $(last "$work/controller.log" 2)"
nevents="$(kc get events -n team-a --field-selector involvedObject.name=point-to-point -o name 2>/dev/null | wc -l)"
if grep -qiE '403|forbidden' "$work/controller.log"; then
  fail "the controller was refused with its RBAC: $(grep -m1 -iE '403|forbidden' "$work/controller.log")"
fi
kill -TERM "$controller_pid" 2>/dev/null
wait "$controller_pid" 2>/dev/null
controller_pid=""
pass "real conduit-controller with its ServiceAccount token: leads ($holder), ready, job $phase with finalizer, $nevents events, no 403"

# The CRD hook's objects, stored for real (the Job just sits there: no Job controller), then the Job's own
# kubectl arguments run with its ServiceAccount's token against the CRDs helm installed: the upgrade path.
hl template "$rel" "$chart" -n "$ns" --show-only templates/crd-upgrade-job.yaml > "$work/hook.yaml" 2>&1 \
  || fail "render the CRD hook: $(last "$work/hook.yaml")"
kc apply -n "$ns" -f "$work/hook.yaml" > "$work/hook.out" 2>&1 || fail "apply the CRD hook objects: $(last "$work/hook.out")"
mkdir -p "$work/crds"
# shellcheck disable=SC2016  # a go-template, not shell
for f in $(kc get configmap "$rel-crds" -n "$ns" -o go-template='{{range $k, $v := .data}}{{$k}} {{end}}'); do
  kc get configmap "$rel-crds" -n "$ns" -o go-template="{{index .data \"$f\"}}" > "$work/crds/$f"
  # go-template prints the value without the newline that the |- block dropped: put it back.
  # shellcheck disable=SC1003  # sed's "append a newline if missing"
  cmp -s <(sed -e '$a\' "$work/crds/$f") "$chart/crds/$f" || fail "hook ConfigMap's $f differs from the chart's crds/$f"
done
mapfile -t hook_args < <(kc get job "$rel-crds" -n "$ns" -o jsonpath='{range .spec.template.spec.containers[0].args[*]}{@}{"\n"}{end}')
[ "${hook_args[0]:-}" = apply ] || fail "hook Job args: ${hook_args[*]}"
hook_args=("${hook_args[@]//=\/crds\//=$work/crds/}")
hook_token="$(kc create token "$rel-crds" -n "$ns" --duration=10m 2>&1)" || fail "token for $rel-crds: $hook_token"
"$KUBECTL" --request-timeout=20s --token="$hook_token" "${hook_args[@]}" > "$work/hook-run.out" 2>&1 \
  || fail "the hook's kubectl ${hook_args[*]} as $rel-crds: $(last "$work/hook-run.out" 2)"
grep -q 'serverside-applied' "$work/hook-run.out" || fail "hook apply said: $(last "$work/hook-run.out" 2)"
hsa="system:serviceaccount:$ns:$rel-crds"
kc auth can-i --as="$hsa" patch customresourcedefinitions/servicemonitors.monitoring.coreos.com > /dev/null 2>&1 \
  && fail "the CRD hook may patch CRDs other than Conduit's"
kc auth can-i --as="$hsa" delete customresourcedefinitions/transferjobs.conduit.dev > /dev/null 2>&1 \
  && fail "the CRD hook may delete CRDs"
kc delete -n "$ns" -f "$work/hook.yaml" > /dev/null 2>&1 || fail "delete the CRD hook objects"
pass "CRD hook: ConfigMap holds the chart's crds/, its Job's kubectl apply runs with its own ServiceAccount (only Conduit CRDs, no delete)"

# ---- upgrade ---------------------------------------------------------------------------------------------
hl upgrade "$rel" "$chart" -n "$ns" -f "$values/monitoring.yaml" --set controller.replicas=3 --timeout 2m \
  > "$work/upgrade.out" 2>&1 || fail "helm upgrade: $(last "$work/upgrade.out" 2)"
rev="$(hl history "$rel" -n "$ns" -o yaml 2>/dev/null | sed -n 's/^  revision: //p' | sort -n | tail -n1)"
[ "$rev" = 2 ] || fail "revision after upgrade: '$rev'"
status="$(hl status "$rel" -n "$ns" 2>&1 | sed -n 's/^STATUS: //p')"
[ "$status" = deployed ] || fail "helm status after upgrade: '$status'"
[ "$(jp "$dep" '{.spec.replicas}')" = 3 ] || fail "controller replicas after upgrade: $(jp "$dep" '{.spec.replicas}')"
token2="$(jp "secret/$rel-agent-token" '{.data.token}' | base64 -d)"
[ "$token2" = "$token" ] || fail "helm upgrade changed the generated agent token"
pass "helm upgrade: revision 2 deployed, controller replicas 3, agent token kept"

# ---- uninstall -------------------------------------------------------------------------------------------
hl get manifest "$rel" -n "$ns" > "$work/manifest-2.yaml" || fail "helm get manifest (revision 2)"
hl uninstall "$rel" -n "$ns" --wait --timeout 2m > "$work/uninstall.out" 2>&1 \
  || fail "helm uninstall: $(last "$work/uninstall.out" 2)"
left="$(kc get -f "$work/manifest-2.yaml" --ignore-not-found -o name 2>&1)"
[ -z "$left" ] || fail "objects left after helm uninstall: $(echo "$left" | tr '\n' ' ')"
hl status "$rel" -n "$ns" > /dev/null 2>&1 && fail "helm still knows release $rel after uninstall"
# Helm never deletes crds/ (that would delete every TransferJob): they stay until the user removes them.
kc get crd transferjobs.conduit.dev > /dev/null 2>&1 || fail "helm uninstall deleted the CRDs"
pass "helm uninstall: all $(grep -c '^kind: ' "$work/manifest-2.yaml") objects gone, release gone, CRDs kept"

echo "helm test: took $(( $(date +%s) - t_start )) s"
echo "helm test: $passed passed, 0 failed"
