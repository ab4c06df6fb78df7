#!/usr/bin/env bash
# The project's test command (README, .ci/run): install what the tests need, then run them.
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
exec python -m pytest -q "$@"
