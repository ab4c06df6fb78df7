"""The nodes of a run across machines without Slurm, and the few things they must agree on.

One `parbench run --nnodes N --node-rank R --rdzv-endpoint HOST:PORT` runs on each node. Node 0
hosts a key-value store on the endpoint's port (torch's own `TCPStore`, the store torchrun's c10d
rendezvous uses; its server listens on every interface whatever HOST says, so peers on any network
reach it), the others connect to it, and every node checks in. Over the store the nodes then
`agree` on what they will run (node 0's value wins; a node whose own differs refuses, and so does
node 0, naming the first difference, so nodes with other suites or versions never start), `share`
what node 0 decides for them (a case's rendezvous address and port), and meet at `barrier`s.

Every wait polls the store against a deadline, so nothing waits forever; a node that refuses
leaves its reason in the store (`abort`), so the others stop at their next wait with it instead
of waiting out their timeout. Failures are `UserError`s of one line naming what is missing and
the way out: the CLI prints them without a traceback, and the store's own C++ log of a broken
connection (a dozen frames of `c10::DistNetworkError`) is kept off the terminal (`QuietStore`).

Keys are namespaced per use (`parbench/<kind>/<name>/<n>`, n counting this node's uses of that
name), so the same name can be agreed, shared or met at again; every node calls the functions
in the same order, as the runner's loop over the agreed cases does.

torch is imported inside the functions: importing this module costs nothing where no run spans
nodes.
"""
from __future__ import annotations

import contextlib
import json
import socket
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Iterator

from suites.errors import UserError
from suites.runner import native_stderr

#: Every key this module writes starts with it.
PREFIX = "parbench"
#: Set by a node that refuses to go on; its value is the reason, with the node's rank.
ABORT_KEY = f"{PREFIX}/abort"
#: Seconds between two looks at the store while waiting.
POLL_S = 0.05
#: How much of a value a message quotes.
QUOTE_CHARS = 80


class RendezvousError(UserError):
    """The nodes of a run across machines cannot go on together."""


class RendezvousTimeout(RendezvousError):
    """Not every node arrived in time: the message names who is missing and how to start them."""


class NodesDisagree(RendezvousError):
    """A node's value differs from node 0's: the message names the first difference."""


@dataclass(frozen=True)
class Endpoint:
    """Where node 0 hosts the store."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass
class NodeGroup:
    """This node's place in the run and its connection to the store (None once closed)."""

    nnodes: int
    node_rank: int
    endpoint: Endpoint
    timeout_s: float
    store: Any = field(repr=False)
    uses: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def is_first(self) -> bool:
        """Node 0: it hosts the store, decides what is shared and keeps the records."""
        return self.node_rank == 0


