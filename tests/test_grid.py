"""Suite grids: expansion, ids, and one clear error line for every kind of bad input."""
from __future__ import annotations

from pathlib import Path

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import Framework
from suites.errors import GridError, UserError
from suites.frontends.cli import main
from suites.grids.grid import builtin_suite_names, load_suite, parse_suite
from suites.strategies.registry import strategies_of

GOOD = """
description = "test"
[timing]
budget_s = 1.0
[[grid]]
workload = "matmul"
framework = ["torch", "tf"]
device = "cpu"
precision = ["fp32", "bf16"]
params = { m = [64, 128], n = 32, k = "=m" }
"""


def test_grid_expands_to_the_product_with_stable_ids():
    suite = parse_suite(GOOD, "g.toml", "g")
    assert len(suite.cases) == 2 * 2 * 2
    ids = [c.id for c in suite.cases]
    assert "matmul/torch/cpu:1/single/fp32/k=64,m=64,n=32" in ids
    assert all(Case.from_id(i).id == i for i in ids)
    assert suite.timing.budget_s == 1.0


def test_builtin_suites_parse_and_quick_covers_every_kernel_in_both_frameworks():
    assert {"quick", "kernels", "training", "scaling"} <= set(builtin_suite_names())
    quick = load_suite("quick").cases
    fp32 = {(c.workload, str(c.framework)) for c in quick if str(c.precision) == "fp32"}
    assert fp32 == {("matmul", "torch"), ("matmul", "tf"), ("conv2d", "torch"), ("conv2d", "tf")}
    assert any(str(c.precision) in ("bf16", "fp16") for c in quick)
    kernels = load_suite("kernels").cases
    assert {c.param_dict.get("layout") for c in kernels if c.workload == "conv2d"} == {"nhwc", "nchw"}
    assert any(c.param_dict.get("n", 0) < 64 < c.param_dict.get("m", 0) for c in kernels)  # skinny GEMMs


