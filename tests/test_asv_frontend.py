"""The asv front end: asv.conf.json against asv's own keys, discovery = the registry, adapters."""
from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import asv
import asv.config
import asv.environment
import pytest
from asv_runner.benchmarks.mark import SkipNotImplemented

from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.frontends import asv_support
from suites.frontends.prepared import CaseUnavailable, runs_in_process
from suites.grids.grid import builtin_suite_names, load_suite
from suites.records.asv_layout import AXES, LAUNCHED_SUFFIX, axis_values, case_id_from_axes
from suites.records.measurement import Measurement
from suites.runner.execute import Outcome
from suites.strategies.versions import version_of
from suites.workloads import workload_class, workload_of

ROOT = Path(__file__).resolve().parent.parent
CONFIG = json.loads((ROOT / "asv.conf.json").read_text())
ASV_SOURCE = Path(asv.__file__).parent

#: A grid whose cases launch rank processes (torch DDP), next to one timed in process.
LAUNCHED_GRID = """
[[grid]]
workload = "allreduce"
framework = "torch"
device = ["cpu", "gpu"]
strategy = "ddp"
n_devices = 2
params = { bytes = 4096 }

[[grid]]
workload = "train_step"
framework = "torch"
device = "cpu"
strategy = ["single", "ddp"]
n_devices = [1, 2]
params = { model = "mlp", batch = 8 }
"""


def known_config_keys() -> set[str]:
    """Every key asv reads from asv.conf.json: `Config`'s attributes, the file-format
    `version`, and the optional ones its modules read with getattr(conf, "...")."""
    keys = set(vars(asv.config.Config())) | {"version"}
    for path in ASV_SOURCE.rglob("*.py"):
        keys |= set(re.findall(r"getattr\(\s*conf\s*,\s*['\"](\w+)['\"]", path.read_text()))
    return keys


def test_every_asv_config_key_is_one_asv_knows():
    unknown = set(CONFIG) - known_config_keys()
    assert not unknown, f"asv silently ignores these keys of asv.conf.json: {sorted(unknown)}"
    matrix_kinds = set(re.findall(r"key_type == '(\w+)'",
                                  inspect.getsource(asv.environment._parse_matrix_entries))) - {"python"}
    assert matrix_kinds == {"req", "env", "env_nobuild"}
    assert set(CONFIG["matrix"]) <= matrix_kinds


def test_asv_config_places_and_pins():
    assert CONFIG["version"] == asv.config.Config.api_version
    assert (CONFIG["benchmark_dir"], CONFIG["results_dir"], CONFIG["html_dir"]) == \
        ("benchmarks", "results/asv", "reports/asv")
    assert (CONFIG["launch_method"], CONFIG["environment_type"]) == ("spawn", "virtualenv")
    # Exact pins: a range or a bare name would let pip fetch the multi-GB CUDA torch build.
    assert CONFIG["matrix"]["req"] == {"torch": ["2.13.0"], "tensorflow-cpu": ["2.21.0"]}
    # Only parbench's own wheel: asv installs the one wheel it finds in the build cache, and
    # a `pip wheel` with dependencies leaves numpy's, pandas', ... there too.
    assert all("--no-deps" in command for command in CONFIG["build_command"] if "pip wheel" in command)
    assert asv.config.Config.from_json({**CONFIG}).results_dir == "results/asv"


def test_asv_output_is_ignored_by_git():
    paths = [CONFIG["results_dir"] + "/m/r.json", CONFIG["html_dir"] + "/index.html",
             CONFIG["env_dir"] + "/x", "results/pytest-benchmark/a.json"]
    ignored = subprocess.run(["git", "check-ignore", *paths], cwd=ROOT, capture_output=True, text=True)
    assert ignored.stdout.split() == paths


