#!/usr/bin/env bash
# Container images of this tree for a test node (scripts/kube-node.sh), made without a registry or a base
# image: conduit-agent and conduit-controller from the binaries already built in BUILD_DIR/bin, and the pod
# sandbox image (docker/pause/pause.c, built static) that containerd runs in every pod.
#
#   scripts/kube-images.sh --pause      the sandbox image only (PAUSE_IMAGE=..., PAUSE_ARCHIVE=...)
#   scripts/kube-images.sh --dra-driver BINARY
#                                       the pause image and the DRA driver's (a static binary, from
#                                       scripts/dra-build.sh): also DRA_DRIVER_IMAGE=..., DRA_DRIVER_ARCHIVE=...
#   scripts/kube-images.sh BUILD_DIR    build what is not cached; print, one a line,
#                                       PAUSE_IMAGE=localhost/conduit-pause:<key>  PAUSE_ARCHIVE=<docker archive>
#                                       AGENT_IMAGE=...  AGENT_ARCHIVE=...  CONTROLLER_IMAGE=...  CONTROLLER_ARCHIVE=...
#                                       WORKLOAD_IMAGE=...  WORKLOAD_ARCHIVE=...
#
# conduit-workload is what helm/conduit/examples/workload-with-import-socket.yaml asks of "an image of yours
# with the SDK in it": `python` (the host's python3 and its standard library) with this tree's python/conduit,
# and numpy and requests from the tests' venv (scripts/python-env.sh: the versions the SDK's tests run), where
# Debian's python3 looks for packages (/usr/lib/python3/dist-packages). No shell, no pip.
#
# Import an archive with `ctr -n k8s.io images import ARCHIVE`; pods name the image with imagePullPolicy: Never.
#
# Why the host's files and not docker/*.Dockerfile: those build from debian:bookworm(-slim), which only a
# registry serves, and compile the tree again inside the image (tens of minutes on 2 cores). This machine is the
# Debian 12 the Dockerfiles build on, so its files are the same packages' files: each image holds its binary
# and exactly the shared libraries `ldd` resolves for it (for the agent also the libibverbs providers it
# dlopens, with theirs), at the paths the dynamic loader searches. The image's entrypoint, arguments, user and
# port are read from the Dockerfile's runtime stage, so the image starts as the released one does.
# tests/scenarios/e2e/test_image_libs.py checks that the Dockerfiles' package lists cover the same libraries.
#
# Cache: ${CONDUIT_KUBE_CACHE:-$HOME/.cache/conduit-kube}/images/<name>-<key>.tar, the key a hash of the
# binary, every file put in the image, the Dockerfile and this script: a rebuilt binary makes a new image,
# an unchanged one costs a hash. buildah keeps its storage under images/buildah (vfs: no mounts left behind).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
log() { echo "kube-images: $*" >&2; }
die() { log "$*"; exit 1; }

