"""A case is resolved once, into a job: its workload, its strategy plugin with typed options, its
compiler with its options (`suites.strategies.jobs`)."""
from __future__ import annotations

import dataclasses

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import Compile, Framework, Strategy
from suites.errors import GridError
from suites.grids.grid import parse_suite
from suites.strategies.jobs import job_for
from suites.strategies.options import NoOptions, option, options_from, params_of
from suites.strategies.registry import NoSuchStrategy, find_plugin
from suites.strategies.torch.fsdp import FsdpOptions
from suites.strategies.torch.pipeline import PipelineOptions


def test_a_job_carries_the_plugins_typed_options_and_the_workload_only_its_own_parameters():
    job = job_for(Case.from_id("train_step/torch/cpu:2/fsdp/fp32/batch=8,model=mlp,reshard=False"))
    assert job.strategy is find_plugin(Framework.TORCH, Strategy.FSDP)
    assert job.options == FsdpOptions(reshard=False)
    assert job.compiler.compile is Compile.NONE and job.compiler.options == NoOptions()
    assert "reshard" not in job.workload.p and job.workload.p["model"] == "mlp"


def test_options_take_their_defaults_where_the_case_gives_none():
    job = job_for(Case.make("train_step", "torch", "cpu", "pipeline", "fp32", 2, {"model": "mlp", "batch": 8}))
    assert job.options == PipelineOptions(schedule="gpipe", microbatches=4)
    assert job.strategy.batch_parts(job) == 4  # lcm(2 devices, 4 micro-batches)


def test_a_compilers_options_are_the_jobs_compiler_options():
    job = job_for(Case.make("matmul", "torch", "cpu", compile="inductor",
                            params={"m": 8, "n": 8, "k": 8, "compile_mode": "max-autotune"}))
    assert job.compiler.compile is Compile.INDUCTOR and job.compiler.options.compile_mode == "max-autotune"
    assert "compile_mode" not in job.workload.p


def test_a_case_is_resolved_once():
    case = Case.make("matmul", "tf", "cpu", params={"m": 8, "n": 8, "k": 8})
    assert job_for(case) is job_for(Case.from_id(case.id))


def test_a_case_of_no_plugin_is_no_job():
    with pytest.raises(NoSuchStrategy, match="'ddp' is not a strategy of tf"):
        job_for(Case.make("train_step", "tf", "cpu", "ddp", "fp32", 2, {"model": "mlp", "batch": 8}))


def test_a_plugins_grid_parameters_are_its_options_fields():
    assert [(p.name, p.type, p.default) for p in find_plugin(Framework.TORCH, Strategy.FSDP).params] == \
        [("reshard", bool, True)]
    assert [p.name for p in find_plugin(Framework.TORCH, Strategy.PIPELINE).params] == ["schedule", "microbatches"]
    assert find_plugin(Framework.TORCH, Strategy.PIPELINE).params[0].choices == ("gpipe", "1f1b", "interleaved_1f1b")


def test_options_are_validated_as_their_fields_declare():
    @dataclasses.dataclass(frozen=True)
    class Knob:
        knob: int = option(1, choices=(1, 2), help="a knob")

    assert params_of(Knob)[0].help == "a knob"
    assert options_from(Knob, {"knob": 2, "model": "mlp"}) == Knob(2)
    with pytest.raises(ValueError, match="knob: 3 is not one of 1, 2"):
        options_from(Knob, {"knob": 3})


def test_the_grid_rejects_a_bad_option_in_one_line_naming_the_entry():
    text = ('[[grid]]\nworkload = "train_step"\nframework = "torch"\ndevice = "cpu"\nstrategy = "pipeline"\n'
            'n_devices = 2\nparams = { model = "mlp", batch = 8, schedule = "zigzag" }\n')
    with pytest.raises(GridError) as error:
        parse_suite(text, "bad.toml", "bad")
    assert str(error.value).startswith("bad.toml: grid[0].params.schedule: 'zigzag' is not one of gpipe")
    assert "\n" not in str(error.value)
