"""The container images carry every shared library their binary needs (formerly tests/e2e/image_libs_test.sh).

No container engine runs here, so instead of building the images this checks their recipe against a real
build on Debian 12 (the images' base): for docker/agent.Dockerfile and docker/controller.Dockerfile, every
library `ldd` resolves for BUILD/bin/conduit-agent and BUILD/bin/conduit-controller belongs (dpkg -S) to a
Debian package that the Dockerfile's runtime stage (its last FROM) names in its `apt-get install`. Packages
bookworm-slim already has (libc6, libgcc-s1, libstdc++6, ...) get no exemption: the Dockerfiles list them too,
so the check does not depend on what the base image happens to hold. Also: the runtime stage is
bookworm-slim, and the controller's runs as a non-root numeric user.

CONDUIT_DOCKER_DIR checks Dockerfiles from another folder (to see the test fail on a broken copy).
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DOCKER = Path(os.environ.get("CONDUIT_DOCKER_DIR", REPO / "docker"))


@pytest.fixture(scope="module", autouse=True)
def debian12():
    # Package names are per release: they only mean something when this machine is what the images build on.
    release = {}
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                release[k] = v.strip('"')
    except OSError:
        pass
    assert release.get("ID") == "debian" and release.get("VERSION_ID") == "12", \
        f"this check maps libraries to Debian 12 packages; this machine is {release.get('PRETTY_NAME', 'unknown')}"
    assert shutil.which("dpkg") and shutil.which("ldd"), "needs dpkg and ldd"


def runtime_stage(dockerfile):
    """The Dockerfile from its last FROM on, comments dropped, continuation lines joined."""
    lines = dockerfile.read_text().splitlines()
    start = max((i for i, ln in enumerate(lines) if re.match(r"\s*FROM\s", ln)), default=0)
    kept = [ln for ln in lines[start:] if not re.match(r"\s*#", ln)]
    return re.sub(r"\\\n", " ", "\n".join(kept))


def apt_packages(stage):
    """The package names of every `apt-get install` in STAGE (options and what follows the command's end —
    &&, ;, || — are not packages)."""
    packages = set()
    for line in stage.splitlines():
        if not re.search(r"apt-get\s.*install", line):
            continue
        on = apt = False
        for t in line.split():
            if t in ("&&", ";", "||", "|"):
                on = apt = False
                continue
            if on:
                if not t.startswith("-"):
                    packages.add(t)
                continue
            if re.search(r"(^|/)apt(-get)?$", t):
                apt = True
                continue
            if apt and t == "install":
                on = True
                continue
            if not t.startswith("-"):
                apt = False
    return packages


def package_of(lib):
    """The Debian package that ships LIB, trying the path ldd printed, the same path with or without /usr
    (merged /usr: a file is registered under one of them), and the symlink's target."""
    real = os.path.realpath(lib)
    for p in (lib, "/usr" + lib, lib.removeprefix("/usr"), real, "/usr" + real, real.removeprefix("/usr")):
        r = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
        out = [ln for ln in r.stdout.splitlines() if not ln.startswith("diversion")]
        if r.returncode == 0 and out:
            return out[0].split(":", 1)[0]
    return None


@pytest.mark.parametrize("binary,dockerfile", [("conduit-agent", "agent.Dockerfile"),
                                               ("conduit-controller", "controller.Dockerfile")])
def test_image_installs_every_library(build, binary, dockerfile):
    exe = build.bin / binary
    df = DOCKER / dockerfile
    assert os.access(exe, os.X_OK), f"no {exe}: build first (scripts/build.sh), or pass the build dir"
    assert df.is_file(), f"no {df}"
    stage = runtime_stage(df)
    first = stage.splitlines()[0] if stage else ""
    assert re.match(r"\s*FROM\s+debian:(bookworm|\$\{DEBIAN_RELEASE\})-slim", first), \
        f"{dockerfile}: runtime stage is not debian bookworm-slim: {first}"
    if "DEBIAN_RELEASE" in first:
        assert re.search(r"^ARG\s+DEBIAN_RELEASE=bookworm\s*$", df.read_text(), re.M), \
            f"{dockerfile}: DEBIAN_RELEASE does not default to bookworm"
    packages = apt_packages(stage)
    assert packages, f"{dockerfile}: no apt-get install in its runtime stage"

    r = subprocess.run(["ldd", exe], capture_output=True, text=True)
    assert r.returncode == 0, f"ldd {exe}: {r.stdout + r.stderr}"
    unresolved = [ln.strip() for ln in r.stdout.splitlines() if "not found" in ln]
    assert not unresolved, f"{exe} has unresolved libraries here: {' '.join(unresolved)}"
    libs = set()
    for line in r.stdout.splitlines():
        w = line.split()
        if len(w) >= 3 and w[1] == "=>" and w[2].startswith("/"):
            libs.add(w[2])
        elif w and w[0].startswith("/"):
            libs.add(w[0])
    missing, needed, n = [], set(), 0
    for lib in sorted(libs):
        pkg = package_of(lib)
        if pkg is None:
            missing.append(f"{binary}: {lib} belongs to no Debian package (built by hand?): an image cannot apt-get it")
            continue
        n += 1
        if pkg in needed:
            continue
        needed.add(pkg)
        if pkg not in packages:
            missing.append(f"missing: {pkg} (for {os.path.basename(lib)}) is not in the runtime apt-get install of "
                           f"{dockerfile}")
    # Listed but linked by nothing: allowed (a package may serve run-time loading), shown so the list stays lean.
    extra = sorted(packages - needed)
    if extra:
        print(f"  note: {dockerfile} installs {' '.join(extra)} - not linked by {binary}")
    assert not missing, f"{dockerfile}: {len(missing)} package(s) missing for {binary}:\n  " + "\n  ".join(missing)
    print(f"ok - {dockerfile}: all {n} libraries of {binary} come from the {len(packages)} packages its runtime "
          f"stage installs ({len(needed)} needed)")


def test_controller_image_runs_as_numeric_non_root_user():
    # The chart's runAsNonRoot can only verify a number.
    df = DOCKER / "controller.Dockerfile"
    stage = runtime_stage(df) if df.is_file() else ""
    users = re.findall(r"^\s*USER\s+(\S*)", stage, re.M)
    user = users[-1] if users else ""
    uid = user.split(":", 1)[0]
    assert uid.isdigit() and uid != "0", f"controller.Dockerfile runtime USER is '{user}', want a numeric non-root uid"
