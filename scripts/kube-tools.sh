#!/usr/bin/env bash
# Builds the Kubernetes tools the end-to-end tests run against: kube-apiserver and kubectl from the upstream
# k8s.io/kubernetes Go module at a pinned release, etcd (Debian's, or built from its Go module), and helm 3
# from the helm.sh/helm/v3 Go module. Nothing is downloaded but Go modules from the module proxy. Everything
# (binaries, GOMODCACHE, GOCACHE, the throwaway build module) lives in a cache outside the repo, keyed by the
# version:
#   ${CONDUIT_KUBE_CACHE:-$HOME/.cache/conduit-kube}/<kube version>/bin/{kube-apiserver,kubectl,etcd}
#   ${CONDUIT_KUBE_CACHE:-$HOME/.cache/conduit-kube}/helm-<helm version>/bin/helm
# Idempotent: a binary that is already there is not built again. Prints the paths at the end.
#
#   scripts/kube-tools.sh           build what is missing, print KUBE_APISERVER=..., KUBECTL=..., ETCD=...,
#                                   HELM=...
#   scripts/kube-tools.sh --print   print the paths only; exit 1 if a binary is missing
#   scripts/kube-tools.sh --node [--print]
#                                   also kubelet, kube-scheduler and kube-controller-manager (a real node:
#                                   scripts/kube-node.sh), from the same module, pin and cache, and crictl
#                                   (sigs.k8s.io/cri-tools, the CRI client the node's stop removes pods
#                                   with); prints KUBELET=..., KUBE_SCHEDULER=..., KUBE_CONTROLLER_MANAGER=...,
#                                   CRICTL=... too. Only on request, so suites that need no node do not pay
#                                   their build.
#
# etcd: Debian's etcd-server (/usr/bin/etcd) when it is installed and new enough, else built from
# go.etcd.io/etcd/server/v3 into the same cache. CONDUIT_ETCD_SOURCE=go always builds it (debian: never).
#
# Environment: CONDUIT_KUBE_CACHE (cache root), CONDUIT_KUBE_VERSION, CONDUIT_ETCD_VERSION,
# CONDUIT_HELM_VERSION (override the pins),
# CONDUIT_ETCD_SOURCE (auto|debian|go), GO (the go binary), CONDUIT_KUBE_JOBS (go build -p, default 2).
set -euo pipefail

# k8s.io/kubernetes v1.34.2 needs go >= 1.24.0 (the machine has 1.26); its staging modules are published as
# v0.34.2. Its apiserver runs on etcd 3.4.22+ or 3.5.6+ (Kubernetes' minimum recommended versions); on 3.4 it
# only turns off features that need etcd's RequestWatchProgress (consistent LIST from the watch cache):
# Debian 12's etcd-server 3.4.23 serves LIST/WATCH/CRUD for the tests. The go-built etcd (3.6, what a
# 1.34 cluster runs) needs go >= 1.26.0.
KUBE_VERSION="${CONDUIT_KUBE_VERSION:-v1.34.2}"
ETCD_VERSION="${CONDUIT_ETCD_VERSION:-v3.6.16}"
ETCD_SOURCE="${CONDUIT_ETCD_SOURCE:-auto}"
# helm v3.19.5 is built against k8s.io/client-go v0.34.2, the same minor as the apiserver above (Helm's own
# version-skew policy), and needs go >= 1.24.0. Its go.mod has no replace lines, so `go build` of its
# cmd/helm package from a throwaway module that requires it builds exactly the release.
HELM_VERSION="${CONDUIT_HELM_VERSION:-v3.19.5}"
# crictl v1.34.0: the cri-tools release of the same minor as the kubelet (it speaks CRI v1, as containerd
# 1.6 does); its go.mod has no replace lines and needs go >= 1.24.1.
CRICTL_VERSION="${CONDUIT_CRICTL_VERSION:-v1.34.0}"
DEBIAN_ETCD=/usr/bin/etcd
JOBS="${CONDUIT_KUBE_JOBS:-2}"