[ $# -eq 1 ] || [ $# -eq 2 ] || die "usage: $0 --pause | --dra-driver BINARY | BUILD_DIR"
pause_only=0 dra_driver=""
if [ "$1" = --pause ]; then
  pause_only=1
elif [ "$1" = --dra-driver ]; then
  [ $# -eq 2 ] && [ -x "$2" ] || die "--dra-driver needs the driver's binary (scripts/dra-build.sh)"
  pause_only=1
  dra_driver="$2"
else
  build="$(cd "$1" 2>/dev/null && pwd)" || die "no build directory $1"
fi
command -v buildah >/dev/null || die "buildah is missing (scripts/install-deps.sh --node)"
command -v gcc >/dev/null || die "gcc is missing (scripts/install-deps.sh)"

cache="${CONDUIT_KUBE_CACHE:-$HOME/.cache/conduit-kube}/images"
mkdir -p "$cache"
# One of these at a time per cache (two test runs on one machine): the second finds the first's archives
# instead of building them into the same buildah storage and files beside it.
exec 9> "$cache/.lock"
flock 9
bah=(buildah --root "$cache/buildah/root" --runroot "$cache/buildah/run" --storage-driver vfs)

# key FILE...: 16 hex digits of a hash over the files' contents, and this script's.
key() { sha256sum "$@" "${BASH_SOURCE[0]}" | cut -d' ' -f1 | sha256sum | cut -c1-16; }

# libs ELF...: every shared library the ELF files load (ldd's resolved paths) and the dynamic loader.
libs() {
  local f
  for f in "$@"; do
    ldd "$f" | sed -n 's#.*=> \(/[^ ]*\) .*#\1#p; s#^[[:space:]]*\(/[^ ]*\) (.*#\1#p'
  done | sort -u
}

# dockerfile_runtime DOCKERFILE DIRECTIVE: the directive's argument in the runtime stage (after the last FROM).
dockerfile_runtime() {
  awk -v d="$2" '/^FROM /{stage=""} {stage = stage "\n" $0} END{print stage}' "$1" \
    | sed -n "s/^$2 //p" | tail -n1
}

# image NAME REF ARCHIVE ROOTFS [buildah config args...]: ROOTFS as image REF, saved as a docker archive.
image() {
  local name="$1" ref="$2" archive="$3" rootfs="$4"
  shift 4
  local t c
  t=$(date +%s%N)
  c="$("${bah[@]}" from --quiet scratch)"
  if ! { "${bah[@]}" copy --quiet "$c" "$rootfs/" / >/dev/null && "${bah[@]}" config "$@" "$c" \
         && "${bah[@]}" commit --quiet --rm --format docker "$c" "$ref" >/dev/null; }; then
    "${bah[@]}" rm "$c" >/dev/null 2>&1 || true
    die "buildah could not make $ref"
  fi
  rm -f "$archive.tmp"
  "${bah[@]}" push --quiet "$ref" "docker-archive:$archive.tmp:$ref" >/dev/null
  "${bah[@]}" rmi --force "$ref" >/dev/null 2>&1 || true
  mv "$archive.tmp" "$archive"
  # The cache keeps the three newest archives of each image.
  ls -t "${archive%-*}"-*.tar | tail -n +4 | xargs -r rm -f
  log "built $ref in $(( ($(date +%s%N) - t) / 1000000 )) ms ($(du -h "$archive" | cut -f1))"
}

# ---- pause ---------------------------------------------------------------------------------------------------
pause_src="$root/docker/pause/pause.c"
pause_key="$(key "$pause_src" "$(command -v gcc)")"
PAUSE_IMAGE="localhost/conduit-pause:$pause_key"
PAUSE_ARCHIVE="$cache/conduit-pause-$pause_key.tar"
if [ ! -s "$PAUSE_ARCHIVE" ]; then
  work="$(mktemp -d "$cache/pause.XXXXXX")"
  mkdir -p "$work/rootfs"
  gcc -static -O2 -Wall -Wextra -Werror -s -o "$work/rootfs/pause" "$pause_src"
  image pause "$PAUSE_IMAGE" "$PAUSE_ARCHIVE" "$work/rootfs" --entrypoint '["/pause"]' --user 65535:65535
  rm -rf "$work"
fi

# ---- conduit-dra-driver: a static binary, alone in its image, started as docker/dra-driver.Dockerfile says.
if [ -n "$dra_driver" ]; then
  dockerfile="$root/docker/dra-driver.Dockerfile"
  k="$(key "$dra_driver" "$dockerfile")"
  DRA_DRIVER_IMAGE="localhost/conduit-dra-driver:$k"
  DRA_DRIVER_ARCHIVE="$cache/conduit-dra-driver-$k.tar"
  if [ ! -s "$DRA_DRIVER_ARCHIVE" ]; then
    # Alone in its image: it must need no dynamic loader (binutils' readelf, as strip is, for the agent's).
    readelf -l "$dra_driver" | grep -q 'Requesting program interpreter' && die "$dra_driver is not a static binary"
    work="$(mktemp -d "$cache/conduit-dra-driver.XXXXXX")"
    mkdir -p "$work/rootfs/usr/bin"
    cp "$dra_driver" "$work/rootfs/usr/bin/conduit-dra-driver"
    image conduit-dra-driver "$DRA_DRIVER_IMAGE" "$DRA_DRIVER_ARCHIVE" "$work/rootfs" --env PATH=/usr/bin \
      --user "$(dockerfile_runtime "$dockerfile" USER)" --entrypoint "$(dockerfile_runtime "$dockerfile" ENTRYPOINT)"
    rm -rf "$work"
  fi
  echo "DRA_DRIVER_IMAGE=$DRA_DRIVER_IMAGE"
  echo "DRA_DRIVER_ARCHIVE=$DRA_DRIVER_ARCHIVE"
fi

if [ "$pause_only" -eq 1 ]; then
  echo "PAUSE_IMAGE=$PAUSE_IMAGE"
  echo "PAUSE_ARCHIVE=$PAUSE_ARCHIVE"
  exit 0
fi

# ---- conduit-agent, conduit-controller -----------------------------------------------------------------------
# conduit_image NAME [EXTRA ELF...]: sets IMAGE and ARCHIVE for BUILD_DIR/bin/NAME, building when not cached.
conduit_image() {
  local name="$1"
  shift
  local bin="$build/bin/$name" dockerfile="$root/docker/${name#conduit-}.Dockerfile"
  [ -x "$bin" ] || die "no $bin: build $name first"
  [ -f "$dockerfile" ] || die "no $dockerfile"
  local files
  mapfile -t files < <(libs "$bin" "$@")
  local k
  k="$(key "$bin" "$dockerfile" "${files[@]}" "$@")"
  IMAGE="localhost/$name:$k"
  ARCHIVE="$cache/$name-$k.tar"
  [ -s "$ARCHIVE" ] && return 0

  local work f
  work="$(mktemp -d "$cache/$name.XXXXXX")"
  local rootfs="$work/rootfs"
  mkdir -p "$rootfs/usr/bin" "$rootfs/tmp" "$rootfs/etc"
  chmod 1777 "$rootfs/tmp"
  # Stripped as the Dockerfiles strip it (debug sections only).
  strip --strip-debug -o "$rootfs/usr/bin/$name" "$bin"
  for f in "${files[@]}" "$@"; do
    mkdir -p "$rootfs$(dirname "$f")"
    cp -L "$f" "$rootfs$f"
  done
  # Plugins' configuration (/etc/libibverbs.d names the providers to load).
  if [ $# -gt 0 ] && [ -d /etc/libibverbs.d ]; then cp -r /etc/libibverbs.d "$rootfs/etc/"; fi
  printf 'root:x:0:0:root:/root:/usr/sbin/nologin\n' > "$rootfs/etc/passwd"
  printf 'root:x:0:\n' > "$rootfs/etc/group"

  local config=(--env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
                --port "$(dockerfile_runtime "$dockerfile" EXPOSE)"
                --user "$(dockerfile_runtime "$dockerfile" USER)"
                --entrypoint "$(dockerfile_runtime "$dockerfile" ENTRYPOINT)")
  local cmd
  cmd="$(dockerfile_runtime "$dockerfile" CMD)"
  [ -z "$cmd" ] || config+=(--cmd "$cmd")
  image "$name" "$IMAGE" "$ARCHIVE" "$rootfs" "${config[@]}"
  rm -rf "$work"
}

t0=$(date +%s%N)
mapfile -t providers < <(ls /usr/lib/x86_64-linux-gnu/libibverbs/*.so 2>/dev/null || true)
conduit_image conduit-agent "${providers[@]}"
AGENT_IMAGE="$IMAGE" AGENT_ARCHIVE="$ARCHIVE"
conduit_image conduit-controller
CONTROLLER_IMAGE="$IMAGE" CONTROLLER_ARCHIVE="$ARCHIVE"

# ---- conduit-workload ----------------------------------------------------------------------------------------
# Keyed by the listing (path, size, mtime) of the interpreter's files and the packages, and the SDK's contents:
# hashing ~100 MB of libraries on every run would cost more than the image is worth.
workload_image() {
  local python py site sdk="$root/python/conduit"
  python="$(readlink -f /usr/bin/python3)"
  py="$(basename "$python")"
  site="$("$here/python-env.sh")/lib/$py/site-packages"
  # python/pyproject.toml's dependencies (numpy, requests, PyYAML) and theirs.
  local packages=(numpy numpy.libs requests urllib3 idna charset_normalizer certifi yaml _yaml) p
  for p in "${packages[@]}"; do [ -e "$site/$p" ] || die "no $site/$p (scripts/python-env.sh)"; done
  # The standard library without what a program never imports: its tests, IDLE, Tk, the static library.
  local skip=(--exclude="$py/config-*" --exclude="$py/test" --exclude="$py/idlelib" --exclude="$py/tkinter"
              --exclude="$py/ensurepip" --exclude="$py/lib2to3" --exclude=__pycache__)
  local k
  k="$( { stat -c '%n %s %Y' "$python"
          tar -C /usr/lib "${skip[@]}" -cvf /dev/null "$py"
          (cd "$site" && find "${packages[@]}" -name __pycache__ -prune -o -type f -printf '%p %s %T@\n')
          find "$sdk" \( -name '*.py' -o -name py.typed \) -print0 | sort -z | xargs -0 sha256sum
          sha256sum "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-16)"
  WORKLOAD_IMAGE="localhost/conduit-workload:$k"
  WORKLOAD_ARCHIVE="$cache/conduit-workload-$k.tar"
  [ -s "$WORKLOAD_ARCHIVE" ] && return 0

  local work rootfs dist f
  work="$(mktemp -d "$cache/conduit-workload.XXXXXX")"
  rootfs="$work/rootfs"
  dist="$rootfs/usr/lib/python3/dist-packages"
  mkdir -p "$rootfs/usr/bin" "$rootfs/tmp" "$rootfs/etc" "$dist"
  chmod 1777 "$rootfs/tmp"
  cp "$python" "$rootfs/usr/bin/"
  ln -s "$py" "$rootfs/usr/bin/python3"
  ln -s "$py" "$rootfs/usr/bin/python"
  tar -C /usr/lib "${skip[@]}" -cf - "$py" | tar -C "$rootfs/usr/lib" -xf -
  tar -C "$site" --exclude=__pycache__ -cf - "${packages[@]}" | tar -C "$dist" -xf -
  tar -C "$sdk/.." --exclude=__pycache__ -cf - conduit | tar -C "$dist" -xf -
  # The libraries the interpreter and its extension modules load, but those a package brings (numpy.libs,
  # found through the modules' RPATH, already copied with it).
  local elves
  mapfile -t elves < <(find "$rootfs/usr/lib" -name '*.so*' -type f; echo "$python")
  for f in $(libs "${elves[@]}" | grep -v "^$rootfs/"); do
    mkdir -p "$rootfs$(dirname "$f")"
    cp -L "$f" "$rootfs$f"
  done
  printf 'root:x:0:0:root:/root:/usr/sbin/nologin\n' > "$rootfs/etc/passwd"
  printf 'root:x:0:\n' > "$rootfs/etc/group"
  image conduit-workload "$WORKLOAD_IMAGE" "$WORKLOAD_ARCHIVE" "$rootfs" \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env PYTHONDONTWRITEBYTECODE=1 \
    --entrypoint '["/usr/bin/python3"]'
  rm -rf "$work"
}
workload_image
log "images ready in $(( ($(date +%s%N) - t0) / 1000000 )) ms (cache: $cache)"

echo "PAUSE_IMAGE=$PAUSE_IMAGE"
echo "PAUSE_ARCHIVE=$PAUSE_ARCHIVE"
echo "AGENT_IMAGE=$AGENT_IMAGE"
echo "AGENT_ARCHIVE=$AGENT_ARCHIVE"
echo "CONTROLLER_IMAGE=$CONTROLLER_IMAGE"
echo "CONTROLLER_ARCHIVE=$CONTROLLER_ARCHIVE"
echo "WORKLOAD_IMAGE=$WORKLOAD_IMAGE"
echo "WORKLOAD_ARCHIVE=$WORKLOAD_ARCHIVE"
