"""TF `pipeline`: `model_parallel`'s placement with the batch cut into micro-batches.

Every step cuts the global batch into `microbatches` micro-batches inside one `tf.function`
(`suites.strategies.tf.model_parallel.staged.StagedTrainer`). No schedule is written down: TF's executor runs
each op when its inputs are ready, so stage k can work on micro-batch i while stage k+1 works
on micro-batch i-1 — a GPipe-like fill and drain, the order left to the dataflow.
`microbatches = 1` is `model_parallel`.

The theoretical bubble, (p - 1) / (m + p - 1) for p stages and m micro-batches (equal stage
times, free communication), is stored beside the measured step as the metric
`pipeline_bubble`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from suites.cases.case import Case
from suites.cases.vocabulary import Strategy
from suites.strategies.stages import MICROBATCHES, bubble, microbatches_of, microbatches_reason
from suites.strategies.tf.model_parallel import ModelParallel

if TYPE_CHECKING:
    from suites.kept.devices import DeviceInfo


class Pipeline(ModelParallel):
    strategy = Strategy.PIPELINE
    params = (MICROBATCHES,)

    def microbatches(self, case: Case) -> int:
        return microbatches_of(case)

    def unavailable_reason(self, case: Case, device: "DeviceInfo") -> str | None:
        return super().unavailable_reason(case, device) or microbatches_reason(case)

    def bubble_fraction(self, case: Case) -> float:
        return bubble(case.n_devices, self.microbatches(case))

    def activation_bytes_per_device(self, case: Case, activation_bytes: int) -> int | None:
        """Not estimated: a stage keeps its own layers' activations for every micro-batch in
        flight, not the data-parallel figure the workload supplies."""
        return None


PLUGIN = Pipeline()
