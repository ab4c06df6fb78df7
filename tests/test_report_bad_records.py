"""One bad line of a results file costs only itself: `parbench report` and `compare` skip it with
a warning naming file and line, load every other line and never crash. A figure that is
legitimately 0 (a one-GPU all-reduce moves no bytes: busbw 0) gets no ratio instead of a
ZeroDivisionError. A report that cannot be written leaves the previous one as it was.

Records are built directly (nothing is measured).
"""
from __future__ import annotations

import errno
import json
import os
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.frontends.cli import main
from suites.records.check import Check
from suites.records.measurement import Measurement
from suites.records.record import SCHEMA_VERSION, Record
from suites.records.store import ResultsStore, ResultsWarning
from suites.report.analyses.comparison import noise_columns
from suites.report.load.files import load_results
from tests.test_report_analysis import pairs_of

H100_SAMPLES = Path("/work/shared/sample-records/h100-2026-11-24")
ONE_GPU_ALLREDUCE = "r5-launched-world1.jsonl"  # holds allreduce/torch/gpu:1 records: busbw 0


def record(index: int, machine: str = "box") -> Record:
    case = Case.make("matmul", "torch", "cpu", params={"m": 8 + index, "n": 8, "k": 8})
    return Record(case=case, status=Status.OK, run_id="r1", timestamp=f"2026-01-01T00:00:0{index}+00:00",
                  suite="t", environment={"machine": machine, "cpu": {"model": "test", "usable_cores": 2}},
                  measurement=Measurement(samples=(1e-3, 1.1e-3, 0.9e-3, 1e-3), block_size=4, timed_s=0.02),
                  metrics={"tflops": 1.0}, check=Check(True, "max_rel_err", 1e-7, 1e-4))


def bad(change: Callable[[dict[str, Any]], None]) -> str:
    """A record's line, changed by `change`: still JSON, still looks like a record."""
    data = record(9).to_dict()
    change(data)
    return json.dumps(data)


BAD_LINES = {
    "no samples": bad(lambda d: d["measurement"].update(samples_s=[])),
    "samples as text": bad(lambda d: d["measurement"].update(samples_s="fast")),
    "all-zero samples": bad(lambda d: d["measurement"].update(samples_s=[0.0, 0.0, 0.0])),
    "environment a list": bad(lambda d: d.update(environment=[])),
    "environment's cpu a list": bad(lambda d: d["environment"].update(cpu=["x"])),
    "cores not whole": bad(lambda d: d["environment"]["cpu"].update(usable_cores=2.5)),
    "params holding a list": bad(lambda d: d["case"]["params"].update(m=[1, 2])),
    "on no device": bad(lambda d: d["case"].update(n_devices=-4)),
    "check passed 'yes'": bad(lambda d: d["check"].update(passed="yes")),
    "block size 0": bad(lambda d: d["measurement"].update(block_size=0)),
    "metric a list": bad(lambda d: d["metrics"].update(tflops=[1.0])),
    "100,000-deep JSON": "[" * 100_000 + "]" * 100_000,
    "not JSON": '{"schema": 2, "case": {"workl',
    "a schema version not read": bad(lambda d: d.update(schema=SCHEMA_VERSION + 1)),
    "no schema version": bad(lambda d: d.pop("schema")),
    "version 2 without a field": bad(lambda d: d.pop("contention")),
}


def records_file(folder: Path, machine: str, lines: list[str]) -> Path:
    """`folder`/parbench/records-<machine>.jsonl holding `lines`, as the store names it."""
    path = ResultsStore(folder).path_for(machine)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def good_lines(machine: str, indices: range) -> list[str]:
    return [json.dumps(record(i, machine).to_dict()) for i in indices]


