"""TensorFlow leaves nothing behind and puts no tracing into step times: autograph's generated
files go to the run's temp folder, which goes with the run; a training case's timed steps trace
nothing (the first step traces, and is stored apart)."""
from __future__ import annotations

import logging
import subprocess
import sys
import tempfile

import pytest

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Status
from suites.measure import timing as timing_module
from suites.runner.execute import execute_in_process
from suites.strategies.jobs import job_for
from suites.measure.scratch import run_temp_dir

AUTOGRAPH_FILES = "__autograph_generated_file*"


@pytest.fixture
def system_temp(tmp_path, monkeypatch):
    """A private stand-in for the system temp folder: other processes' files never show in it."""
    folder = tmp_path / "system-temp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.delenv("TMPDIR", raising=False)
    return folder


def test_the_run_temp_folder_is_every_process_temp_folder_and_goes_at_the_end(system_temp):
    with run_temp_dir() as folder:
        assert folder.parent == system_temp and tempfile.gettempdir() == str(folder)
        child = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
                               capture_output=True, text=True, check=True)
        assert child.stdout.strip() == str(folder)
        tempfile.NamedTemporaryFile(prefix="left-behind", delete=False).close()
    assert not folder.exists() and list(system_temp.iterdir()) == []
    assert tempfile.gettempdir() == str(system_temp)


def test_autograph_files_stay_out_of_the_system_temp_folder(system_temp):
    tf = pytest.importorskip("tensorflow")

    @tf.function
    def clipped(x):
        if tf.reduce_sum(x) > 0:  # a tensor condition: autograph converts it, writing a file
            return x
        return -x

    with run_temp_dir() as folder:
        clipped(tf.constant([1.0, -2.0]))
        assert list(folder.glob(AUTOGRAPH_FILES)), "autograph wrote no file: the test proves nothing"
    assert list(system_temp.glob(AUTOGRAPH_FILES)) == [] and not folder.exists()


def test_a_tf_training_cases_timed_steps_trace_nothing(monkeypatch):
    pytest.importorskip("tensorflow")
    traces = {}
    real_warm_up = timing_module.warm_up

    def warm_up(runnable, *args, **kwargs):
        warm = real_warm_up(runnable, *args, **kwargs)
        traces["runnable"] = runnable
        traces["warm"] = runnable.trainer._step.experimental_get_tracing_count()
        return warm

    monkeypatch.setattr(timing_module, "warm_up", warm_up)
    case = Case.make("train_step", "tf", "cpu", params={"model": "mlp", "batch": 8})
    timing = TimingConfig(warmup_s=0.02, block_min_s=0.002, min_samples=5, min_time_s=0.01, budget_s=0.1)
    outcome = execute_in_process(job_for(case), timing)
    assert outcome.status is Status.OK, outcome.reason
    assert outcome.measurement.n >= 5
    assert traces["warm"] == 1  # the first step traced (its time is stored apart) ...
    assert traces["runnable"].trainer._step.experimental_get_tracing_count() == 1  # ... no timed step did


def test_only_the_retracing_warnings_of_functions_traced_anew_by_design_are_dropped():
    from suites.frameworks.tf.backend import quiet_expected_retracing

    quiet_expected_retracing()
    logger = logging.getLogger("tensorflow")

    def shown(message: str) -> bool:
        return logger.filter(logging.LogRecord("tensorflow", logging.WARNING, __file__, 1, message, None, None))

    about = "5 out of the last 13 calls to <function {}> triggered tf.function retracing."
    assert not shown(about.format("Trainer.__init__.<locals>.checked_step"))
    assert not shown(about.format("TfMatmul.setup.<locals>.<lambda> at 0x7fc5b25abce0"))
    assert shown(about.format("Trainer.compile_anew.<locals>.<lambda>"))


def test_processes_started_apart_share_one_temp_folder_outside_their_run_folders():
    """A TF cluster's tasks each run in a run folder of their own, nested or not; the files they
    leave each other go where all of them look."""
    from suites.measure.scratch import shared_temp_dir

    outside = shared_temp_dir()
    with run_temp_dir():
        with run_temp_dir() as inner:
            assert tempfile.gettempdir() == str(inner) and shared_temp_dir() == outside
