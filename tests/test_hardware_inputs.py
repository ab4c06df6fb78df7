"""The peaks table, the reference table and calibration.json are checked where they are read (issue 43):
a bad user table is one UserError naming the file, the entry and the way out; a calibration file that
cannot be used is one warning, the run goes on against the table's peaks, and the file stays as it was."""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from suites.cases.user_files import shipped_table
from suites.cases.vocabulary import DeviceKind, Precision
from suites.errors import UserError
from suites.hardware import peaks
from suites.hardware.devices import DeviceInfo
from suites.hardware.peaks import (PEAKS_ENV, CalibrationWarning, PeakTable, calibration_path, check_peaks,
                                   load_calibration, measured_bandwidth, measured_peak, save_calibration)
from suites.hardware.references import REFERENCES_ENV, load_references

CPU = DeviceInfo(DeviceKind.CPU, 1, ("cpu",))
WAY_OUT = "fix the file or unset PARBENCH_PEAKS"


def refusal(data: dict) -> str:
    with pytest.raises(UserError) as error:
        check_peaks(data, "mine.toml", WAY_OUT)
    return str(error.value)


@pytest.mark.parametrize("data, entry", [
    ({"H100": {"fp32": -1}}, "H100: not an entry of a peaks table"),
    ({"gpu": [{"match": "H100", "fp32": -1}]}, "gpu[0] ('H100').fp32: -1 is not valid: expected a finite number "
                                               "of TFLOP/s > 0"),
    ({"gpu": [{"match": "H100", "fp32": "fast"}]}, "gpu[0] ('H100').fp32: 'fast' is not valid"),
    ({"gpu": [{"match": "H100", "bf16": float("nan")}]}, "gpu[0] ('H100').bf16: nan is not valid"),
    ({"gpu": [{"match": "H100", "fp16": float("inf")}]}, "gpu[0] ('H100').fp16: inf is not valid"),
    ({"gpu": [{"match": "H100", "fp32": 0}]}, "gpu[0] ('H100').fp32: 0 is not valid"),
    ({"gpu": [{"match": "H100", "fp32": True}]}, "gpu[0] ('H100').fp32: True is not valid"),
    ({"gpu": [{"match": "H100", "fp23": 60.0}]}, "gpu[0] ('H100').fp23: unknown key; allowed: match, fp32"),
    ({"gpu": [{"match": "H100", "bandwidth_gbs": -3}]}, "gpu[0] ('H100').bandwidth_gbs: -3 is not valid"),
    ({"gpu": [{"match": "H100", "clock_source": 3}]}, "gpu[0] ('H100').clock_source: 3 is not valid: expected text"),
    ({"gpu": [{"fp32": 60.0}]}, "gpu[0]: expected a [[gpu]] table with a match string"),
    ({"gpu": {"match": "H100"}}, "gpu: expected an array of tables ([[gpu]])"),
    ({"tpu": [{"match": "v5e", "bf16": -197}]}, "tpu[0] ('v5e').bf16: -197 is not valid"),
    ({"cpu": [{"isa": "avx2", "fp32": float("nan")}]}, "cpu[0] ('avx2').fp32: nan is not valid: expected a finite "
                                                       "number of FLOP per cycle per core > 0"),
    ({"cpu": [{"fp32": 32}]}, "cpu[0]: expected a [[cpu]] table with a uarch or isa string"),
    ({"version": "3"}, "version: '3' is not valid: expected a whole number >= 1"),
])
def test_a_bad_peaks_table_is_one_line_naming_the_file_the_entry_and_the_way_out(data: dict, entry: str) -> None:
    line = refusal(data)
    assert line.startswith(f"mine.toml: {entry}") and line.endswith(f"; {WAY_OUT}") and "\n" not in line


