"""TF `tpu`: `tf.distribute.TPUStrategy` over the cores of a TPU, in a fresh process.

Available only where `suites.kept.devices` found a TPU runtime, so nothing tries to connect
to an absent TPU (which blocks forever).
"""
from __future__ import annotations

import glob
import os
from typing import TYPE_CHECKING

from suites.cases.case import Case
from suites.cases.vocabulary import DeviceKind, Precision, Strategy
from suites.frameworks.tf.environment import TPU_PROCESS
from suites.strategies.base import Launch, split_reason
from suites.strategies.tf.base import DistributeStrategy, mirrored_variables_reason

if TYPE_CHECKING:
    import tensorflow as tf

    from suites.kept.devices import DeviceInfo


def tpu_address() -> str | None:
    """TPU_NAME if set; "local" on a TPU VM (TPU device files); None lets the resolver look
    (Colab's COLAB_TPU_ADDR, a Cloud TPU's metadata)."""
    if os.environ.get("TPU_NAME"):
        return os.environ["TPU_NAME"]
    if glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"):
        return "local"
    return None


class Tpu(DistributeStrategy):
    strategy = Strategy.TPU
    devices = frozenset({DeviceKind.TPU})
    launch = Launch.ISOLATED
    read_back_to_sync = True

    def unavailable_reason(self, case: Case, device: "DeviceInfo") -> str | None:
        if case.device is not DeviceKind.TPU:
            return f"TPUStrategy runs on TPUs; this case asks for {case.device}"
        if device.count != case.n_devices:
            return (f"TPUStrategy replicates over every core of the TPU ({device.count} here); "
                    f"this case asks for {case.n_devices}")
        if case.precision is Precision.FP16:
            return "TPUs have no float16 arithmetic; their mixed precision is bf16"
        return split_reason(case, "replicas") or mirrored_variables_reason(case, "TPUStrategy")

    def emulated(self, case: Case) -> bool:
        return False

    def isolated_env(self, case: Case) -> dict[str, str]:
        """Its process may load libtpu, which the parbench process keeps out of itself."""
        return dict(TPU_PROCESS)

    def distribute(self, case: Case, backend_name: str = "auto") -> "tf.distribute.Strategy":
        import tensorflow as tf

        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address())
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)


PLUGIN = Tpu()
