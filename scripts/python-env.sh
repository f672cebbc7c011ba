#!/usr/bin/env bash
# Prints the path of the Python venv holding the test suites' Python packages, creating it on first use:
# tests/hostile/requirements.txt (schemathesis and its pinned dependencies) and tests/scenarios/requirements.txt
# (pytest, requests, PyYAML: the scenario harness), one venv for both (their shared pins agree), then
# tests/scenarios/requirements-vllm.txt with --no-deps (vLLM for CPU over that torch: the file says why). The
# venv lives outside the repository, under ${CONDUIT_VENV_ROOT:-~/.cache/conduit-venv}/<hash of the requirements>, so a
# changed pin builds a new one and an unchanged one is reused. Needs python3-venv (scripts/install-deps.sh) and
# PyPI.
# Usage: venv=$(scripts/python-env.sh) && "$venv/bin/schemathesis" --version && "$venv/bin/pytest" --version
set -euo pipefail
cd "$(dirname "$0")/.."
requirements=(tests/hostile/requirements.txt tests/scenarios/requirements.txt)
no_deps=tests/scenarios/requirements-vllm.txt
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3)
hash=$( (cat "${requirements[@]}" "$no_deps"; "$python" --version) | sha256sum | cut -c1-16)
venv=${CONDUIT_VENV_ROOT:-$HOME/.cache/conduit-venv}/$hash
if [ ! -f "$venv/.complete" ]; then
  echo "python-env: creating $venv" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input \
    "${requirements[@]/#/--requirement=}" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input --no-deps --requirement="$no_deps" >&2
  touch "$venv/.complete"
fi
echo "$venv"