def test_the_shipped_peaks_table_and_a_users_usual_entries_pass() -> None:
    check_peaks(shipped_table("peaks.toml"), "suites/peaks.toml", "fix the shipped table")
    check_peaks({"version": 3, "gpu": [{"match": "A100 MIG 1g.5gb", "bf16": 44.0, "clock_mhz": 1410,
                                        "clock_source": "mine"}],
                 "cpu": [{"isa": "avx2", "fp32": 1000}, {"uarch": "zen5", "fp32": 64, "bf16": 128}]},
                "mine.toml", WAY_OUT)


def test_peaks_env_file_is_checked_where_the_table_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = tmp_path / "k.toml"
    own.write_text('[[gpu]]\nmatch = "H100"\nfp32 = -1\n')
    monkeypatch.setenv(PEAKS_ENV, str(own))
    with pytest.raises(UserError, match=rf"^peaks table \(PARBENCH_PEAKS\) {own}: gpu\[0\] \('H100'\)\.fp32: -1 is "
                                        r"not valid: .*; fix the file or unset PARBENCH_PEAKS$"):
        PeakTable.load()
    own.write_text('[[gpu]]\nmatch = "H100"\nfp32 = 1.5\n')
    assert PeakTable.load().gpu[0]["fp32"] == 1.5


# --- references -------------------------------------------------------------------------------------------

ROW = ('[[reference]]\nmodel = "resnet50"\nmatch = "H100"\ndevice = "H100"\nprecision = "bf16"\nn_devices = 1\n'
       'samples_per_s = 3000\nsource = "my lab"\n')


@pytest.mark.parametrize("text, problem", [
    ("colour = 1\n", "colour: not an entry of a reference table (it has version, reference"),
    ("\ufeffcolour = 1\n" + ROW, "colour: not an entry of a reference table"),
    ("[[references]]\nmodel = 1\n", "references: not an entry of a reference table"),
    ('version = "one"\n', "version: 'one' is not valid: expected a whole number >= 1"),
    ("reference = 3\n", "reference: expected an array of tables ([[reference]])"),
    (ROW.replace("n_devices = 1", "n_devices = 0"), "reference row 1: n_devices: 0 is not valid: expected a whole "
                                                    "number of devices >= 1"),
    (ROW.replace("n_devices = 1", 'n_devices = "one"'), "reference row 1: n_devices: 'one' is not valid"),
    (ROW.replace("= 3000", "= -5"), "reference row 1: samples_per_s: -5 is not valid: expected a finite number > 0"),
    (ROW.replace("= 3000", "= nan"), "reference row 1: samples_per_s: nan is not valid"),
    (ROW.replace('"my lab"', "7"), "reference row 1: source: 7 is not valid: expected text"),
])
def test_a_bad_reference_table_is_one_line_naming_the_file_the_entry_and_the_way_out(
        text: str, problem: str, tmp_path: Path) -> None:
    mine = tmp_path / "r.toml"
    mine.write_text(text, encoding="utf-8")
    with pytest.raises(UserError) as error:
        load_references(str(mine))
    line = str(error.value)
    assert line.startswith(f"reference table (--references) {mine}") and problem in line, line
    assert line.endswith("; fix the file or leave out --references") and "\n" not in line