GO="${GO:-}"
if [ -z "$GO" ]; then
  if command -v go >/dev/null 2>&1; then GO="$(command -v go)"; else GO=/usr/local/go/bin/go; fi
fi

CACHE_ROOT="${CONDUIT_KUBE_CACHE:-$HOME/.cache/conduit-kube}"
CACHE="$CACHE_ROOT/$KUBE_VERSION"
BIN="$CACHE/bin"
APISERVER="$BIN/kube-apiserver"
KUBECTL="$BIN/kubectl"
ETCD="$BIN/etcd"
HELM_CACHE="$CACHE_ROOT/helm-$HELM_VERSION"
HELM="$HELM_CACHE/bin/helm"
KUBELET="$BIN/kubelet"
KUBE_SCHEDULER="$BIN/kube-scheduler"
KUBE_CONTROLLER_MANAGER="$BIN/kube-controller-manager"
CRICTL="$BIN/crictl-$CRICTL_VERSION"

node=0
print_only=0
for arg in "$@"; do
  case "$arg" in
    --node) node=1 ;;
    --print) print_only=1 ;;
    *) echo "kube-tools: unknown argument $arg (usage: $0 [--node] [--print])" >&2; exit 2 ;;
  esac
done
# The k8s.io/kubernetes commands wanted: the node's only when asked.
kube_cmds=(kube-apiserver kubectl)
[ "$node" -eq 0 ] || kube_cmds+=(kubelet kube-scheduler kube-controller-manager)
kube_missing() {
  local c
  for c in "${kube_cmds[@]}"; do [ -x "$BIN/$c" ] || return 0; done
  [ "$node" -eq 0 ] || [ -x "$CRICTL" ] || return 0
  return 1
}

# debian_etcd_ok: /usr/bin/etcd runs and is 3.4.22+ or 3.5.6+ (3.6+ too).
debian_etcd_ok() {
  [ -x "$DEBIAN_ETCD" ] || return 1
  local v major minor patch
  v="$("$DEBIAN_ETCD" --version 2>/dev/null | sed -n 's/^etcd Version: \([0-9][0-9.]*\).*/\1/p')"
  IFS=. read -r major minor patch <<< "$v"
  [ "${major:-0}" -eq 3 ] || return 1
  case "$minor" in
    4) [ "${patch:-0}" -ge 22 ] ;;
    5) [ "${patch:-0}" -ge 6 ] ;;
    *) [ "${minor:-0}" -ge 6 ] ;;
  esac
}
case "$ETCD_SOURCE" in
  auto) if debian_etcd_ok; then ETCD="$DEBIAN_ETCD"; fi ;;
  debian) ETCD="$DEBIAN_ETCD" ;;
  go) ;;
  *) echo "kube-tools: CONDUIT_ETCD_SOURCE must be auto, debian or go" >&2; exit 2 ;;
esac

print_paths() {
  echo "KUBE_APISERVER=$APISERVER"
  echo "KUBECTL=$KUBECTL"
  echo "ETCD=$ETCD"
  echo "HELM=$HELM"
  if [ "$node" -eq 1 ]; then
    echo "KUBELET=$KUBELET"
    echo "KUBE_SCHEDULER=$KUBE_SCHEDULER"
    echo "KUBE_CONTROLLER_MANAGER=$KUBE_CONTROLLER_MANAGER"
    echo "CRICTL=$CRICTL"
  fi
}

if [ "$print_only" -eq 1 ]; then
  print_paths
  ! kube_missing && [ -x "$ETCD" ] && [ -x "$HELM" ]
  exit
fi

log() { echo "kube-tools: $*" >&2; }

if ! kube_missing && [ -x "$ETCD" ] && [ -x "$HELM" ]; then
  log "cached in $BIN and $HELM_CACHE/bin"
  print_paths
  exit 0
fi

[ -x "$GO" ] || { log "no go toolchain (set GO=/path/to/go)"; exit 1; }

