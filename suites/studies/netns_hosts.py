"""Two hosts on this machine: for the tests of runs across nodes without Slurm, and for the namespace
link study (`suites.studies.namespace_link`).

Two Linux network namespaces joined by a veth pair: each has an address of its own on a /24
(10.213.X.1 and 10.213.X.2, X picked so the subnet is on no route of this machine) and its own
`lo`, so a process started in one (`ip netns exec NAME ...`, `Hosts.command`) reaches the other
only over the veth, as one node reaches another. The files, the processes' view of them and the
host name stay shared: the host name resolves to no address in either namespace, so a program that
picks its interface by the host name (gloo does) must be given the interface (`GLOO_SOCKET_IFNAME`,
`Hosts.interfaces`).

On exit every process still running in either namespace is killed and both namespaces are
deleted (which deletes the veth pair), also when the body raises; namespaces left by a test run
that was killed outright are deleted by the next `two_hosts()`. Needs root and iproute2, and a
kernel that lets us create namespaces (a container without CAP_SYS_ADMIN does not): `missing()`
says why not, for a skip.
"""
from __future__ import annotations

import contextlib
import functools
import ipaddress
import itertools
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Iterator, Sequence

#: The /16 the subnets are picked from; one /24 of it per `two_hosts()`.
SUPERNET = "10.213"
#: Seconds the processes in a namespace have between SIGTERM and SIGKILL at exit.
STOP_GRACE_S = 2.0
#: Seconds without a process in the namespace after which it is taken to be empty.
SETTLE_S = 0.3
#: Seconds after which stopping gives up (a process SIGKILL does not end: stuck in the kernel).
STOP_LIMIT_S = 15.0

_serial = itertools.count()
#: A namespace this module names: its creator's pid, a serial, the host index.
OUR_NAME = re.compile(r"pb(\d+)n\d+h[01]")


@dataclass(frozen=True)
class Hosts:
    """The two namespaces: their names, the address each has on the veth, and the veth end in each."""

    names: tuple[str, str]
    addresses: tuple[str, str]
    interfaces: tuple[str, str]
    prefix_len: int = 24

    def command(self, host_index: int, argv: Sequence[str]) -> list[str]:
        """`argv` run in host `host_index`'s namespace."""
        return ["ip", "netns", "exec", self.names[host_index], *argv]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {(done.stderr or done.stdout).strip()}")
    return done


@functools.cache
def missing() -> str | None:
    """Why two namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "not installed: ip (iproute2)"
    probe = f"pbprobe{os.getpid()}"
    added = _ip("netns", "add", probe, check=False)
    if added.returncode != 0:
        return f"cannot create a network namespace here (`ip netns add`): {added.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _free_subnet() -> str:
    """A 10.213.X.0/24 that no address or route of this machine overlaps (start from the pid, so
    concurrent test runs tend to differ; the namespaces are isolated anyway)."""
    used = []
    for line in _ip("-4", "-o", "addr", "show").stdout.splitlines() + _ip("-4", "route", "show").stdout.splitlines():
        for word in line.split():
            with contextlib.suppress(ValueError):
                used.append(ipaddress.ip_network(word, strict=False))
    start = os.getpid() % 250 + 1
    for third in [*range(start, 255), *range(1, start)]:
        subnet = ipaddress.ip_network(f"{SUPERNET}.{third}.0/24")
        if not any(subnet.overlaps(net) for net in used if net.prefixlen > 0):
            return f"{SUPERNET}.{third}"
    raise RuntimeError(f"every {SUPERNET}.X.0/24 overlaps an address or route of this machine")


def _inode(name: str) -> int | None:
    """The namespace's inode: what /proc/PID/ns/net of a process in it names (`ip netns pids` compares
    the same), so its processes are found even after the name is gone."""
    try:
        return os.stat(f"/run/netns/{name}").st_ino
    except OSError:
        return None


def _pids_in(inode: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}/ns/net").st_ino == inode:
                    found.append(int(entry))
    return found


def _stop_processes(inode: int) -> None:
    """Kill what runs in the namespace: SIGTERM, SIGKILL after STOP_GRACE_S; done once none has
    been seen for SETTLE_S (a process started just before, `ip netns exec` not yet in the
    namespace, is caught when it enters)."""
    started = time.monotonic()
    quiet_since = started
    while time.monotonic() - quiet_since < SETTLE_S and time.monotonic() - started < STOP_LIMIT_S:
        running = _pids_in(inode)
        sig = signal.SIGTERM if time.monotonic() - started < STOP_GRACE_S else signal.SIGKILL
        for pid in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        if running:
            quiet_since = time.monotonic()
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_stale() -> None:
    """Delete the namespaces of test runs that died without their `finally` (SIGKILL, or SIGTERM
    from a timeout): the name holds the pid of the run that made it."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        match = OUR_NAME.fullmatch(name)
        inode = _inode(name)
        if match and not _alive(int(match.group(1))):
            if inode is not None:
                _stop_processes(inode)
            _ip("netns", "del", name, check=False)


@contextlib.contextmanager
def two_hosts() -> Iterator[Hosts]:
    """Two namespaces joined by a veth pair, links and `lo` up; gone again on exit."""
    _sweep_stale()
    tag = f"pb{os.getpid()}n{next(_serial)}"
    names = (f"{tag}h0", f"{tag}h1")
    interfaces = (f"{tag}v0", f"{tag}v1")  # at most 15 characters: "pb" + pid + serial + "v0"
    subnet = _free_subnet()
    hosts = Hosts(names=names, addresses=(f"{subnet}.1", f"{subnet}.2"), interfaces=interfaces)
    created: dict[str, int | None] = {}
    try:
        for name in names:
            _ip("netns", "add", name)
            created[name] = _inode(name)
        _ip("link", "add", interfaces[0], "type", "veth", "peer", "name", interfaces[1])
        for name, interface, address in zip(names, interfaces, hosts.addresses):
            _ip("link", "set", interface, "netns", name)
            _ip("-n", name, "addr", "add", f"{address}/{hosts.prefix_len}", "dev", interface)
            _ip("-n", name, "link", "set", interface, "up")
            _ip("-n", name, "link", "set", "lo", "up")
        yield hosts
    finally:
        for inode in created.values():
            if inode is not None:
                _stop_processes(inode)
        for name in created:
            _ip("netns", "del", name, check=False)
        # A veth end not yet moved into a namespace is still here; deleting one end deletes both.
        _ip("link", "del", interfaces[0], check=False)
