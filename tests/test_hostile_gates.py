"""Hostile input to the gates and tables (issue #30): a gate that cannot fail, a price that makes a
machine cheapest at a negative cost, an array that cannot fit, a model that is not one, output
that cannot be written. Each is refused with one clear message, never a pass or a traceback.
"""
from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import suites
from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.errors import UserError
from suites.frontends.cli import main
from suites.records.measurement import Measurement
from suites.records.record import Record
from suites.records.store import ResultsStore

REPO = Path(__file__).resolve().parent.parent
CASE = Case.make("matmul", "torch", "cpu", params={"m": 8, "n": 8, "k": 8})


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("parbench: error: "), err
    return lines[0]


# --- 1. compare --fail-on-regression: a threshold that would switch the gate off is refused ---

@pytest.fixture(scope="module")
def slowdown(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """Results A and B of the same case, B 50% slower: any working gate must fail it."""
    root = tmp_path_factory.mktemp("compare")
    steps = 1e-3 * np.random.default_rng(9).uniform(0.75, 1.25, 30)

    def results(name: str, samples: np.ndarray) -> str:
        store = ResultsStore(root / name)
        store.ensure_writable()
        store.append(Record(case=CASE, status=Status.OK, run_id=f"run-{name}", timestamp="2026-01-01T00:00:00+00:00",
                            suite="t", environment={"machine": name}, measurement=Measurement(samples=tuple(samples))))
        return str(root / name)
    return results("a", steps), results("b", steps * 1.5)


@pytest.mark.parametrize("threshold", ["nan", "NaN", "inf", "-inf", "1e308", "10", "-0.1", "-1", "cheap", "", "5%"])
def test_a_threshold_that_cannot_fail_is_one_error_line(threshold, slowdown, capsys):
    a, b = slowdown
    code = main(["compare", a, b, f"--fail-on-regression={threshold}"])
    line = one_error_line(capsys)
    assert code == 2, line
    assert f"--fail-on-regression {threshold!r} is not valid: expected a fraction from 0 to under 10" in line


@pytest.mark.parametrize("threshold, code", [("0", 1), ("0.05", 1), ("9.99", 0)])
def test_a_sane_threshold_is_taken_and_judges_the_slowdown(threshold, code, slowdown, capsys):
    a, b = slowdown
    assert main(["compare", a, b, "--fail-on-regression", threshold]) == code
    out = capsys.readouterr().out
    assert ("1 regression(s) beyond" if code else "no regression beyond 999% and noise") in out


# --- 1. the pytest-benchmark gate: a baseline that cannot be compared is an error, never a pass ---

REFERENCE = "numpy einsum float32 matmul 192x192x192"
GOOD_ENTRY = {"ratio": 2.0, "case_s": 2e-3, "reference_s": 1e-3, "pairs": 15, "clock": "cpu"}


@dataclass(frozen=True)
class BadBaseline:
    name: str
    cases: Any
    says: str


BAD_BASELINES = [
    BadBaseline("ratio NaN", {"c/1": {**GOOD_ENTRY, "ratio": float("nan")}}, r"case 'c/1': ratio nan is not a finite"),
    BadBaseline("ratio inf", {"c/1": {**GOOD_ENTRY, "ratio": float("inf")}}, r"case 'c/1': ratio inf is not a finite"),
    BadBaseline("ratio negative", {"c/1": {**GOOD_ENTRY, "ratio": -2.0}}, r"case 'c/1': ratio -2\.0 is not a finite"),
    BadBaseline("ratio 0", {"c/1": {**GOOD_ENTRY, "ratio": 0}}, r"case 'c/1': ratio 0 is not a finite number > 0"),
    BadBaseline("ratio string", {"c/1": {**GOOD_ENTRY, "ratio": "2.0"}}, r"case 'c/1': ratio '2\.0' is not a number"),
    BadBaseline("ratio bool", {"c/1": {**GOOD_ENTRY, "ratio": True}}, r"case 'c/1': ratio True is not a number"),
    BadBaseline("ratio null", {"c/1": {**GOOD_ENTRY, "ratio": None}}, r"case 'c/1': ratio None is not a number"),
    BadBaseline("entry not a table", {"c/1": 2.0}, r"case 'c/1': 2\.0 is not a relative time"),
    BadBaseline("entry missing fields", {"c/1": {"ratio": 2.0}}, r"case 'c/1': .* is not a relative time"),
    BadBaseline("cases a list", [GOOD_ENTRY], r"\"cases\" is list, not a table"),
]


@pytest.mark.parametrize("bad", BAD_BASELINES, ids=[bad.name for bad in BAD_BASELINES])
def test_a_baseline_that_cannot_be_compared_is_refused_at_load(bad, tmp_path):
    from suites.frontends.pytest_plugin import GateSession

    path = tmp_path / "baseline.json"
    path.write_text(json.dumps({"format": "parbench-gate-baseline", "version": 1, "reference": REFERENCE,
                                "cases": {"ok/case": GOOD_ENTRY, **bad.cases} if isinstance(bad.cases, dict)
                                else bad.cases}))
    with pytest.raises(UserError, match=re.escape(str(path)) + ": " + bad.says):
        GateSession.from_options(path, None, None)  # pytest_configure: UserError -> pytest.UsageError


@pytest.mark.parametrize("ratio", [float("nan"), -1.0, 0.0, "2.0"])
def test_a_bad_baseline_ratio_fails_the_gated_test_without_measuring(ratio):
    """A baseline built in code skips the file's checks; judging it still fails, never passes."""
    from suites.frontends.gate import Baseline, RelativeTime
    from suites.frontends.pytest_plugin import GateSession

    baseline = Baseline(REFERENCE, {CASE.id: RelativeTime(ratio, 1e-3, 1e-3, 15, "cpu")})  # type: ignore[arg-type]
    gate = GateSession(threshold=0.2, baseline=baseline)

    def step() -> None:
        raise AssertionError("a baseline that cannot be compared must not be measured against")

    with pytest.raises(pytest.fail.Exception, match=f"regression gate: {re.escape(CASE.id)}: .* cannot be compared"):
        gate.check(CASE, step)


def test_a_measurement_that_is_nan_counts_as_regressed():
    from suites.frontends.gate import RelativeTime, judge

    def measure() -> RelativeTime:
        return RelativeTime(float("nan"), float("nan"), 1e-3, 15, "cpu")

    assert judge("c", measure, baseline_ratio=1.0, threshold=0.2).regressed


@pytest.mark.parametrize("threshold", ["nan", "inf", "-inf", "-0.5", "0", "1e308", "cheap"])
def test_a_gate_threshold_that_cannot_fail_is_refused(threshold):
    from suites.frontends.gate import threshold_from

    with pytest.raises(UserError, match="gate threshold must be a fraction such as 0.2"):
        threshold_from(threshold)


# --- 2. prices: a finite number > 0, or one error naming the file, the entry and the value ---

PRICE_ROWS = [
    ("negative machine", '[machines]\n"box" = -10.0\n', r"machines\.box: -10\.0 is not a price"),
    ("string machine", '[machines]\n"box" = "cheap"\n', r"machines\.box: 'cheap' is not a price"),
    ("zero machine", '[machines]\n"box" = 0\n', r"machines\.box: 0 is not a price"),
    ("nan device", '[[device]]\nmatch = "H100"\nper_hour = nan\n',
     r"device\[0\] \(match 'H100'\)\.per_hour: nan is not a price"),
    ("negative device", '[[device]]\nmatch = "T4"\nper_hour = -0.35\n',
     r"device\[0\] \(match 'T4'\)\.per_hour: -0\.35 is not a price"),
    ("bool device", '[[device]]\nmatch = "T4"\nper_hour = true\n',
     r"device\[0\] \(match 'T4'\)\.per_hour: True is not a price"),
    ("inf cpu", '[cpu]\nper_core_hour = inf\n', r"cpu\.per_core_hour: inf is not a price"),
    ("negative cpu", '[cpu]\nper_core_hour = -1\n', r"cpu\.per_core_hour: -1 is not a price"),
    ("string cpu", '[cpu]\nper_core_hour = "0.04"\n', r"cpu\.per_core_hour: '0\.04' is not a price"),
    ("device not a table", 'device = "T4"\n', r"device: expected an array of tables"),
    ("device row without match", '[[device]]\nper_hour = 1.0\n', r"device\[0\]: expected a \[\[device\]\] table"),
    ("machines not a table", 'machines = 3\n', r"machines: expected a table"),
]


@pytest.mark.parametrize("text, says", [row[1:] for row in PRICE_ROWS], ids=[row[0] for row in PRICE_ROWS])
def test_a_bad_price_is_one_error_naming_file_entry_and_value(text, says, tmp_path, monkeypatch):
    from suites.report.analyses.prices import PriceTable

    monkeypatch.delenv("PARBENCH_PRICES", raising=False)
    path = tmp_path / "my prices.toml"
    path.write_text(text)
    with pytest.raises(UserError, match=re.escape(f"price table {path}: ") + says):
        PriceTable.load(path)


def test_a_good_price_file_still_loads_and_never_gives_a_negative_cost(tmp_path):
    from suites.report.analyses.prices import PriceTable

    path = tmp_path / "prices.toml"
    path.write_text('[machines]\n"box" = 2.5\n[[device]]\nmatch = "T4"\nper_hour = 1\n[cpu]\nper_core_hour = 0.01\n')
    table = PriceTable.load(path)
    assert table.per_hour("box", "cpu", "x", 1, 4)[0] == 2.5
    assert table.per_hour("other", "gpu", "Tesla T4", 2, 4)[0] == 2
    assert table.per_hour("other", "cpu", "x", 1, 4)[0] == pytest.approx(0.04)


def test_report_with_a_bad_prices_file_is_one_error_line(tmp_path, monkeypatch, capsys):
    prices = tmp_path / "prices.toml"
    prices.write_text('[machines]\n"box" = "cheap"\n')
    monkeypatch.setenv("PARBENCH_PRICES", str(prices))
    (tmp_path / "results").mkdir()
    code = main(["report", str(tmp_path / "results"), "-o", str(tmp_path / "out")])
    line = one_error_line(capsys)
    assert code == 2 and f"price table {prices}: machines.box: 'cheap' is not a price" in line


# --- 3. calibrate --stream-mib: three arrays that must fit in memory ---

def test_calibrate_refuses_a_streaming_array_larger_than_memory(tmp_path, capsys):
    import re

    from suites.frontends.commands.calibrate import available_memory_bytes, max_stream_mib

    most = max_stream_mib(available_memory_bytes() or 0)
    code = main(["calibrate", "--device", "cpu", "--stream-mib", "1000000", "--results", str(tmp_path)])
    line = one_error_line(capsys)
    assert code == 2 and "--stream-mib 1000000 is too large" in line
    said = int(re.search(r"at most --stream-mib (\d+)$", line).group(1))
    assert abs(said - most) <= most // 20  # what is available moves a little between two readings
    assert not any(tmp_path.iterdir())  # refused before any GEMM was measured or stored


def test_the_stream_limit_follows_the_memory_available():
    from suites.frontends.commands.calibrate import check_stream_mib

    check_stream_mib(256, available_bytes=2**30)  # 3 x 256 MiB = 75% of 1 GiB
    with pytest.raises(UserError, match=r"--stream-mib 257 is too large: .* 1\.0 GiB .*at most --stream-mib 256$"):
        check_stream_mib(257, available_bytes=2**30)
    with pytest.raises(UserError, match=r"at most --stream-mib 0$"):
        check_stream_mib(1, available_bytes=0)


# --- 4. suites.user_model: an argument that makes no model is a ValueError naming it ---

def _builder() -> None:
    return None


USER_MODEL_ROWS = [
    ("flops nan", {"flops_per_sample": float("nan")}, r"flops_per_sample=nan is not valid"),
    ("flops inf", {"flops_per_sample": float("inf")}, r"flops_per_sample=inf is not valid"),
    ("flops -inf", {"flops_per_sample": float("-inf")}, r"flops_per_sample=-inf is not valid"),
    ("flops negative", {"flops_per_sample": -1e9}, r"flops_per_sample=-1000000000\.0 is not valid"),
    ("flops string", {"flops_per_sample": "1e9"}, r"flops_per_sample='1e9' is not valid"),
    ("flops bool", {"flops_per_sample": True}, r"flops_per_sample=True is not valid"),
    ("shape zero", {"input_shape": (3, 0)}, r"input_shape \(3, 0\) is not the shape of one sample"),
    ("shape negative", {"input_shape": (-3,)}, r"input_shape \(-3,\) is not the shape"),
    ("shape empty", {"input_shape": ()}, r"input_shape \(\) is not the shape"),
    ("shape float", {"input_shape": (3.5,)}, r"input_shape \(3\.5,\) is not the shape"),
    ("shape nan", {"input_shape": (float("nan"),)}, r"input_shape \(nan,\) is not the shape"),
    ("shape not a sequence", {"input_shape": 3}, r"input_shape 3 is not the shape"),
    ("name empty", {"name": ""}, r"name '' is not a model name"),
    ("name with comma", {"name": "a,b"}, r"name 'a,b' is not a model name"),
    ("name not a string", {"name": 7}, r"name 7 is not a model name"),
    ("torch not callable", {"torch": "model"}, r"torch='model' is not callable"),
    ("data not callable", {"data": [1, 2]}, r"data=\[1, 2\] is not callable"),
]


@pytest.mark.parametrize("changes, says", [row[1:] for row in USER_MODEL_ROWS], ids=[row[0] for row in USER_MODEL_ROWS])
def test_a_user_model_argument_that_makes_no_model_is_a_value_error_naming_it(changes, says):
    from suites.workloads.training import MODELS

    arguments = {"name": "hostile_model", "input_shape": (3,), "loss": "cross_entropy", "torch": _builder,
                 **changes}
    with pytest.raises(ValueError, match=says):
        suites.user_model(**arguments)
    assert "hostile_model" not in MODELS  # refused before anything is registered


# --- 5. output that cannot be written: one line on stderr, exit 2, no traceback ---

@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
@pytest.mark.parametrize("unbuffered", ["1", ""], ids=["unbuffered", "buffered"])
def test_list_into_a_full_device_is_one_error_line(unbuffered):
    env = {**os.environ, "PYTHONUNBUFFERED": unbuffered}
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "suites", "list"], stdout=full, stderr=subprocess.PIPE,
                                text=True, timeout=120, cwd=REPO, env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == ["parbench: error: cannot write the output: No space left on device"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_output_that_fails_only_at_the_last_flush_is_caught(monkeypatch, capsys):
    """A command's few buffered lines fail when flushed, after the command returned (`devices`,
    `report` printing with print())."""
    from suites.frontends.commands import devices

    full = open("/dev/full", "w", buffering=8192)  # closed by the test's end; its fd may be dup2'd over
    monkeypatch.setattr(devices, "run", lambda args: print("cpu  1  ok") or 0)
    monkeypatch.setattr(sys, "stdout", full)
    code = main(["devices"])
    monkeypatch.undo()
    full.close()
    assert code == 2 and one_error_line(capsys) == "parbench: error: cannot write the output: No space left on device"


def test_other_os_errors_are_not_taken_for_a_full_output(monkeypatch):
    from suites.frontends.commands import devices

    def broken(args: Any) -> int:
        raise OSError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(devices, "run", broken)
    with pytest.raises(PermissionError):
        main(["devices"])