def loaded_with_warnings(paths: list[Path]) -> tuple[pd.DataFrame, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = load_results(paths)
    return frame, [str(w.message) for w in caught if issubclass(w.category, ResultsWarning)]


@pytest.mark.parametrize("name", BAD_LINES)
def test_one_bad_line_costs_only_itself(tmp_path, name):
    path = records_file(tmp_path, "box", [*good_lines("box", range(3)), BAD_LINES[name],
                                          *good_lines("box", range(3, 5))])
    frame, messages = loaded_with_warnings([tmp_path])
    assert sorted(frame["param_m"]) == [8, 9, 10, 11, 12]  # every good line, before and after it
    assert set(frame["machine"]) == {"box"}
    assert len(messages) == 1 and messages[0].startswith(f"{path}:4: "), messages
    assert "skipped" in messages[0]


def test_a_version_1_line_loads_beside_version_2_ones(tmp_path):
    """A record written before schema version 2, without the fields added since (not recorded
    then), is no bad line."""
    old = record(5).to_dict()
    old["schema"] = 1
    for name in ("contention", "bound_by"):
        del old[name]
    records_file(tmp_path, "box", [*good_lines("box", range(3)), json.dumps(old)])
    frame, messages = loaded_with_warnings([tmp_path])
    assert messages == [] and sorted(frame["param_m"]) == [8, 9, 10, 13]


def test_report_and_compare_read_every_good_line_around_bad_ones(tmp_path, capsys):
    bad_lines = list(BAD_LINES.values())
    records_file(tmp_path / "results", "box", [*good_lines("box", range(3)), *bad_lines,
                                               *good_lines("box", range(3, 5))])
    records_file(tmp_path / "results", "box2", good_lines("box2", range(5)))
    out = tmp_path / "out"
    assert main(["report", str(tmp_path / "results"), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and (out / "index.html").stat().st_size > 0
    # said once for the file: its first bad line, then how many more (one line a file, not one a line)
    assert err.count("line skipped") == 1 and "malformed results" not in err
    assert f"and {len(bad_lines) - 1} more line(s) of it skipped" in err
    assert main(["compare", "box", "box2", "--results", str(tmp_path / "results")]) == 0
    out_text = capsys.readouterr().out
    assert "matmul/torch/cpu:1/single/fp32/k=8,m=12,n=8" in out_text  # the good line after the bad ones


def test_a_symlink_loop_is_skipped_by_name(tmp_path, capsys):
    results = tmp_path / "results"
    records_file(results, "box", good_lines("box", range(2)))
    loop = results / "parbench" / "loop.jsonl"
    loop.symlink_to(loop.name)
    frame, messages = loaded_with_warnings([results])
    assert len(frame) == 2 and any(str(loop) in m for m in messages)
    code = main(["report", str(loop), "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and str(loop) in err
    assert err.strip().splitlines()[-1].startswith("parbench: error: no results found")


def one_gpu_allreduce(machine: str, busbw: float = 0.0, offset: float = 0.0) -> Record:
    case = Case.make("allreduce", "torch", "gpu", "ddp", "fp32", 1, {"bytes": 1 << 20})
    samples = tuple(3.4e-5 + offset + 1e-7 * i for i in range(10))
    return Record(case=case, status=Status.OK, run_id=f"run-{machine}", timestamp="2026-01-01T00:00:00+00:00",
                  suite="t", environment={"machine": machine}, measurement=Measurement(samples=samples),
                  metrics={"algbw_gbs": 30.0, "busbw_gbs": busbw})


def test_a_throughput_of_zero_gets_no_ratio_and_no_crash(tmp_path, capsys):
    results = tmp_path / "results"
    store = ResultsStore(results)
    store.ensure_writable()
    store.append(one_gpu_allreduce("a"))
    store.append(one_gpu_allreduce("b", offset=1e-6))
    frame = load_results(results)
    assert frame["throughput"].tolist() == [0.0, 0.0]
    pairs = pairs_of(frame, {"machine": "a"})
    assert len(pairs) == 1 and pd.isna(pairs["speedup"].iloc[0]) and pairs["noise_test"].iloc[0] == "-"
    assert main(["report", str(results), "-o", str(tmp_path / "out")]) == 0
    assert main(["compare", "a", "b", "--results", str(results)]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_noise_columns_divide_by_no_zero_work():
    pairs = pd.DataFrame([{"samples_s": (1e-3,) * 8, "q1_s": 1e-3, "q3_s": 1e-3, "throughput": 0.0,
                           "median_s": 1e-3, "samples_s_base": (2e-3,) * 8, "q1_s_base": 2e-3, "q3_s_base": 2e-3,
                           "throughput_base": 5.0, "median_s_base": 2e-3}])
    judged = noise_columns(pairs)
    assert judged["noise_test"].tolist() == ["-"] and not judged["beyond_noise"].iloc[0]
    assert np.isnan(judged["p_value"].iloc[0])


def test_h100_sample_records_as_two_machines(tmp_path, capsys):
    """The H100 sample records copied as two machines (label in each record's environment and in
    the file name): the one-GPU all-reduce's busbw of 0 crashed the report."""
    source = H100_SAMPLES / ONE_GPU_ALLREDUCE
    if not source.exists():
        pytest.skip(f"{source}: the H100 sample records are not here")
    results = tmp_path / "results"
    for machine in ("h100-a", "h100-b"):
        lines = []
        for line in source.read_text().splitlines():
            data = json.loads(line)
            data["environment"]["machine"] = machine
            lines.append(json.dumps(data))
        records_file(results, machine, lines)
    assert main(["report", str(results), "-o", str(tmp_path / "out")]) == 0
    assert main(["compare", "h100-a", "h100-b", "--results", str(results)]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "skipped" not in err


# --- a report that cannot be written leaves the previous one ---------------------------------

OLD_REPORT = "<html>the previous report</html>"


def report_folder_with_an_old_report(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    index = folder / "index.html"
    index.write_text(OLD_REPORT)
    return index


def assert_one_error_line_and_old_report(code: int, err: str, index: Path) -> None:
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("warning:")]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("parbench: error: cannot write ") and "-o DIR" in lines[0]
    assert "Traceback" not in err
    assert index.read_text() == OLD_REPORT
    assert sorted(p.name for p in index.parent.iterdir() if p.name != "filler") == ["index.html"]


def test_a_report_that_fails_to_write_leaves_the_previous_one(tmp_path, monkeypatch, capsys):
    results = tmp_path / "results"
    records_file(results, "box", good_lines("box", range(2)))
    index = report_folder_with_an_old_report(tmp_path / "out")
    real_write_text = Path.write_text

    def full_disk(self: Path, text: str, *args, **kwargs) -> int:
        real_write_text(self, text[:100], *args, **kwargs)  # the disk took a part, then was full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(Path, "write_text", full_disk)
    code = main(["report", str(results), "-o", str(index.parent)])
    assert_one_error_line_and_old_report(code, capsys.readouterr().err, index)


def fill_up(filler: Path) -> None:
    """Write `filler` until its disk is full."""
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError as error:
        assert error.errno == errno.ENOSPC
    finally:
        os.close(fd)


def test_a_report_onto_a_full_disk_leaves_the_previous_one(tmp_path, tiny_disk, capsys):
    results = tmp_path / "results"
    records_file(results, "box", good_lines("box", range(2)))
    index = report_folder_with_an_old_report(tiny_disk)
    fill_up(tiny_disk / "filler")
    code = main(["report", str(results), "-o", str(tiny_disk), "--csv"])
    assert_one_error_line_and_old_report(code, capsys.readouterr().err, index)


def test_the_report_replaces_the_previous_one_whole(tmp_path, capsys):
    results = tmp_path / "results"
    records_file(results, "box", good_lines("box", range(2)))
    index = report_folder_with_an_old_report(tmp_path / "out")
    assert main(["report", str(results), "-o", str(index.parent), "--csv"]) == 0
    assert index.read_text() != OLD_REPORT and "<html" in index.read_text()
    assert sorted(p.name for p in index.parent.iterdir()) == ["index.html", "results.csv"]  # no temporary file