# Everything Go writes stays in the cache, keyed by the version. The module cache is read-only by default,
# which makes `rm -rf` of the cache fail: -modcacherw keeps it removable.
export GOMODCACHE="$CACHE/gomodcache"
export GOCACHE="$CACHE/gocache"
export GOPATH="$CACHE/gopath"
export GOFLAGS="-modcacherw -buildvcs=false"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOMAXPROCS="${GOMAXPROCS:-$JOBS}"
export CGO_ENABLED=0
mkdir -p "$BIN" "$GOMODCACHE" "$GOCACHE"

start_all=$(date +%s)

# ---- kube-apiserver, kubectl (and the node's commands) --------------------------------------------------------------------------
build_kube() {
  local mod="$CACHE/build-kube"
  local minor="${KUBE_VERSION#v1.}"           # 34.2
  local staging="v0.${minor}"                 # v0.34.2
  mkdir -p "$mod"

  log "downloading k8s.io/kubernetes@$KUBE_VERSION"
  local info gomod
  info="$("$GO" mod download -json "k8s.io/kubernetes@$KUBE_VERSION")"
  gomod="$(printf '%s\n' "$info" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [ -f "$gomod" ] || { log "no go.mod for k8s.io/kubernetes@$KUBE_VERSION in: $info"; return 1; }

  # The go version kubernetes asks for, and every staging module it replaces with a local folder.
  local gover
  gover="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod" | head -n1)"
  local names
  names="$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/.*$#\1#p' "$gomod" | sort -u)"
  [ -n "$names" ] || { log "no staging replace lines in $gomod"; return 1; }
  log "k8s.io/kubernetes $KUBE_VERSION: go $gover, $(printf '%s\n' "$names" | wc -l) staging modules at $staging"

  {
    echo "// Throwaway module: builds ${kube_cmds[*]} from k8s.io/kubernetes $KUBE_VERSION."
    echo "module conduit.dev/kube-tools"
    echo
    echo "go $gover"
    echo
    # kubernetes' own go.mod carries godebug defaults for its binaries: keep them.
    sed -n '/^godebug /p' "$gomod"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    echo "replace ("
    printf '%s\n' "$names" | while read -r n; do echo "	$n => $n $staging"; done
    echo ")"
  } > "$mod/go.mod"
  : > "$mod/go.sum"

  log "resolving modules"
  local c pkgs=()
  for c in "${kube_cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c@$KUBE_VERSION"); done
  (cd "$mod" && "$GO" get "${pkgs[@]}" >/dev/null)

  # The version stamp `make` puts in (hack/lib/version.sh), so each reports the pinned release.
  local commit
  commit="$(printf '%s\n' "$info" | sed -n 's/^[[:space:]]*"Hash": "\(.*\)",\{0,1\}$/\1/p')"
  local major="${minor%%.*}"
  local ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$major"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    [ -n "$commit" ] && ldflags+=" -X $pkg.gitCommit=$commit"
  done

  local t
  for cmd in "${kube_cmds[@]}"; do
    [ -x "$BIN/$cmd" ] && continue
    t=$(date +%s)
    log "building $cmd $KUBE_VERSION (go build -p $JOBS)"
    (cd "$mod" && "$GO" build -p "$JOBS" -trimpath -ldflags "$ldflags" -o "$BIN/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd")
    mv "$BIN/$cmd.tmp" "$BIN/$cmd"
    log "built $cmd in $(( $(date +%s) - t )) s"
  done
}

# ---- crictl ----------------------------------------------------------------------------------------------
# In the kube cache (its k8s.io/cri-api and most of its modules are the kubelet's): a throwaway module that
# requires the release builds exactly it.
build_crictl() {
  local mod="$CACHE/build-crictl"
  mkdir -p "$mod"
  cat > "$mod/go.mod" <<EOF
// Throwaway module: builds crictl $CRICTL_VERSION.
module conduit.dev/crictl-tools

go 1.24.1

require sigs.k8s.io/cri-tools $CRICTL_VERSION
EOF
  : > "$mod/go.sum"
  log "resolving sigs.k8s.io/cri-tools@$CRICTL_VERSION"
  (cd "$mod" && "$GO" get "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION" >/dev/null)
  local t
  t=$(date +%s)
  log "building crictl $CRICTL_VERSION"
  (cd "$mod" && "$GO" build -p "$JOBS" -trimpath \
     -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
     -o "$CRICTL.tmp" sigs.k8s.io/cri-tools/cmd/crictl)
  mv "$CRICTL.tmp" "$CRICTL"
  log "built crictl in $(( $(date +%s) - t )) s"
}

