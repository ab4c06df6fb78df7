#!/usr/bin/env bash
# What the Slurm tests (tests/test_slurm.py) need: Debian's slurm-wlm (Slurm 22.05) and munge, from
# which they start a 2-node cluster on this machine (tests/slurm_cluster.py). No recommended
# packages. Without root or sudo, nothing is installed and those tests are skipped.
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
slurmctld -V
