"""Every knob and numeric option is typed and bounded where it enters (issue 43, item 2): a bad
value is one line naming it and what is accepted, exit code 2, before anything runs; nothing
is measured or written.

The knobs' table in docs/extending.md is the one `suites.knobs.table` generates.
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest

from suites import knobs
from suites.cases.timing_config import RANGES, TimingConfig, TimingFieldError
from suites.frontends.cli import main
from suites.measure.faults import Fault
from suites.measure.timing import TooSlow, case_limit_s, first_step_limit_s, measure
from suites.ranges import Range, Refused
from tests.test_bad_input import BadInput as Row
from tests.test_timing import FakeClock, PretendDevice, constant

ROOT = Path(__file__).resolve().parent.parent
TINY_GRID = '[timing]\nbudget_s = 0.2\n[[grid]]\nworkload = "matmul"\nframework = "torch"\ndevice = "cpu"\n' \
            'params = { m = 8, n = 8, k = 8 }\n'
RUN = ("run", "--suite", "{tmp}/tiny.toml", "--results", "{tmp}/results")


def grid_with(old: str, new: str) -> dict[str, str]:
    """The files of a row whose grid is the tiny one with `old` replaced."""
    return {"tiny.toml": TINY_GRID.replace(old, new)}



ROWS = [
    Row("rotation past the machine's memory", RUN,
        r"\$PARBENCH_ROTATION_BYTES='100000000000000000000' is not valid: expected a whole number of bytes from 0 "
        r"to \d+ \(this machine's memory", env={"PARBENCH_ROTATION_BYTES": "100000000000000000000"}),
    Row("unknown fault", RUN, r"\$PARBENCH_INJECT_FAULT='junk' is not valid: expected one of not_all_reduced, ",
        env={"PARBENCH_INJECT_FAULT": "junk"}),
    Row("case root init", RUN, r"\$PARBENCH_CASE_ROOT='1' is not valid: expected a process id other than 1: process 1 "
        r"\(init\) is every process's ancestor", env={"PARBENCH_CASE_ROOT": "1"}),
    Row("case root not an ancestor", RUN, r"\$PARBENCH_CASE_ROOT='\d+' is not valid: expected this process \(\d+\) "
        r"or one of its ancestors", env={"PARBENCH_CASE_ROOT": str(2**22 + 7)}),
    Row("rehearsal banana", RUN, r"\$PARBENCH_REHEARSAL='banana' is not valid: expected 1 or 0",
        env={"PARBENCH_REHEARSAL": "banana"}),
    Row("plugin registering nothing", RUN, r"PARBENCH_PLUGINS: json registers no model or workload",
        env={"PARBENCH_PLUGINS": "json"}),
    Row("port past 65535", RUN, r"\$PARBENCH_TF_SLURM_PORT='70000' is not valid: expected a whole number from 1 to "
        r"65535", env={"PARBENCH_TF_SLURM_PORT": "70000"}),
    Row("min_samples 1.5", RUN, r"tiny\.toml: timing\.min_samples: 1\.5 is not valid: expected a whole number of "
        r"samples from 1 to 100000", files=grid_with("budget_s = 0.2", "min_samples = 1.5")),
    Row("max_samples below min_samples", RUN, r"timing\.max_samples: 3 is below min_samples, 7",
        files=grid_with("budget_s = 0.2", "max_samples = 3")),
    Row("case_timeout_s 0", RUN, r"timing\.case_timeout_s: 0 is not valid: expected a finite number of seconds > 0",
        files=grid_with("budget_s = 0.2", "case_timeout_s = 0")),
    Row("contention_retries true", RUN, r"timing\.contention_retries: True is not valid: expected a whole number",
        files=grid_with("budget_s = 0.2", "contention_retries = true")),
    Row("ready minutes nan", ("ready", "--minutes", "nan"),
        r"argument --minutes: 'nan' is not valid: expected a finite number of minutes > 0 and <= 1440 "
        r"\(see parbench ready --help\)"),
    Row("ready minutes 0", ("ready", "--minutes", "0"), r"argument --minutes: '0' is not valid"),
    Row("parity size abc", ("parity", "--size", "batch=abc"), r"--size 'batch=abc': batch must be an integer, "
        r"got 'abc' \(a whole number >= 1\)"),
    Row("parity size unknown", ("parity", "--size", "nosuch=3"), r"--size 'nosuch=3': no size named 'nosuch'; "
        r"parity's models take batch, .*d_model"),
    Row("parity size negative", ("parity", "--size", "batch=-4"), r"--size 'batch=-4': batch must be >= 1, got -4"),
    Row("parity rounds 0", ("parity", "--rounds", "0"), r"argument --rounds: '0' is not valid: expected a whole "
        r"number from 1 to 100"),
    Row("max-minutes 1e-9", (*RUN, "--max-minutes", "1e-9"), r"argument --max-minutes: '1e-9' is not valid: "
        r"expected a finite number of minutes >= 0\.05"),
    Row("budget negative", (*RUN, "--budget", "-1"), r"argument --budget: '-1' is not valid"),
    Row("rdzv timeout nan", (*RUN, "--rdzv-timeout", "nan"), r"argument --rdzv-timeout: 'nan' is not valid"),
    Row("nnodes 0", (*RUN, "--nnodes", "0"), r"argument --nnodes: '0' is not valid: expected a whole number >= 1"),
    Row("node rank -1", (*RUN, "--node-rank", "-1"), r"argument --node-rank: '-1' is not valid"),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_a_bad_knob_or_option_is_one_line_and_exit_2_before_anything_runs(row, tmp_path, monkeypatch, capsys):
    (tmp_path / "tiny.toml").write_text(TINY_GRID)
    for relative, text in row.files.items():
        (tmp_path / relative).write_text(text)
    for name, value in row.env.items():
        monkeypatch.setenv(name, value)
    code = main([arg.replace("{tmp}", str(tmp_path)) for arg in row.argv])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("parbench: error: ") and re.search(row.says, lines[0]), lines[0]
    assert not (tmp_path / "results").exists()  # nothing measured, nothing written


def test_a_cap_that_fits_no_case_says_so_and_fails(tmp_path, monkeypatch, capsys):
    """--max-minutes above the minimum but below every case's estimate: nothing is measured, and
    the run says so instead of naming a records file it never wrote."""
    from suites.runner.runner import Runner

    (tmp_path / "tiny.toml").write_text(TINY_GRID)
    monkeypatch.setattr(Runner, "estimate_s", lambda self, planned: 3600.0)
    code = main(["run", "--suite", str(tmp_path / "tiny.toml"), "--results", str(tmp_path / "results"),
                 "--max-minutes", "0.1"])
    out, err = capsys.readouterr()
    assert code == 2 and "records in" not in out and "no record stored" in out
    assert err.strip() == ("parbench: error: --max-minutes 0.1 fits no case: each was estimated to take longer, so "
                           "nothing was measured; give it more minutes")
    assert not list((tmp_path / "results").rglob("records-*.jsonl"))


def test_the_case_root_may_be_this_process_or_an_ancestor(monkeypatch):
    for pid in (os.getpid(), os.getppid()):
        monkeypatch.setenv("PARBENCH_CASE_ROOT", str(pid))
        assert knobs.read("PARBENCH_CASE_ROOT") == pid


def test_the_injectable_faults_are_the_fault_modules():
    assert set(knobs.FAULTS) == {fault.value for fault in Fault}


def test_benchmark_model_refuses_a_batch_that_makes_no_case_before_running_any():
    from suites.frontends.benchmark_model import benchmark_model
    from suites.workloads.user_model import UserModel

    model = UserModel(model_name="m", sample_shape=(4,), builders={"torch": lambda: None})
    for batch, said in ((0, "must be >= 1, got 0"), (1.5, "must be an integer, got 1.5"),
                        (True, "must be an integer, got True")):
        with pytest.raises(ValueError, match=rf"benchmark_model: batch {re.escape(said)}"):
            benchmark_model(model, batch, results="/nonexistent/never-written")
    with pytest.raises(ValueError, match=r"benchmark_model: n_devices must be >= 1, got 0"):
        benchmark_model(model, 8, n_devices=0, results="/nonexistent/never-written")


def test_a_case_timed_in_this_process_keeps_its_own_deadline():
    """case_timeout_s bounds the in-process timer's limits too (no launcher stops such a case): a
    first step over it is too slow."""
    tight = TimingConfig(case_timeout_s=0.001)
    assert first_step_limit_s(tight) == case_limit_s(tight) == 0.001
    assert first_step_limit_s(TimingConfig()) == 60.0  # unset: the timer's own limits
    clock = FakeClock()
    with pytest.raises(TooSlow, match=r"first step 0\.005 s, over the 0\.001 s"):
        measure(PretendDevice(clock, constant(0.005)), tight, clock)


def test_ranges_refuse_what_is_not_of_their_kind_or_range():
    samples = RANGES["min_samples"]
    for value in (1.5, True, "7", 0, 100_001, math.nan):
        with pytest.raises(Refused, match="a whole number of samples from 1 to 100000"):
            samples.check(value)
    assert samples.check(7) == 7 and samples.parse(" 7 ") == 7
    seconds = Range(float, 0, True, unit="seconds")
    for text in ("nan", "inf", "-inf", "0", "-1", "x", ""):
        with pytest.raises(Refused, match="a finite number of seconds > 0"):
            seconds.parse(text)
    assert seconds.parse("1e-3") == 0.001
    with pytest.raises(TimingFieldError, match="unknown key; allowed: block_min_s"):
        TimingConfig.checked({"budget": 1.0})


def test_the_docs_table_of_knobs_is_the_generated_one():
    document = (ROOT / knobs.DOCUMENT).read_text()
    committed = document.split(knobs.TABLE_START + "\n", 1)[1].split(knobs.TABLE_END, 1)[0]
    assert committed == knobs.table(), (
        f"{knobs.DOCUMENT}'s table of knobs differs from suites/knobs.py's; replace it with the output of "
        f"{knobs.REGENERATE}")
    assert "GiB" not in committed  # no figure of the machine that generated it