@pytest.mark.parametrize("module", sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py")))
def test_benchmark_module_imports_without_frameworks(module):
    code = (f"import sys, benchmarks.{module}; "
            f"loaded = [m for m in ('torch', 'tensorflow') if m in sys.modules]; "
            f"assert not loaded, loaded")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


def asv_env() -> dict[str, str]:
    """The environment asv's benchmark runner needs to import this checkout's parbench: it drops
    PYTHONPATH and would otherwise import whichever parbench is installed."""
    env = {k: v for k, v in os.environ.items() if k != asv_support.SUITE_ENV}
    return {**env, "ASV_PYTHONPATH": str(ROOT)}


def test_asv_check_passes():
    result = subprocess.run([sys.executable, "-m", "asv", "check", "--python=same"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, env=asv_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No problems found" in result.stdout


#: benchmarks/ modules that time parbench itself, not a suite's cases.
OWN_BENCHMARKS = ("report_fleet.", "predict.")


def discover(tmp_path: Path, suite: str | None) -> dict[str, dict]:
    """What asv itself discovers for the suite's cases: the discovery step `asv run` runs,
    with its JSON output, less parbench's own benchmarks (`OWN_BENCHMARKS`)."""
    return {name: entry for name, entry in discover_all(tmp_path, suite).items()
            if not name.startswith(OWN_BENCHMARKS)}


def discover_all(tmp_path: Path, suite: str | None) -> dict[str, dict]:
    """Everything asv discovers in benchmarks/."""
    out = tmp_path / "discovered.json"
    env = asv_env()
    if suite is not None:
        env[asv_support.SUITE_ENV] = suite
    subprocess.run([sys.executable, str(ASV_SOURCE / "benchmark.py"), "discover",
                    str(ROOT / "benchmarks"), str(out)], cwd=ROOT, env=env, check=True, timeout=120)
    return {entry["name"]: entry for entry in json.loads(out.read_text())}


def discovered_cases(benchmarks: dict[str, dict]) -> dict[str, list[str]]:
    """{class name: its case ids}, after checking every method of a class has the same cases and
    that its named axes list exactly the values its cases take."""
    by_class: dict[str, list[str]] = {}
    for name, entry in benchmarks.items():
        assert entry["param_names"] == list(AXES), name
        cases = entry["case_ids"]
        axes = [[value.strip("'") for value in values] for values in entry["params"]]
        assert [set(values) for values in axes] == \
            [set(values) for values in zip(*(axis_values(Case.from_id(c)) for c in cases))], name
        by_class.setdefault(name.rsplit(".", 1)[0], cases)
        assert by_class[name.rsplit(".", 1)[0]] == cases, name
    return by_class


@pytest.mark.parametrize("suite", [None, *builtin_suite_names()])
def test_asv_discovers_exactly_the_suites_cases(tmp_path, suite):
    benchmarks = discover(tmp_path, suite)
    by_class = discovered_cases(benchmarks)
    expected = [case.id for case in load_suite(suite or "quick").cases]
    found = [case_id for cases in by_class.values() for case_id in cases]
    assert sorted(found) == sorted(expected) and len(set(found)) == len(found)
    for class_name, case_ids in by_class.items():
        module, cls = class_name.split(".")
        cases = [Case.from_id(case_id) for case_id in case_ids]
        workload = workload_class(cases[0].workload)
        launched = [not runs_in_process(case) for case in cases]
        assert module == asv_support.KIND_MODULES[workload.kind]
        assert cls == workload.__name__ + (LAUNCHED_SUFFIX if launched[0] else "")
        assert all(c.workload == workload.name for c in cases) and len(set(launched)) == 1
    for name, entry in benchmarks.items():
        workload = workload_class(Case.from_id(entry["case_ids"][0]).workload)
        assert entry["version"] == version_of(workload)
    methods = {name.split(".", 1)[1] for name in benchmarks}
    if suite is None:
        assert methods == {"Matmul.time_step", "Matmul.track_tflops", "Conv2d.time_step",
                           "Conv2d.track_tflops", "Conv2d.track_samples_per_s"}


def test_asv_tracks_the_reports_own_speed_on_a_fleet(tmp_path):
    """issue 31: the report's build time, memory and size on a 10-machine fleet, in asv."""
    tracked = {name for name in discover_all(tmp_path, None) if name.startswith("report_fleet.")}
    assert tracked == {"report_fleet.ReportFleet10.track_build_seconds",
                       "report_fleet.ReportFleet10.track_peak_memory_mb",
                       "report_fleet.ReportFleet10.track_written_mb"}


def test_asv_tracks_the_predictors_speed_and_its_validation_score(tmp_path):
    """issue 44: the projection's own speed and the validation set's error, in asv."""
    tracked = {name for name in discover_all(tmp_path, None) if name.startswith("predict.")}
    assert {"predict.TimeProject.time_project_1000_targets", "predict.TrackValidation.track_weak_median_abs_error",
            "predict.TrackValidation.track_weak_band_coverage"} <= tracked


def test_launched_strategies_get_their_own_classes(tmp_path):
    grid = tmp_path / "launched.toml"
    grid.write_text(LAUNCHED_GRID)
    benchmarks = discover(tmp_path, str(grid))
    by_class = discovered_cases(benchmarks)
    suite = load_suite(str(grid))
    assert set(by_class) == {"collectives.AllreduceLaunched", "training.TrainStep",
                             "training.TrainStepLaunched"}
    assert by_class["training.TrainStep"] == [c.id for c in suite.cases
                                              if c.workload == "train_step" and str(c.strategy) == "single"]
    assert {n.rsplit(".", 1)[1] for n in benchmarks if n.startswith("training.TrainStepLaunched.")} == \
        {"track_rank_step_s", "track_tflops", "track_samples_per_s", "track_peak_memory_bytes"}
    # An all-reduce has no FLOPs and no samples: only the in-rank step time.
    assert [n for n in benchmarks if n.startswith("collectives.")] == \
        ["collectives.AllreduceLaunched.track_rank_step_s"]
    assert benchmarks["training.TrainStepLaunched.track_rank_step_s"]["unit"] == "seconds"
    assert benchmarks["training.TrainStepLaunched.track_rank_step_s"]["timeout"] > 60


def test_a_case_id_is_its_workload_and_its_axis_values():
    case = Case.make("train_step", "torch", "cpu", "ddp", "bf16", 2, params={"model": "mlp", "batch": 8})
    assert axis_values(case) == ("torch", "cpu:2", "ddp", "bf16", "batch=8,model=mlp")
    assert case_id_from_axes(case.workload, axis_values(case)) == case.id


def classes(grid_text: str, tmp_path: Path) -> dict[str, type]:
    grid = tmp_path / "grid.toml"
    grid.write_text(grid_text)
    suite = load_suite(str(grid))
    return {**asv_support.benchmark_classes("kernel", "benchmarks.kernels", suite),
            **asv_support.benchmark_classes("training", "benchmarks.training", suite),
            **asv_support.benchmark_classes("collective", "benchmarks.collectives", suite)}


def test_in_process_benchmark_times_a_prepared_case_and_skips_unavailable_ones(tmp_path):
    pytest.importorskip("torch")
    generated = classes('[timing]\nbudget_s = 0.2\nwarmup_s = 0.02\nmin_time_s = 0.01\n'
                        '[[grid]]\nworkload = "matmul"\nframework = "torch"\ndevice = ["cpu", "gpu"]\n'
                        'params = { m = 64, n = 64, k = 64 }\n', tmp_path)
    matmul = generated["Matmul"]()
    assert matmul.params == [["torch"], ["cpu:1", "gpu:1"], ["single"], ["fp32"], ["k=64,m=64,n=64"]]
    cpu, gpu = (("torch", device, "single", "fp32", "k=64,m=64,n=64") for device in ("cpu:1", "gpu:1"))
    matmul.setup(*cpu)
    prepared = matmul.prepared
    assert prepared.check.passed and prepared.warmup.steps >= 1
    matmul.time_step(*cpu)
    matmul.setup(*cpu)  # asv re-runs setup before every sample: the prepared case is reused
    assert matmul.prepared is prepared
    assert 0 < matmul.track_tflops(*cpu) < 1e4
    with pytest.raises(NotImplementedError, match="no gpu"):  # asv shows it as n/a
        matmul.setup(*gpu)


def test_combinations_that_are_no_case_of_the_suite_are_skipped_in_setup(tmp_path):
    generated = classes('[[grid]]\nworkload = "matmul"\nframework = "torch"\ndevice = "cpu"\n'
                        'precision = "fp32"\nparams = { m = 64, n = 64, k = 64 }\n'
                        '[[grid]]\nworkload = "matmul"\nframework = "torch"\ndevice = "cpu"\n'
                        'precision = "bf16"\nparams = { m = 32, n = 32, k = 32 }\n'
                        '[[grid]]\nworkload = "allreduce"\nframework = "torch"\ndevice = "cpu"\n'
                        'strategy = "ddp"\nn_devices = 2\nparams = { bytes = 8192 }\n'
                        + LAUNCHED_GRID, tmp_path)
    matmul = generated["Matmul"]()
    assert matmul.params[3:] == [["fp32", "bf16"], ["k=64,m=64,n=64", "k=32,m=32,n=32"]]
    for benchmark, axes in ((matmul, ("torch", "cpu:1", "single", "bf16", "k=64,m=64,n=64")),
                            (generated["AllreduceLaunched"](), ("torch", "gpu:2", "ddp", "fp32", "bytes=8192"))):
        with pytest.raises(NotImplementedError, match="not a case of the suite"):  # asv: n/a, not failed
            benchmark.setup(*axes)


def fake_launch(outcome: Outcome):
    def launch(runner, job):
        return outcome
    return launch


def test_sequence_models_track_tokens_per_second_and_others_do_not(tmp_path, monkeypatch):
    generated = classes(LAUNCHED_GRID.replace('params = { model = "mlp", batch = 8 }', (
        'params = [{ model = "mlp", batch = 8 }, '
        '{ model = "gpt2_small", batch = 8, seq = 8, d_model = 16, heads = 2, ffn = 32, layers = 1 }]')), tmp_path)
    bench = generated["TrainStepLaunched"]()
    assert hasattr(bench, "track_tokens_per_s")
    assert not hasattr(classes(LAUNCHED_GRID, tmp_path)["TrainStepLaunched"](), "track_tokens_per_s")
    case_id = next(c for c in bench.case_ids if "gpt2_small" in c)
    axes = axis_values(Case.from_id(case_id))
    ranks = Measurement(samples=(0.010, 0.012, 0.011), rank_medians=(0.011, 0.0112))
    monkeypatch.setattr(asv_support.Runner, "launch", fake_launch(Outcome(Status.OK, measurement=ranks)))
    workload = workload_of(Case.from_id(case_id))
    tokens = workload.tokens_per_step()
    assert tokens == workload.global_batch * 8  # every sample is a sequence of 8 tokens
    assert bench.track_tokens_per_s(*axes) == pytest.approx(tokens / 0.011)


def test_launched_benchmark_reports_what_the_ranks_measured(tmp_path, monkeypatch):
    generated = classes(LAUNCHED_GRID, tmp_path)
    bench = generated["TrainStepLaunched"]()
    case_id = "train_step/torch/cpu:2/ddp/fp32/batch=8,model=mlp"
    assert case_id in bench.case_ids
    axes = axis_values(Case.from_id(case_id))
    ranks = Measurement(samples=(0.010, 0.012, 0.011), rank_medians=(0.011, 0.0112))
    monkeypatch.setattr(asv_support.Runner, "launch", fake_launch(Outcome(Status.OK, measurement=ranks)))
    assert bench.track_rank_step_s(*axes) == pytest.approx(0.011)
    batch = workload_of(Case.from_id(case_id)).samples_per_step()
    assert bench.track_samples_per_s(*axes) == pytest.approx(batch / 0.011)

    monkeypatch.setattr(asv_support.Runner, "launch", fake_launch(Outcome(Status.UNAVAILABLE, "gloo missing")))
    with pytest.raises(SkipNotImplemented, match="gloo missing"):
        bench.track_rank_step_s(*axes)
    monkeypatch.setattr(asv_support.Runner, "launch", fake_launch(Outcome(
        Status.FAILED, "rank 1 exited with code 1", details={"output_tail": ["Traceback ..."]})))
    with pytest.raises(RuntimeError, match="rank 1 exited(.|\n)*Traceback"):
        bench.track_rank_step_s(*axes)


def test_launched_benchmark_setup_skips_unavailable_cases(tmp_path):
    generated = classes(LAUNCHED_GRID, tmp_path)
    bench = generated["AllreduceLaunched"]()
    with pytest.raises(CaseUnavailable):
        bench.setup("torch", "gpu:2", "ddp", "fp32", "bytes=4096")
