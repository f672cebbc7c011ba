#!/usr/bin/env bash
# The Helm chart carries copies of files whose canonical home is elsewhere in the repo, because a chart can
# only read files inside its own folder:
#   crds/*.yaml                -> helm/conduit/crds/            (Helm installs these on first install)
#   metrics/alerts.yaml        -> helm/conduit/files/alerts.yaml  (the PrometheusRule's groups)
#   metrics/dashboards/*.json  -> helm/conduit/files/dashboards/  (the Grafana dashboard ConfigMaps)
#
#   scripts/sync-chart-files.sh           copy them over (and remove chart copies whose source is gone)
#   scripts/sync-chart-files.sh --check   change nothing; list every copy that differs, exit 1 if any does
#
# Edit the canonical files, then run this; tests/scenarios/e2e/test_helm.py fails while the copies differ.
# CONDUIT_CHART_DIR: the chart to sync or check (default helm/conduit), e.g. a copy a test breaks on purpose.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chart="${CONDUIT_CHART_DIR:-$root/helm/conduit}"
check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

# pairs: "SOURCE_GLOB|DEST_DIR" (the glob from the repo root, the folder in the chart) — every file the glob
# matches is copied into DEST_DIR under its own name; with a wildcard glob, every file in DEST_DIR with the
# glob's extension that has no source is stale.
pairs=(
  "crds/*.yaml|crds"
  "metrics/alerts.yaml|files"
  "metrics/dashboards/*.json|files/dashboards"
)

differ=0
note() { echo "sync-chart-files: $*" >&2; }

for pair in "${pairs[@]}"; do
  glob="${pair%%|*}"
  dest="${pair#*|}"
  shopt -s nullglob
  # shellcheck disable=SC2206  # the glob is meant to expand here
  sources=("$root"/$glob)
  shopt -u nullglob
  if [ ${#sources[@]} -eq 0 ]; then
    note "no source file matches $glob"
    differ=1
    continue
  fi
  [ "$check" -eq 1 ] || mkdir -p "$chart/$dest"
  names=" "
  for src in "${sources[@]}"; do
    name="$(basename "$src")"
    names+="$name "
    copy="$chart/$dest/$name"
    if ! cmp -s "$src" "$copy"; then
      if [ "$check" -eq 1 ]; then
        if [ -f "$copy" ]; then note "differs: ${src#"$root"/} (see: diff -u ${src#"$root"/} ${copy#"$root"/})"
        else note "missing: ${copy#"$root"/} (copy of ${src#"$root"/})"; fi
        differ=1
      else
        cp "$src" "$copy"
        note "copied ${src#"$root"/} -> ${copy#"$root"/}"
      fi
    fi
  done
  # A copy whose source went away (a renamed dashboard, the placeholder) would still ship in the chart.
  ext="${glob##*.}"
  for copy in "$chart/$dest"/*."$ext"; do
    [ -e "$copy" ] || continue
    name="$(basename "$copy")"
    case "$names" in *" $name "*) continue ;; esac
    # Only the files of this pair: files/ holds alerts.yaml only, so other yaml there is someone else's.
    case "$glob" in *'*'*) ;; *) continue ;; esac
    if [ "$check" -eq 1 ]; then
      note "stale: ${copy#"$root"/} has no source in $(dirname "$glob")/"
      differ=1
    else
      rm -f "$copy"
      note "removed stale ${copy#"$root"/}"
    fi
  done
done

if [ "$check" -eq 1 ] && [ "$differ" -ne 0 ]; then
  note "the chart's copies are out of date: run scripts/sync-chart-files.sh"
  exit 1
fi
exit "$differ"
