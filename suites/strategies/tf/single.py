"""TF `single`: one device, variables and compute on it."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from suites.cases.vocabulary import Compile, DeviceKind, Strategy
from suites.strategies.base import single_device
from suites.strategies.requirements import requirement
from suites.strategies.tf.base import TfHooks, TfStrategy
from suites.strategies.exchange_model import NOTHING

if TYPE_CHECKING:
    from suites.strategies.jobs import Job
    import tensorflow as tf

    from suites.frameworks.tf.trainers import Trainer, TrainingSetup
    from suites.hardware.devices import DeviceInfo


@requirement("not a TPU: the parbench process initialises none (the TPU path is strategy tpu)")
def not_on_tpu(job: "Job", device: "DeviceInfo") -> str | None:
    if job.case.device is DeviceKind.TPU:
        # It would run in the parbench process, which never initialises a TPU system (and
        # keeps libtpu out): TF would place the ops on the CPU and the record say TPU.
        return ("TF 'single' runs in the parbench process, which initialises no TPU; "
                "the TPU path is strategy 'tpu' (TPUStrategy, in its own process)")
    return None


class SingleHooks(TfHooks):
    def trainer(self, setup: "TrainingSetup", job: "Job", params: Mapping[str, Any],
                strategy: "tf.distribute.Strategy | None") -> "Trainer":
        from suites.frameworks.tf import backend
        from suites.frameworks.tf.trainers import SingleDeviceTrainer

        return SingleDeviceTrainer(setup, backend.device_name(job.case))


class Single(TfStrategy):
    strategy = Strategy.SINGLE
    exchange = NOTHING
    rules = TfStrategy.rules.but(one_device=True, statistics_split="whole", devices=frozenset(DeviceKind),
                                 kinds=frozenset({"kernel", "training"}),
                                 compile_modes=frozenset({Compile.NONE, Compile.XLA}))
    requirements = (not_on_tpu, single_device)
    hooks = SingleHooks()


PLUGIN = Single()
