"""TF `tpu`: `tf.distribute.TPUStrategy` over the cores of a TPU, in a fresh process.

Available only where `suites.hardware.devices` found a TPU runtime, so nothing tries to connect
to an absent TPU (which blocks forever).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from suites.cases.vocabulary import Compile, DeviceKind, Precision, Strategy
from suites.frameworks.tf import tpu_address
from suites.frameworks.tf.environment import tpu_process_env
from suites.measure.launch import Launch
from suites.strategies.requirements import requirement
from suites.strategies.tf.base import DistributeHooks, DistributeStrategy, equal_replica_shards

if TYPE_CHECKING:
    from suites.strategies.jobs import Job
    import tensorflow as tf

    from suites.hardware.devices import DeviceInfo


#: The TPU core counts a single-host TPU exposes to TensorFlow: 1 (v5e-1, v6e-1), 4 (v4-8,
#: v5p-8, v5e-4, v6e-4: a v4/v5p chip's two TensorCores are one device), 8 (v2-8, v3-8,
#: v5e-8, v6e-8). The training grid declares a TPU case for each (suites/grids/training.toml),
#: and the one matching the TPU runs.
TPU_CORE_COUNTS = (1, 4, 8)


@requirement("the case is on a TPU")
def on_tpu(job: "Job", device: "DeviceInfo") -> str | None:
    return f"TPUStrategy runs on TPUs; this case asks for {job.device}" if job.device is not DeviceKind.TPU else None


@requirement("n_devices is the TPU's core count: TPUStrategy replicates over every core")
def every_core(job: "Job", device: "DeviceInfo") -> str | None:
    if device.count == job.n_devices:
        return None
    # n_devices stays the true replica count (it sets the global batch and every per-device
    # figure), so a case for another core count is not stretched to fit.
    matching = (f"the case with n_devices = {device.count} runs here" if device.count in TPU_CORE_COUNTS
                else f"no built-in case has n_devices = {device.count}: add one to a grid")
    return (f"TPUStrategy replicates over every core of the TPU ({device.count} here); "
            f"this case asks for {job.n_devices} ({matching})")


@requirement("not fp16: TPUs have no float16 arithmetic (bf16 is their mixed precision)")
def no_fp16(job: "Job", device: "DeviceInfo") -> str | None:
    if job.case.precision is Precision.FP16:
        return "TPUs have no float16 arithmetic; their mixed precision is bf16"
    return None


class TpuHooks(DistributeHooks):
    def distribute(self, job: "Job", backend_name: str = "auto") -> "tf.distribute.Strategy":
        import tensorflow as tf

        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address())
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)


class Tpu(DistributeStrategy):
    strategy = Strategy.TPU
    # Startup: before its first step a TPU worker imports TF, loads libtpu, connects and
    # initialises the TPU system (up to a minute or more) and builds the strategy; the first
    # step's and the check's XLA compiles come after (the first step has its own allowance).
    rules = DistributeStrategy.rules.but(
        devices=frozenset({DeviceKind.TPU}), launch=Launch.ISOLATED, read_back_to_sync=True,
        startup_allowance_s=300.0,
        compile_limits={Compile.XLA: "TPUStrategy compiles every step with XLA already: compile 'none' is the XLA "
                                     "case"})
    requirements = (on_tpu, every_core, no_fp16, equal_replica_shards)
    hooks = TpuHooks()

    def devices_at_hand(self, kind: DeviceKind, count: int) -> int:
        """Every TPU core at hand (one is a TPU case too: TPUStrategy over one core)."""
        return count

    def emulated(self, job: "Job") -> bool:
        return False

    def isolated_env(self, job: "Job") -> dict[str, str]:
        """Its process may load libtpu, which the parbench process keeps out of itself."""
        return tpu_process_env()


PLUGIN = Tpu()