class QuietStore:
    """A TCPStore whose calls keep torch's C++ log of a broken connection off the terminal
    (`suites.runner.native_stderr`): the error they raise says it in one line (`_talking`)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def _quietly(self, method: str, *args: Any) -> Any:
        with native_stderr.filtered():
            return getattr(self._store, method)(*args)

    def set(self, key: str, value: str) -> None:
        self._quietly("set", key, value)

    def get(self, key: str) -> bytes:
        return self._quietly("get", key)

    def add(self, key: str, amount: int) -> int:
        return self._quietly("add", key, amount)

    def check(self, keys: list[str]) -> bool:
        return self._quietly("check", keys)

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        return self._quietly("compare_set", key, expected, desired)


def parse_endpoint(text: str) -> Endpoint:
    """HOST:PORT or [IPv6]:PORT."""
    host, sep, port = text.strip().rpartition(":")
    if text.strip().startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or host.startswith("[") or not port:
        example = host.strip("[]") if sep else text.strip() or "node0"
        raise RendezvousError(f"--rdzv-endpoint needs HOST:PORT, got {text!r}: add the port node 0 listens on, "
                              f"e.g. {example}:29400")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise RendezvousError(f"--rdzv-endpoint {text!r}: the port must be a number from 1 to 65535, got {port!r}")
    return Endpoint(host, int(port))


def _check_place(nnodes: int, node_rank: int, timeout_s: float) -> None:
    if nnodes < 2:
        raise RendezvousError(f"--nnodes must be 2 or more for a run across nodes, got {nnodes}: "
                              "leave out --nnodes to run on this node alone")
    if not 0 <= node_rank < nnodes:
        raise RendezvousError(f"--node-rank must be 0 to {nnodes - 1} for --nnodes {nnodes}, got {node_rank}: "
                              "number the nodes from 0, the node at the --rdzv-endpoint")
    if not timeout_s > 0:
        raise RendezvousError(f"the rendezvous timeout must be a positive number of seconds, got {timeout_s}")


def _check_hostable(where: Endpoint) -> None:
    """Node 0 must own the endpoint's address: peers connect there, and so does node 0's own
    client (a second `--node-rank 0`, or the endpoint of another machine, fails here at once)."""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(where.host, None, type=socket.SOCK_STREAM)}
    except socket.gaierror as error:
        raise RendezvousError(f"cannot resolve the --rdzv-endpoint host {where.host!r} ({error.strerror}): "
                              "give node 0's address or a name every node resolves") from None
    for address in addresses:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe, contextlib.suppress(OSError):
            probe.bind((address, 0))
            return
    raise RendezvousError(f"node 0 hosts the rendezvous at {where}, but {where.host} is not an address of this "
                          f"machine: run `--node-rank 0` on the machine at {where.host}, or give --rdzv-endpoint "
                          "an address of this one")


def _reachable(where: Endpoint, deadline: float) -> bool:
    """Whether node 0's store accepts connections before the deadline. Only a knock at the port:
    TCPStore's own connect retries with random backoff (3 s came to 5-9 s here) and logs every
    failed try with a C++ stack; knocking first keeps the deadline and the terminal clean."""
    while True:
        left = deadline - time.monotonic()
        with contextlib.suppress(OSError), socket.create_connection((where.host, where.port),
                                                                     timeout=max(0.1, min(1.0, left))):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


@contextlib.contextmanager
def _talking(group: NodeGroup) -> Iterator[None]:
    """A store call whose connection broke: node 0 (the store) stopped, or the network failed."""
    from torch.distributed import DistError

    try:
        yield
    except DistError as error:
        who = "this node's own store" if group.is_first else "node 0"
        raise RendezvousError(f"node {group.node_rank} lost the rendezvous at {group.endpoint} "
                              f"({_first_line(error)}): {who} stopped or the network failed; "
                              "start the run again on every node") from None


def _key(group: NodeGroup, kind: str, name: str) -> str:
    """A fresh key base for this use of `name` (the same on every node: they call in one order)."""
    if group.store is None:
        raise ValueError(f"node {group.node_rank} left its node group already: it cannot {kind} {name} any more")
    counted = f"{kind}/{name}"
    group.uses[counted] = group.uses.get(counted, 0) + 1
    return f"{PREFIX}/{counted}/{group.uses[counted]}"


def _aborted(group: NodeGroup) -> str | None:
    if group.store.check([ABORT_KEY]):
        return group.store.get(ABORT_KEY).decode(errors="replace")
    return None


def _wait_for(group: NodeGroup, key: str, deadline: float) -> bool:
    """Whether `key` was set before the deadline; raises where a node aborted meanwhile."""
    with _talking(group):
        while True:
            if group.store.check([key]):
                return True
            reason = _aborted(group)
            if reason is not None:
                raise RendezvousError(f"the run across nodes stopped: {reason}")
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)


def _absent(group: NodeGroup, base: str) -> list[int]:
    """The nodes that have not set `base/at/<rank>`."""
    with _talking(group):
        return [rank for rank in range(group.nnodes) if not group.store.check([f"{base}/at/{rank}"])]


def _ranks(ranks: list[int]) -> str:
    return ("node " if len(ranks) == 1 else "nodes ") + ", ".join(str(rank) for rank in ranks)


def _meet(group: NodeGroup, base: str, timeout_s: float) -> list[int]:
    """Check in under `base` and wait for every node; the absent nodes where time ran out, else []."""
    deadline = time.monotonic() + timeout_s
    with _talking(group):
        group.store.set(f"{base}/at/{group.node_rank}", "")
        if group.store.add(f"{base}/count", 1) == group.nnodes:
            group.store.set(f"{base}/done", "")
    if _wait_for(group, f"{base}/done", deadline):
        return []
    return _absent(group, base)


def abort(group: NodeGroup, reason: str) -> None:
    """Tell the other nodes that this one stops, and why: they raise it at their next wait."""
    if group.store is None:
        return
    with contextlib.suppress(Exception):  # the store may be gone already: the others time out instead
        group.store.compare_set(ABORT_KEY, "", f"node {group.node_rank}: {reason}")


def join(endpoint: str, nnodes: int, node_rank: int, timeout_s: float) -> NodeGroup:
    """Host (node 0) or reach the store at `endpoint`, and wait until all `nnodes` nodes check in."""
    where = parse_endpoint(endpoint)
    _check_place(nnodes, node_rank, timeout_s)
    from torch.distributed import DistError, TCPStore

    first = node_rank == 0
    if first:
        _check_hostable(where)
    started = time.monotonic()
    unreachable = RendezvousTimeout(
        f"node {node_rank} could not reach the rendezvous at {where} within {timeout_s:g} s: start `parbench run "
        f"... --node-rank 0` on the machine at {where.host}, or check that this node can reach {where}")
    if not first and not _reachable(where, started + timeout_s):
        raise unreachable
    try:
        with native_stderr.filtered():
            store = QuietStore(TCPStore(where.host, where.port, world_size=nnodes if first else None,
                                        is_master=first, timeout=timedelta(seconds=timeout_s), wait_for_workers=False))
    except DistError as error:
        if first:
            raise RendezvousError(f"node 0 cannot host the rendezvous at {where} ({_first_line(error)}): give "
                                  "--rdzv-endpoint a free port on every node") from None
        raise unreachable from None
    group = NodeGroup(nnodes, node_rank, where, timeout_s, store)
    with _talking(group):
        if first:
            store.set(f"{PREFIX}/nnodes", str(nnodes))
        elif _wait_for(group, f"{PREFIX}/nnodes", started + timeout_s):
            theirs = int(store.get(f"{PREFIX}/nnodes"))
            if theirs != nnodes:
                _refuse(group, f"node 0 runs with --nnodes {theirs} and node {node_rank} with --nnodes {nnodes}: "
                               "give every node the same --nnodes")
        if store.add(f"{PREFIX}/rank/{node_rank}", 1) > 1:
            _refuse(group, f"two nodes run with --node-rank {node_rank}: give each node its own --node-rank, "
                           f"0 to {nnodes - 1}")
    absent = _meet(group, f"{PREFIX}/join", max(0.0, started + timeout_s - time.monotonic()))
    if absent:
        close(group, timeout_s=0)
        raise RendezvousTimeout(f"the rendezvous at {where} had {nnodes - len(absent)} of {nnodes} nodes after "
                                f"{timeout_s:g} s: start `parbench run ... --node-rank {absent[0]}` on the other "
                                f"node{'s' if len(absent) > 1 else ''} ({_ranks(absent)} missing), or check that "
                                f"{'they' if len(absent) > 1 else 'it'} can reach {where}")
    return group


def _refuse(group: NodeGroup, reason: str, error: type[RendezvousError] = RendezvousError) -> None:
    abort(group, reason)
    raise error(reason)


def _quote(value: Any) -> str:
    """As JSON (one line: newlines and the like are escaped), at most QUOTE_CHARS characters."""
    text = json.dumps(value)
    return text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS - 3] + "..."


def first_difference(first: str, mine: str, me: str = "here") -> str:
    """Where `mine` first differs from node 0's `first`: an item of a JSON list, a key of a JSON
    object, else a character. `me` says where `mine` comes from ("on node 1")."""
    with contextlib.suppress(ValueError):
        theirs, ours = json.loads(first), json.loads(mine)
        if isinstance(theirs, list) and isinstance(ours, list):
            for index, (a, b) in enumerate(zip(theirs, ours)):
                if a != b:
                    return f"item {index + 1} of {len(theirs)}: {_quote(a)} on node 0, {_quote(b)} {me}"
            longer, who = (theirs, "on node 0") if len(theirs) > len(ours) else (ours, me)
            return (f"the item count: {len(theirs)} on node 0, {len(ours)} {me}; the first extra item, {who}, "
                    f"is {_quote(longer[min(len(theirs), len(ours))])}")
        if isinstance(theirs, dict) and isinstance(ours, dict):
            for name in sorted(set(theirs) | set(ours)):
                if theirs.get(name, ...) != ours.get(name, ...):
                    a = _quote(theirs[name]) if name in theirs else "nothing"
                    b = _quote(ours[name]) if name in ours else "nothing"
                    return f"key {_quote(name)}: {a} on node 0, {b} {me}"
    at = next((i for i, (a, b) in enumerate(zip(first, mine)) if a != b), min(len(first), len(mine)))
    start = max(0, at - 20)
    return (f"character {at + 1}: {_quote(first[start:at + 40])} on node 0, "
            f"{_quote(mine[start:at + 40])} {me}")


def agree(group: NodeGroup, key: str, value: str, timeout_s: float | None = None) -> str:
    """Node 0's `value`, once every node has checked that its own is the same; where one differs,
    every node raises NodesDisagree naming the first difference."""
    timeout_s = group.timeout_s if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout_s
    base = _key(group, "agree", key)
    if group.is_first:
        with _talking(group):
            group.store.set(f"{base}/value", value)
        for rank in range(1, group.nnodes):
            if not _wait_for(group, f"{base}/verdict/{rank}", deadline):
                raise RendezvousTimeout(f"node {rank} did not confirm {key} within {timeout_s:g} s at the rendezvous "
                                        f"at {group.endpoint}: check that parbench still runs there")
            with _talking(group):
                verdict = group.store.get(f"{base}/verdict/{rank}").decode(errors="replace")
            if verdict:
                raise NodesDisagree(verdict)
        return value
    if not _wait_for(group, f"{base}/value", deadline):
        raise RendezvousTimeout(f"node 0 did not publish {key} within {timeout_s:g} s at the rendezvous at "
                                f"{group.endpoint}: check that parbench still runs there")
    with _talking(group):
        first = group.store.get(f"{base}/value").decode()
        me = f"node {group.node_rank}"
        verdict = "" if first == value else (
            f"{me} and node 0 differ in {key}, at {first_difference(first, value, f'on {me}')}: "
            "run the same parbench version with the same arguments on every node")
        group.store.set(f"{base}/verdict/{group.node_rank}", verdict)
    if verdict:
        _refuse(group, verdict, NodesDisagree)
    return first


def share(group: NodeGroup, key: str, value: str | None, timeout_s: float | None = None) -> str:
    """Node 0's `value` on every node (the others pass None, or anything: it is not read)."""
    timeout_s = group.timeout_s if timeout_s is None else timeout_s
    base = _key(group, "share", key)
    if group.is_first:
        if value is None:
            raise ValueError(f"node 0 must give the value of {key} to share")
        with _talking(group):
            group.store.set(f"{base}/value", value)
        return value
    if not _wait_for(group, f"{base}/value", time.monotonic() + timeout_s):
        raise RendezvousTimeout(f"node 0 did not share {key} within {timeout_s:g} s at the rendezvous at "
                                f"{group.endpoint}: check that parbench still runs there")
    with _talking(group):
        return group.store.get(f"{base}/value").decode()