def test_user_grid_file_by_path(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(GOOD)
    suite = load_suite(str(path))
    assert suite.name == "mine" and len(suite.cases) == 8


@pytest.mark.parametrize("text, key, words", [
    ("[[grid]\nworkload=", "toml", "not valid TOML"),
    ('description = "x"', "grid", "no [[grid]]"),
    (GOOD.replace('"matmul"', '"matmull"'), "grid[0].workload", "allowed: matmul, conv2d"),
    (GOOD.replace('["torch", "tf"]', '"jax"'), "grid[0].framework", "allowed: torch, tf"),
    (GOOD.replace('device = "cpu"', 'device = "npu"'), "grid[0].device", "allowed: cpu, gpu, tpu"),
    (GOOD.replace('"bf16"]', '"fp8"]'), "grid[0].precision", "allowed: fp32, tf32, fp16, bf16"),
    (GOOD.replace("n = 32", "n = 0"), "grid[0].params.n", "must be >= 1"),
    (GOOD.replace("n = 32", "n = -5"), "grid[0].params.n", "must be >= 1"),
    (GOOD.replace("n = 32", "n = 3.5"), "grid[0].params.n", "must be an integer"),
    (GOOD.replace("n = 32", "n = 32, q = 1"), "grid[0].params.q", "unknown parameter"),
    (GOOD.replace(', k = "=m"', ""), "grid[0].params", "needs k"),
    (GOOD.replace('"=m"', '"=z"'), "grid[0].params.k", "names no plain parameter"),
    (GOOD.replace("budget_s = 1.0", "budget_s = -1"), "timing.budget_s", "> 0"),
    (GOOD.replace("budget_s = 1.0", "budgit = 1"), "timing.budgit", "unknown key"),
    ("foo = 1\n" + GOOD, "foo", "unknown key"),
    (GOOD.replace('workload = "matmul"', 'workload = "matmul"\nwhat = 1'), "grid[0].what", "unknown key"),
    ('[[grid]]\nworkload="conv2d"\nframework="torch"\ndevice="cpu"\n'
     'params={batch=1,h=2,w=2,cin=1,cout=1,kernel=3,padding="valid"}', "grid[0].params", "larger than"),
    ('[[grid]]\nworkload="conv2d"\nframework="torch"\ndevice="cpu"\n'
     'params={batch=1,h=8,w=8,cin=1,cout=1,layout="nchwc"}', "grid[0].params.layout", "nhwc, nchw"),
])
def test_bad_grids_name_file_key_and_allowed_values(text, key, words):
    with pytest.raises(GridError) as error:
        parse_suite(text, "bad.toml", "bad")
    message = str(error.value)
    assert message.startswith(f"bad.toml: {key}:"), message
    assert words in message
    assert "\n" not in message


def test_unknown_suite_and_missing_file():
    with pytest.raises(UserError, match="unknown suite 'nope'.*quick"):
        load_suite("nope")
    with pytest.raises(UserError, match="does not exist"):
        load_suite("/no/such/grid.toml")


TRAIN = """
[[grid]]
workload = "train_step"
framework = {framework}
device = {device}
strategy = {strategy}
n_devices = {n_devices}
params = {{ model = "mlp", batch = 32 }}
"""


def train_grid(tmp_path, framework='"tf"', device='"cpu"', strategy='"single"', n_devices="2") -> Path:
    path = tmp_path / "train.toml"
    path.write_text(TRAIN.format(framework=framework, device=device, strategy=strategy, n_devices=n_devices))
    return path


@pytest.mark.parametrize("framework, strategy", [('"tf"', '"ddp"'), ('"tf"', '["single", "dataparallel"]'),
                                                 ('"torch"', '"mirrored"')])
def test_strategy_of_another_framework_names_file_entry_and_allowed_combinations(tmp_path, framework, strategy):
    path = train_grid(tmp_path, framework=framework, strategy=strategy)
    with pytest.raises(GridError) as error:
        load_suite(str(path))
    message = str(error.value)
    assert message.startswith(f"{path}: grid[0].strategy: ") and "is not a strategy of" in message
    each = "; ".join(f"{name}: {', '.join(map(str, strategies_of(name)))}" for name in Framework)
    assert f"allowed framework x strategy combinations: {each}" in message
    assert "torch: single, " in message and "tf: single, " in message  # derived, and not empty
    assert "\n" not in message


def test_strategy_on_no_device_it_runs_on_is_an_error(tmp_path):
    with pytest.raises(GridError, match=r"grid\[0\]\.strategy: 'tpu' does not run on cpu or gpu; it runs on tpu"):
        load_suite(str(train_grid(tmp_path, device='["cpu", "gpu"]', strategy='"tpu"')))


def test_impossible_pairs_of_a_product_are_dropped_and_the_rest_kept(tmp_path):
    path = train_grid(tmp_path, framework='["torch", "tf"]', device='["cpu", "tpu"]',
                      strategy='["ddp", "mirrored", "tpu"]')
    triples = {(str(c.framework), str(c.device), str(c.strategy)) for c in load_suite(str(path)).cases}
    assert triples == {("torch", "cpu", "ddp"), ("tf", "cpu", "mirrored"), ("tf", "tpu", "tpu")}


def test_entry_expanding_to_no_cases_is_an_error(tmp_path):
    path = train_grid(tmp_path, n_devices="[]")
    with pytest.raises(GridError, match=r"grid\[0\]: expands to no train_step cases"):
        load_suite(str(path))
    with pytest.raises(GridError, match=r"^bad.toml: grid\[1\]: expands to no matmul cases: .*empty list"):
        parse_suite(GOOD + GOOD[GOOD.index("[[grid]]"):].replace("m = [64, 128]", "m = []"), "bad.toml", "bad")


@pytest.mark.parametrize("command", ["list", "run"])
def test_run_and_list_of_a_grid_without_cases_fail_with_one_line(tmp_path, capsys, command):
    path = train_grid(tmp_path, strategy='"ddp"')
    extra = ["--results", str(tmp_path / "results")] if command == "run" else []
    assert main([command, "--suite", str(path), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"parbench: error: {path}: grid[0].strategy: 'ddp' is not a strategy of tf")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "results").exists()


# --- a strategy's own parameters ------------------------------------------------------------
def _with_a_ddp_knob(monkeypatch):
    """Pretend torch's ddp plugin declares an option `knob` (default 1, 1 or 2)."""
    from dataclasses import dataclass

    from suites.cases.vocabulary import Framework, Strategy
    from suites.strategies.jobs import _job
    from suites.strategies.options import option, params_of
    from suites.strategies.registry import find_plugin

    @dataclass(frozen=True)
    class KnobOptions:
        knob: int = option(1, choices=(1, 2))

    plugin = type(find_plugin(Framework.TORCH, Strategy.DDP))
    monkeypatch.setattr(plugin, "options_type", KnobOptions)
    monkeypatch.setattr(plugin, "params", params_of(KnobOptions))
    _job.cache_clear()  # no job built before the knob existed


def test_a_strategy_parameter_goes_to_that_strategys_cases_only(tmp_path, monkeypatch):
    _with_a_ddp_knob(monkeypatch)
    path = tmp_path / "knob.toml"
    path.write_text('[[grid]]\nworkload = "train_step"\nframework = "torch"\ndevice = "cpu"\n'
                    'strategy = ["single", "ddp"]\nn_devices = 2\n'
                    'params = { model = "mlp", batch = 8, knob = [1, 2] }\n')
    ids = [case.id for case in load_suite(str(path)).cases]
    assert ids == ["train_step/torch/cpu:2/single/fp32/batch=8,model=mlp",
                   "train_step/torch/cpu:2/ddp/fp32/batch=8,knob=1,model=mlp",
                   "train_step/torch/cpu:2/ddp/fp32/batch=8,knob=2,model=mlp"]


def test_a_strategy_parameter_is_checked_and_defaults_into_the_jobs_options(tmp_path, monkeypatch):
    from suites.strategies.jobs import _job, job_for

    _with_a_ddp_knob(monkeypatch)
    path = tmp_path / "knob.toml"
    path.write_text('[[grid]]\nworkload = "train_step"\nframework = "torch"\ndevice = "cpu"\n'
                    'strategy = "ddp"\nn_devices = 2\nparams = { model = "mlp", batch = 8, knob = 3 }\n')
    with pytest.raises(GridError, match="knob.*3 is not one of 1, 2"):
        load_suite(str(path))
    case = Case.make("train_step", "torch", "cpu", "ddp", "fp32", 2, {"model": "mlp", "batch": 8})
    job = job_for(case)
    assert job.options.knob == 1 and "knob" not in job.workload.p
    _job.cache_clear()
