"""torch `horovod`: Horovod's ring all-reduce (`hvd.DistributedOptimizer`) — not supported.

Horovod's last release (0.28.1, 2023) does not build against the pinned torch and TensorFlow
(`HOROVOD_UNSUPPORTED`), so every case is unavailable with that reason; parbench does not vendor
or patch it. `ddp` is torch's own ring all-reduce over the same rank processes.
"""
from __future__ import annotations

from suites.cases.vocabulary import Strategy
from suites.measure.launch import Launch
from suites.strategies.base import horovod_builds
from suites.strategies.torch.base import TorchStrategy
from suites.strategies.exchange_model import Collective, ExchangeModel


class Horovod(TorchStrategy):
    strategy = Strategy.HOROVOD
    exchange = ExchangeModel((Collective("all_reduce", "gradients", overlap="backward"),), unhidden_bytes=64 * 2**20,
                             source="Horovod docs: tensor fusion, HOROVOD_FUSION_THRESHOLD 64 MiB, overlapped "
                                    "with backward")
    rules = TorchStrategy.rules.but(launch=Launch.RANKS)  # one process per device, as horovodrun would start them
    requirements = (horovod_builds,)


PLUGIN = Horovod()