def gather(group: NodeGroup, key: str, value: str, timeout_s: float | None = None) -> list[str | None] | None:
    """Every node's `value`, in node order, on node 0 (None on the others): a node that has not
    given its own within `timeout_s` is None in the list (node 0 says what that means; a node
    that died mid-case must not stop the run)."""
    timeout_s = group.timeout_s if timeout_s is None else timeout_s
    base = _key(group, "gather", key)
    with _talking(group):
        group.store.set(f"{base}/from/{group.node_rank}", value)
    if not group.is_first:
        return None
    deadline = time.monotonic() + timeout_s
    values: list[str | None] = []
    for rank in range(group.nnodes):
        arrived = _wait_for(group, f"{base}/from/{rank}", deadline)
        with _talking(group):
            values.append(group.store.get(f"{base}/from/{rank}").decode() if arrived else None)
    return values


def barrier(group: NodeGroup, name: str, timeout_s: float | None = None) -> None:
    """Return once every node has reached `name`; RendezvousTimeout naming the absent ones if not
    within `timeout_s`."""
    timeout_s = group.timeout_s if timeout_s is None else timeout_s
    absent = _meet(group, _key(group, "barrier", name), timeout_s)
    if absent:
        raise RendezvousTimeout(f"{group.nnodes - len(absent)} of {group.nnodes} nodes reached {name} within "
                                f"{timeout_s:g} s ({_ranks(absent)} did not) at the rendezvous at "
                                f"{group.endpoint}: check that parbench still runs there")


def close(group: NodeGroup, timeout_s: float | None = None) -> None:
    """Leave the group. Node 0 keeps the store up until every node has left (or `timeout_s`,
    default the group's, passes), so no node loses it in the middle of its last read."""
    if group.store is None:
        return
    timeout_s = group.timeout_s if timeout_s is None else timeout_s
    with contextlib.suppress(Exception):  # leaving: a store already gone has nothing left to say
        left = group.store.add(f"{PREFIX}/left", 1)
        deadline = time.monotonic() + timeout_s
        while group.is_first and left < group.nnodes and time.monotonic() < deadline:
            time.sleep(POLL_S)
            left = group.store.add(f"{PREFIX}/left", 0)
    group.store = None  # the last reference: a TCPStore stops its server (node 0) when it goes
