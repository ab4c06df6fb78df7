#!/usr/bin/env bash
# What the Slurm tests (tests/test_slurm.py) need: Debian's slurm-wlm (Slurm 22.05) and munge, from
# which they start a 2-node cluster on this machine (tests/slurm_cluster.py); and what the tests of a
# run across two hosts (tests/test_nodes.py) need: iproute2's `ip`, for two network namespaces
# (tests/netns_hosts.py). No recommended packages. Without root or sudo, nothing is installed and
# those tests are skipped.
set -euo pipefail

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  if [ "$(id -u)" -eq 0 ]; then
    sudo=""
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo="sudo -n"
  else
    echo "tests/cluster/setup.sh: slurm-wlm and munge are missing and installing them needs root; the Slurm tests will be skipped"
    exit 0
  fi
  echo "tests/cluster/setup.sh: installing Debian's slurm-wlm and munge (no recommended packages) for the Slurm tests"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi
if ! command -v ip >/dev/null; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "tests/cluster/setup.sh: installing Debian's iproute2 for the two-host tests"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2 >/dev/null
  else
    echo "tests/cluster/setup.sh: iproute2 (ip) is missing and installing it needs root; the two-host tests will be skipped"
  fi
fi
slurmctld -V