def test_a_users_reference_file_with_a_byte_order_mark_is_read_whole(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    mine = tmp_path / "r.toml"
    mine.write_text("\ufeffversion = 1\n" + ROW, encoding="utf-8")
    monkeypatch.setenv(REFERENCES_ENV, str(mine))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows = load_references()
    assert rows[0].source == "my lab" and rows[0].samples_per_s == 3000.0 and len(rows) > 1


# --- calibration.json -------------------------------------------------------------------------------------

def said(results: Path) -> list[str]:
    """What reading the calibration of `results` warned, twice over (said once)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load_calibration(results) == {}
        assert measured_peak(results, "box", CPU, Precision.FP32) is None
        assert measured_bandwidth(results, "box", CPU) is None
    return [str(w.message) for w in caught if issubclass(w.category, CalibrationWarning)]


@pytest.mark.parametrize("text, problem", [
    ("{", "not JSON (Expecting property name"),
    ("[1, 2]", "not a calibration table: holds a JSON list, not an object of machines"),
    ('{"box": {"cpu:cpu": {"fp32": {"tflops": -1, "how": "a GEMM"}}}}',
     "not a calibration table: box.cpu:cpu.fp32.tflops: -1 is not valid: expected a finite number of TFLOP/s > 0"),
    ('{"box": {"cpu:cpu": {"fp32": {"tflops": "fast"}}}}', "box.cpu:cpu.fp32.tflops: 'fast' is not valid"),
    ('{"box": {"cpu:cpu": {"fp32": {"tflops": NaN}}}}', "box.cpu:cpu.fp32.tflops: nan is not valid"),
    ('{"box": {"cpu:cpu": {"bandwidth": {"gbs": 0}}}}', "box.cpu:cpu.bandwidth.gbs: 0 is not valid"),
    ('{"box": {"cpu:cpu": {"fp64": {"tflops": 1}}}}', "box.cpu:cpu.fp64: unknown key; allowed: fp32"),
    ('{"box": {"cpu:cpu": {"fp32": 0.4}}}', "box.cpu:cpu.fp32: expected {'tflops': number, 'how': text}"),
    ('{"box": [1]}', "box: expected an object of devices"),
])
def test_a_calibration_file_that_cannot_be_used_is_said_once_and_left_as_it_is(
        text: str, problem: str, tmp_path: Path) -> None:
    path = calibration_path(tmp_path)
    path.write_text(text)
    (line,) = said(tmp_path)
    assert line.startswith(f"{path}: ") and problem in line, line
    assert line.endswith("its measured peaks are not used: fix it, or move it away and run `parbench calibrate` "
                         "again") and "\n" not in line
    assert path.read_text() == text


def test_a_missing_calibration_file_is_no_problem_and_a_fifo_is_not_read(tmp_path: Path) -> None:
    assert said(tmp_path) == []
    os.mkfifo(calibration_path(tmp_path))
    (line,) = said(tmp_path)
    assert line.startswith(f"{calibration_path(tmp_path)}: not a regular file")


def test_calibrate_adds_to_a_valid_file_and_never_overwrites_one_it_cannot_read(tmp_path: Path) -> None:
    save_calibration(tmp_path, "box", CPU, Precision.FP32, 0.4, "a GEMM")
    save_calibration(tmp_path, "box", CPU, Precision.BF16, 0.8, "a GEMM")
    assert measured_peak(tmp_path, "box", CPU, Precision.BF16) == 0.8
    assert measured_peak(tmp_path, "box", CPU, Precision.FP32) == 0.4
    path = calibration_path(tmp_path)
    path.write_text('{"other": {"gpu:X": {"fp32": {"tflops": 1.0}}}, ')  # cut short: the other machine's is in it
    with pytest.raises(UserError, match=r"calibration.json: not JSON .*; not overwritten: fix it, or move it away"):
        save_calibration(tmp_path, "box", CPU, Precision.FP32, 0.4, "a GEMM")
    assert path.read_text().startswith('{"other"')


def test_a_run_beside_a_calibration_file_that_is_not_json_says_one_line_and_stores_its_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from suites.frontends.cli import main
    from suites.records.store import ResultsStore
    from tests.hostile.sweep import TINY_GRID

    for name in [name for name in os.environ if name.startswith("PARBENCH_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(peaks, "_SAID", set())
    Path("tiny.toml").write_text(TINY_GRID)
    Path("results").mkdir()
    Path("results/calibration.json").write_text("{")
    assert main(["run", "--suite", "tiny.toml", "--results", "results"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: results/calibration.json: not JSON") and err.count("\n") == 1, err
    assert Path("results/calibration.json").read_text() == "{" and len(ResultsStore("results").load()) == 1
    assert json.loads(next(Path("results/parbench/runs").glob("*.json")).read_text())["cases"] == 1
