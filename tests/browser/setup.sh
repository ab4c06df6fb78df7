#!/usr/bin/env bash
# What the browser test (tests/browser/) needs: Debian's chromium, driven headless by the
# playwright Python package (a test extra, installed by `pip install -e ".[test]"`). playwright
# drives this system chromium through its executable_path; `playwright install` (which
# downloads a browser build) is never run. Only chromium and what it depends on are installed:
# no recommended packages. Without root or sudo, nothing is installed and the test is skipped.
set -euo pipefail

if [ ! -x /usr/lib/chromium/chromium ]; then
  if [ "$(id -u)" -eq 0 ]; then
    sudo=""
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo="sudo -n"
  else
    echo "tests/browser/setup.sh: chromium is missing and installing it needs root; the browser test will be skipped"
    exit 0
  fi
  echo "tests/browser/setup.sh: installing Debian's chromium (no recommended packages) for the browser test"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
# The binary itself: Debian's /usr/bin/chromium wrapper script prints shell errors on some machines.
/usr/lib/chromium/chromium --version
