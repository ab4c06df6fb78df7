#!/usr/bin/env bash
# What the browser test (tests/browser/) needs: Debian's chromium, driven headless by the
# playwright Python package. playwright drives this system chromium through its
# executable_path; `playwright install` (which downloads a browser build) is never run.
set -euo pipefail

if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi
python -c "import playwright" 2>/dev/null || python -m pip install -q "playwright>=1.40"
/usr/bin/chromium --version
