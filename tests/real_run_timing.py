"""The timing of the tests' real runs: cases launched through the runner (in this process, in an
isolated worker, as rank processes) whose records the tests check for status, numerics, ranks and
memory, never for a figure's value."""
from __future__ import annotations

from suites.cases.timing_config import TimingConfig

#: The fewest steps that still take every stage of the timer: the first step, one warm step, then
#: three timed blocks of one step (a multi-rank case's blocks still last its runnable's own
#: `min_block_s`), which a target spread of the whole median accepts at once. The budget bounds the
#: case only where three samples disagree by more than that: it stays high enough that a loaded
#: machine's slow steps are not cut short (`case_limit_s`: 5 x the budget). A measurement taken
#: beside other work is not taken again (`contention_retries`): a retry re-launches every process
#: of the case, and none of these tests asserts on the contention verdict.
REAL_RUN = TimingConfig(warmup_s=0.0, min_warmup_steps=1, block_min_s=0.0, min_samples=3, min_time_s=0.0,
                        target_rel_iqr=1.0, budget_s=0.5, contention_retries=0)
