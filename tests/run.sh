#!/usr/bin/env bash
# The project's test command (README, .ci/run): install what the tests need, then run them.
# What it installs: the project with its `all` and `test` extras into the current Python (use a
# venv); and system-wide, as root or with passwordless sudo, Debian packages without recommended
# ones: chromium (tests/browser/setup.sh, the report's browser test), slurm-wlm and munge (and
# iproute2 where `ip` is missing, as root only) (tests/cluster/setup.sh, the Slurm and two-host
# tests). Each setup script prints one line before it installs, and where it cannot (no root, no
# sudo) installs nothing and its tests are skipped.
# Idempotent: an already-installed dependency is not downloaded again.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --disable-pip-version-check -e ".[all,test]"
if [ -x tests/browser/setup.sh ]; then
  bash tests/browser/setup.sh
fi
if [ -x tests/cluster/setup.sh ]; then
  bash tests/cluster/setup.sh
fi
# CI (CI=true) leaves out the few long real runs marked out_of_ci, to stay within its 20 minutes; a
# plain `bash tests/run.sh` runs everything, and `bash tests/run.sh -m out_of_ci` runs just those.
if [ "${CI:-}" = "true" ]; then
  set -- -m "not out_of_ci" "$@"
fi
exec python -m pytest -q "$@"
