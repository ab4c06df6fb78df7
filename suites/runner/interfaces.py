"""The network interface a node's address is on, which gloo's sockets are bound to
(GLOO_SOCKET_IFNAME) where a rank spans nodes: gloo otherwise resolves the host name, which
Debian and Ubuntu images map to 127.0.1.1, and its peers on other nodes reach their own loopback.

Run on a node, `python -m suites.runner.interfaces ADDRESS` prints the interface (nothing where
none holds it): a Slurm rank's script asks it there, since only that node knows its interfaces.
Imports nothing of parbench's, so it costs a rank an interpreter start only."""
from __future__ import annotations

import array
import fcntl
import socket
import struct
import sys

#: ioctl SIOCGIFADDR: an interface's IPv4 address.
SIOCGIFADDR = 0x8915


def interface_of(address: str) -> str | None:
    """The network interface that holds `address` on this machine (Linux), or None."""
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            request = array.array("B", struct.pack("256s", name.encode()[:15]))
            try:
                fcntl.ioctl(probe.fileno(), SIOCGIFADDR, request)
            except OSError:
                continue
            if socket.inet_ntoa(request.tobytes()[20:24]) == address:
                return name
    return None


if __name__ == "__main__":
    print(interface_of(sys.argv[1]) or "" if len(sys.argv) == 2 else "")
