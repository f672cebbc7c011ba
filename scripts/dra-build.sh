#!/usr/bin/env bash
# Builds the DRA driver (dra/, a Go module: docs/dra.md) into a cache outside the repo, keyed by a hash of its
# sources and the go version, so an unchanged tree is never built twice:
#   ${CONDUIT_DRA_CACHE:-$HOME/.cache/conduit-dra}/<key>/bin/{conduit-dra-driver,conduit-fake-sysfs}
# GOMODCACHE and GOCACHE live in the same cache root (shared by every key, so a source change rebuilds only
# the driver's own packages). Modules come from the module proxy; the kube tools' module cache
# (scripts/kube-tools.sh, the same v0.34.2 staging modules) is asked first when it exists, which saves the
# download on a machine that built them.
#
#   scripts/dra-build.sh           build when missing; print DRA_DRIVER=..., FAKE_SYSFS=...
#   scripts/dra-build.sh --print   print the paths only; exit 1 when not built
#   scripts/dra-build.sh --test    also gofmt, go vet and go test ./... (the discovery unit tests)
#
# Environment: CONDUIT_DRA_CACHE, GO (the go binary), CONDUIT_KUBE_CACHE (where kube-tools.sh caches).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/dra"
log() { echo "dra-build: $*" >&2; }

print_only=0 test=0
for arg in "$@"; do
  case "$arg" in
    --print) print_only=1 ;;
    --test) test=1 ;;
    *) log "unknown argument $arg (usage: $0 [--print] [--test])"; exit 2 ;;
  esac
done

GO="${GO:-}"
if [ -z "$GO" ]; then
  if command -v go >/dev/null 2>&1; then GO="$(command -v go)"; else GO=/usr/local/go/bin/go; fi
fi
[ -x "$GO" ] || { log "no go toolchain (set GO=/path/to/go)"; exit 1; }

cache_root="${CONDUIT_DRA_CACHE:-$HOME/.cache/conduit-dra}"
# The key: every file of the module that the build reads (sorted, with its path), and the toolchain.
key="$( { "$GO" version; cd "$src" && find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) -print0 \
          | LC_ALL=C sort -z | xargs -0 sha256sum; } | sha256sum | cut -c1-16)"
bin="$cache_root/$key/bin"
driver="$bin/conduit-dra-driver"
fake="$bin/conduit-fake-sysfs"

print_paths() {
  echo "DRA_DRIVER=$driver"
  echo "FAKE_SYSFS=$fake"
}

if [ "$print_only" -eq 1 ]; then
  print_paths
  [ -x "$driver" ] && [ -x "$fake" ]
  exit
fi

export GOMODCACHE="$cache_root/gomodcache"
export GOCACHE="$cache_root/gocache"
export GOPATH="$cache_root/gopath"
export GOFLAGS="-modcacherw -buildvcs=false -mod=readonly"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export CGO_ENABLED=0
kube_mods="${CONDUIT_KUBE_CACHE:-$HOME/.cache/conduit-kube}/v1.34.2/gomodcache/cache/download"
if [ -z "${GOPROXY:-}" ] && [ -d "$kube_mods" ]; then
  export GOPROXY="file://$kube_mods,https://proxy.golang.org,direct"
fi

cd "$src"
if [ "$test" -eq 1 ]; then
  t=$(date +%s)
  unformatted="$(gofmt -l .)"
  [ -z "$unformatted" ] || { log "not gofmt-clean: $unformatted"; exit 1; }
  "$GO" vet ./...
  "$GO" test ./... >&2
  log "gofmt, vet and tests in $(( $(date +%s) - t )) s"
fi

if [ -x "$driver" ] && [ -x "$fake" ]; then
  log "cached in $bin"
else
  t=$(date +%s)
  mkdir -p "$bin"
  tmp="$(mktemp -d "$cache_root/$key/build.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  "$GO" build -trimpath -ldflags "-s -w" -o "$tmp/" ./cmd/conduit-dra-driver ./cmd/conduit-fake-sysfs
  mv "$tmp/conduit-dra-driver" "$tmp/conduit-fake-sysfs" "$bin/"
  log "built $key in $(( $(date +%s) - t )) s"
fi
print_paths
