"""torch `single`: one device, the model unwrapped."""
from __future__ import annotations

from suites.cases.vocabulary import Compile, DeviceKind, Strategy
from suites.strategies.base import single_device
from suites.strategies.torch.base import TorchStrategy
from suites.strategies.exchange_model import NOTHING


class Single(TorchStrategy):
    strategy = Strategy.SINGLE
    exchange = NOTHING
    rules = TorchStrategy.rules.but(one_device=True, statistics_split="whole", devices=frozenset(DeviceKind),
                                    kinds=frozenset({"kernel", "training"}),
                                    compile_modes=frozenset({Compile.NONE, Compile.INDUCTOR}))
    requirements = (single_device,)


PLUGIN = Single()
