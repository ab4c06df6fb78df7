"""A real 2-node Slurm cluster on this machine, for the tests of runs across an allocation.

munged, one slurmctld and two slurmd (`-N node1`, `-N node2`, NodeAddr 127.0.0.1, a port each,
picked at run time) from a config in a temporary folder; stopped by their pid files. Needs root
and Debian's slurm-wlm and munge (tests/cluster/setup.sh installs them where it may).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

DAEMONS = ("munged", "slurmctld", "slurmd")


def missing() -> str | None:
    """Why the cluster cannot be started here, or None."""
    if os.geteuid() != 0:
        return "the Slurm daemons need root"
    absent = [name for name in (*DAEMONS, "srun", "salloc", "sinfo") if shutil.which(name) is None]
    return f"not installed: {', '.join(absent)} (tests/cluster/setup.sh)" if absent else None


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _config(folder: Path, ports: list[int]) -> str:
    host = socket.gethostname()
    return "\n".join([
        "ClusterName=parbench", "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ports[0]}", f"SlurmdPort={ports[1]}", "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", f"AuthInfo=socket={folder}/munge/munge.socket",
        f"StateSaveLocation={folder}/state", f"SlurmdSpoolDir={folder}/spool.%n",
        f"SlurmctldPidFile={folder}/slurmctld.pid", f"SlurmdPidFile={folder}/slurmd.%n.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log", f"SlurmdLogFile={folder}/slurmd.%n.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SwitchType=switch/none", "MpiDefault=none",
        "ReturnToService=2", "SchedulerType=sched/builtin", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", "JobCompType=jobcomp/none", "AccountingStorageType=accounting_storage/none",
        "InactiveLimit=0", "KillWait=5", "MinJobAge=30", "SlurmctldTimeout=30", "SlurmdTimeout=30", "Waittime=0",
        f"NodeName=node1 NodeHostname={host} NodeAddr=127.0.0.1 Port={ports[2]} CPUs=1 State=UNKNOWN",
        f"NodeName=node2 NodeHostname={host} NodeAddr=127.0.0.1 Port={ports[3]} CPUs=1 State=UNKNOWN",
        "PartitionName=debug Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP", ""])


def _stop(pid_file: Path) -> None:
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def two_node_cluster(folder: Path, ready_s: float = 60.0) -> Iterator[dict[str, str]]:
    """The cluster, up and idle; yields the environment a client needs (SLURM_CONF)."""
    for part in ("munge", "state", "spool.node1", "spool.node2"):
        (folder / part).mkdir(parents=True, exist_ok=True)
    conf = folder / "slurm.conf"
    conf.write_text(_config(folder, _free_ports(4)))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    for name in [n for n in env if n.startswith("SLURM_") and n != "SLURM_CONF"]:
        del env[name]  # this test's own allocation, if any, is not the cluster's
    pid_files = [folder / "slurmd.node1.pid", folder / "slurmd.node2.pid", folder / "slurmctld.pid",
                 folder / "munge" / "munged.pid"]
    try:
        subprocess.run(["munged", f"--socket={folder}/munge/munge.socket", f"--pid-file={folder}/munge/munged.pid",
                        f"--log-file={folder}/munge/munged.log", f"--seed-file={folder}/munge/seed", "-f"],
                       check=True, env=env, timeout=30)
        subprocess.run(["slurmctld", "-f", str(conf)], check=True, env=env, timeout=30)
        for node in ("node1", "node2"):
            subprocess.run(["slurmd", "-f", str(conf), "-N", node], check=True, env=env, timeout=30)
        deadline = time.monotonic() + ready_s
        while True:
            states = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env,
                                    timeout=30).stdout.split()
            if states and all(state == "idle" for state in states) and len(states) >= 1:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Slurm nodes are not idle after {ready_s:.0f} s: {states}; "
                                   f"{(folder / 'slurmctld.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield {"SLURM_CONF": str(conf)}
    finally:
        for pid_file in pid_files:
            _stop(pid_file)
