#!/usr/bin/env bash
# The container images carry every shared library their binary needs. No container engine runs here, so
# instead of building the images this checks their recipe against a real build on Debian 12 (the images'
# base): for docker/agent.Dockerfile and docker/controller.Dockerfile, every library `ldd` resolves for
# BUILD_DIR/bin/conduit-agent and BUILD_DIR/bin/conduit-controller belongs (dpkg -S) to a Debian package that
# the Dockerfile's runtime stage (its last FROM) names in its `apt-get install`. Packages bookworm-slim already
# has (libc6, libgcc-s1, libstdc++6, ...) get no exemption: the Dockerfiles list them too, so the check does
# not depend on what the base image happens to hold. Also: the runtime stage is bookworm-slim, and the
# controller's runs as a non-root numeric user.
#
#   tests/e2e/image_libs_test.sh [BUILD_DIR]     (default: build)
# CONDUIT_DOCKER_DIR checks Dockerfiles from another folder (to see the test fail on a broken copy).
# Prints one line per missing package, "ok - ..." per image, "image libs: N passed, M failed"; exit 1 on failure.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-build}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
docker_dir="${CONDUIT_DOCKER_DIR:-$root/docker}"
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok - $*"; }
fail() { failed=$((failed + 1)); echo "FAIL - $*" >&2; }
finish() { echo "image libs: $passed passed, $failed failed"; [ "$failed" -eq 0 ]; }

# Package names are per release: they only mean something when this machine is what the images build on.
# shellcheck disable=SC1091  # the machine's own file
. /etc/os-release 2>/dev/null
if [ "${ID:-}" != debian ] || [ "${VERSION_ID:-}" != 12 ]; then
  fail "this check maps libraries to Debian 12 packages; this machine is ${PRETTY_NAME:-unknown}"
  finish
  exit 1
fi
if ! command -v dpkg > /dev/null || ! command -v ldd > /dev/null; then fail "needs dpkg and ldd"; finish; exit 1; fi

# runtime_stage FILE: the Dockerfile from its last FROM on, continuation lines joined, comments dropped.
runtime_stage() {
  awk '/^[[:space:]]*FROM[[:space:]]/ { buf = "" } { buf = buf $0 "\n" } END { printf "%s", buf }' "$1" \
    | sed -e '/^[[:space:]]*#/d' | sed -e ':a' -e '/\\$/{N; s/\\\n/ /; ba' -e '}'
}

# apt_packages STAGE_TEXT: the package names of every `apt-get install` in it (options and what follows
# the command's end — &&, ;, || — are not packages).
apt_packages() {
  printf '%s\n' "$1" | grep -E 'apt-get[[:space:]].*install' | while read -r line; do
    printf '%s\n' "$line" | awk '{
      on = 0; apt = 0
      for (i = 1; i <= NF; i++) {
        t = $i
        if (t == "&&" || t == ";" || t == "||" || t == "|") { on = 0; apt = 0; continue }
        if (on) { if (t !~ /^-/) print t; continue }
        if (t ~ /(^|\/)apt(-get)?$/) { apt = 1; continue }
        if (apt && t == "install") { on = 1; continue }
        if (t !~ /^-/) apt = 0
      }
    }'
  done | sort -u
}

# package_of LIB: the Debian package that ships LIB, trying the path ldd printed, the same path with or
# without /usr (merged /usr: a file is registered under one of them), and the symlink's target.
package_of() {
  local lib="$1" p real
  real="$(readlink -f "$lib")"
  for p in "$lib" "/usr$lib" "${lib#/usr}" "$real" "/usr$real" "${real#/usr}"; do
    out="$(dpkg -S "$p" 2>/dev/null | grep -v '^diversion' | head -n1)" || continue
    [ -n "$out" ] || continue
    printf '%s\n' "${out%%:*}"
    return 0
  done
  return 1
}

check_image() {
  local bin="$1" dockerfile="$2" stage packages missing=0 libs n=0 pkg lib line
  [ -x "$bin" ] || { fail "no $bin: build first (scripts/build.sh), or pass the build dir"; return; }
  [ -f "$dockerfile" ] || { fail "no $dockerfile"; return; }
  stage="$(runtime_stage "$dockerfile")"
  printf '%s\n' "$stage" | head -n1 | grep -qE '^[[:space:]]*FROM[[:space:]]+debian:(bookworm|\$\{DEBIAN_RELEASE\})-slim' \
    || { fail "$(basename "$dockerfile"): runtime stage is not debian bookworm-slim: $(printf '%s\n' "$stage" | head -n1)"; return; }
  if printf '%s\n' "$stage" | head -n1 | grep -q 'DEBIAN_RELEASE' \
     && ! grep -qE '^ARG[[:space:]]+DEBIAN_RELEASE=bookworm[[:space:]]*$' "$dockerfile"; then
    fail "$(basename "$dockerfile"): DEBIAN_RELEASE does not default to bookworm"; return
  fi
  packages="$(apt_packages "$stage")"
  [ -n "$packages" ] || { fail "$(basename "$dockerfile"): no apt-get install in its runtime stage"; return; }

  libs="$(ldd "$bin" 2>&1)" || { fail "ldd $bin: $libs"; return; }
  if printf '%s\n' "$libs" | grep -q 'not found'; then
    fail "$bin has unresolved libraries here: $(printf '%s\n' "$libs" | grep 'not found' | tr '\n' ' ')"; return
  fi
  local needed=" "
  while read -r lib; do
    [ -n "$lib" ] || continue
    if ! pkg="$(package_of "$lib")"; then
      echo "  $(basename "$bin"): $lib belongs to no Debian package (built by hand?): an image cannot apt-get it" >&2
      missing=$((missing + 1))
      continue
    fi
    n=$((n + 1))
    case "$needed" in *" $pkg "*) continue ;; esac
    needed+="$pkg "
    if ! printf '%s\n' "$packages" | grep -qxF "$pkg"; then
      echo "  missing: $pkg (for $(basename "$lib")) is not in the runtime apt-get install of $(basename "$dockerfile")" >&2
      missing=$((missing + 1))
    fi
  done < <(printf '%s\n' "$libs" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u)

  # Listed but linked by nothing: allowed (a package may serve run-time loading), shown so the list stays lean.
  local extra=""
  while read -r line; do
    case "$needed" in *" $line "*) ;; *) extra+="$line " ;; esac
  done <<< "$packages"
  [ -z "$extra" ] || echo "  note: $(basename "$dockerfile") installs $extra- not linked by $(basename "$bin")"

  if [ "$missing" -gt 0 ]; then
    fail "$(basename "$dockerfile"): $missing package(s) missing for $(basename "$bin")"
  else
    pass "$(basename "$dockerfile"): all $n libraries of $(basename "$bin") come from the $(printf '%s\n' "$packages" | wc -l) packages its runtime stage installs ($(echo "$needed" | wc -w) needed)"
  fi
}

check_image "$build/bin/conduit-agent" "$docker_dir/agent.Dockerfile"
check_image "$build/bin/conduit-controller" "$docker_dir/controller.Dockerfile"

# The controller image runs as a non-root numeric user (the chart's runAsNonRoot can only verify a number).
user="$(runtime_stage "$docker_dir/controller.Dockerfile" 2>/dev/null | sed -n 's/^[[:space:]]*USER[[:space:]]\{1,\}\([^[:space:]]*\).*/\1/p' | tail -n1)"
case "${user%%:*}" in
  ''|0|root|*[!0-9]*) fail "controller.Dockerfile runtime USER is '${user}', want a numeric non-root uid" ;;
  *) pass "controller image runs as uid ${user%%:*}" ;;
esac

finish