# ---- etcd ------------------------------------------------------------------------------------------------
build_etcd() {
  local mod="$CACHE/build-etcd"
  mkdir -p "$mod"
  # The module root of go.etcd.io/etcd/server/v3 is package main (the etcd binary).
  cat > "$mod/go.mod" <<EOF
// Throwaway module: builds etcd $ETCD_VERSION.
module conduit.dev/etcd-tools

go 1.24

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
EOF
  : > "$mod/go.sum"
  log "resolving go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  (cd "$mod" && "$GO" get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null)
  local t
  t=$(date +%s)
  log "building etcd $ETCD_VERSION"
  (cd "$mod" && "$GO" build -p "$JOBS" -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$BIN/etcd.tmp" "$BIN/etcd"
  log "built etcd in $(( $(date +%s) - t )) s"
}

# ---- helm -------------------------------------------------------------------------------------------------
# In a subshell with its own cache folder (keyed by the helm version), so a kube pin change does not rebuild
# helm and vice versa.
build_helm() (
  mod="$HELM_CACHE/build-helm"
  export GOMODCACHE="$HELM_CACHE/gomodcache"
  export GOCACHE="$HELM_CACHE/gocache"
  export GOPATH="$HELM_CACHE/gopath"
  mkdir -p "$mod" "$HELM_CACHE/bin" "$GOMODCACHE" "$GOCACHE"
  cat > "$mod/go.mod" <<EOF
// Throwaway module: builds helm $HELM_VERSION.
module conduit.dev/helm-tools

go 1.24.0

require helm.sh/helm/v3 $HELM_VERSION
EOF
  : > "$mod/go.sum"
  log "resolving helm.sh/helm/v3@$HELM_VERSION"
  (cd "$mod" && "$GO" get "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >/dev/null)

  # The stamps helm's Makefile puts in: the release version, and the Kubernetes version its client-go module
  # stands for (v0.34.2 -> 1.34), which `helm template` and `helm lint` take as the default
  # .Capabilities.KubeVersion and for deprecation checks (unstamped they say v1.20).
  cgo="$(cd "$mod" && "$GO" list -m -f '{{.Version}}' k8s.io/client-go)"   # v0.34.2
  major="$(( $(printf '%s' "${cgo#v}" | cut -d. -f1) + 1 ))"
  minor="$(printf '%s' "$cgo" | cut -d. -f2)"
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $pkg.k8sVersionMajor=$major -X $pkg.k8sVersionMinor=$minor"
  done

  t=$(date +%s)
  log "building helm $HELM_VERSION (client-go $cgo, go build -p $JOBS)"
  (cd "$mod" && "$GO" build -p "$JOBS" -trimpath -ldflags "$ldflags" -o "$HELM.tmp" helm.sh/helm/v3/cmd/helm)
  mv "$HELM.tmp" "$HELM"
  log "built helm in $(( $(date +%s) - t )) s"
)

if kube_missing; then
  for c in "${kube_cmds[@]}"; do
    if [ ! -x "$BIN/$c" ]; then build_kube; break; fi
  done
  if [ "$node" -eq 1 ] && [ ! -x "$CRICTL" ]; then build_crictl; fi
fi
if [ ! -x "$ETCD" ]; then
  if [ "$ETCD_SOURCE" = debian ]; then log "no $DEBIAN_ETCD: apt-get install etcd-server"; exit 1; fi
  build_etcd
fi
if [ ! -x "$HELM" ]; then build_helm; fi

log "done in $(( $(date +%s) - start_all )) s"
print_paths
