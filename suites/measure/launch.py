"""The ways a case can launch (a strategy plugin says which of them its cases take)."""
from __future__ import annotations

from enum import Enum


class Launch(str, Enum):
    IN_PROCESS = "in_process"   # timed in the parbench process
    ISOLATED = "isolated"       # one fresh subprocess (e.g. TF logical devices, set before TF starts)
    RANKS = "ranks"             # a pool of rank processes on 127.0.0.1
