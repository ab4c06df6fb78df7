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

import math

from typing import TYPE_CHECKING

from suites.cases.vocabulary import Strategy
from suites.strategies.stages import MicrobatchOptions, bubble, microbatches_divide_batch, microbatches_of
from suites.strategies.tf.model_parallel import ModelParallel
from suites.strategies.exchange_model import Collective, ExchangeModel

if TYPE_CHECKING:
    from suites.strategies.jobs import Job


class Pipeline(ModelParallel):
    strategy = Strategy.PIPELINE
    # Each micro-batch's activations cross each stage boundary forward and their gradient backward;
    # the schedule leaves (stages - 1) / (micro-batches + stages - 1) of the step idle.
    exchange = ExchangeModel((Collective("send_recv", "stage_activations", "compute", per_step=2),),
                             bubble=True, source="GPipe (Huang et al. 2019): bubble (p-1)/(m+p-1)")
    options_type = MicrobatchOptions
    requirements = (*ModelParallel.requirements, microbatches_divide_batch)

    def batch_parts(self, job: "Job") -> int:
        return math.lcm(job.case.n_devices, job.options.microbatches)

    def microbatches(self, job: "Job") -> int:
        return microbatches_of(job)

    def bubble_fraction(self, job: "Job") -> float:
        return bubble(job.n_devices, self.microbatches(job))

    def activation_bytes_per_device(self, job: "Job", activation_bytes: int) -> int | None:
        """Not estimated: a stage keeps its own layers' activations for every micro-batch in
        flight, not the data-parallel figure the workload supplies."""
        return None


PLUGIN = Pipeline()
