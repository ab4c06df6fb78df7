"""The hostile-input sweep's rows (tests/hostile/sweep.py; its before/after table is docs/bad-input.md),
run in this process: each bad input must be refused in one line on stderr that names what is wrong,
with a non-zero exit code, and every file that was there before must be as it was (a `warn` row: the
command goes on and says one line; an `ok` row: valid input read whole, without a word).

The sweep runs each row as `python -m suites` against a tree, minutes in all; here the same rows go
through `suites.frontends.cli.main` against a fixture made in this process (two stored records and a
one-case grid). The report's page is not drawn for each row (`fake_page`): what a row tests happens
before it (loading, refusing, warning); one real report over every bent records file together shows
the page is drawn over what loading let through. Rows that need a process of their own (a signal, a
closed or full stdout, two commands at once, another program) are run as subprocesses where they
are cheap (`list`), and left to the sweep otherwise.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import threading
from pathlib import Path

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.frontends.cli import main
from suites.records.measurement import Measurement
from suites.records.record import Record
from suites.records.store import ResultsStore
from tests.hostile import sweep

REPO = Path(__file__).resolve().parent.parent
ROWS = {row.id: row for row in sweep.all_rows()}
#: Rows still not clean at HEAD, and why (docs/bad-input.md says the same): not run here.
NOT_CLEAN: dict[str, str] = {
    # Not run here (processes of their own); said for the table's sake:
    "signal-list-sigint-import": "a Ctrl-C in the interpreter's own start (the first ~0.05 s: Python and its "
                                 "site packages load), before any parbench code runs: Python's traceback "
                                 "(nothing ran, nothing lost); from the package's first line on it is one line "
                                 "(suites/startup.py, tests/test_startup.py)",
    "asv-conf-broken": "asv's own traceback: asv reads asv.conf.json before any parbench code runs",
}
#: Rows run as their own process here (cheap: `list`); the others are the sweep's. A signal's moment
#: cannot be chosen from outside under load: `test_a_signal_while_the_command_is_read_or_runs` fakes it.
AS_PROCESS = ("stdout-closed-list", "stdout-full-list")


def own_process(row: sweep.Row) -> bool:
    """A signal, a closed or full stdout, two at once, another program, or the worker past its --out
    check (it takes over the standard streams' descriptors)."""
    worker_case = row.argv[:1] == ("worker",) and "--out" not in row.argv
    return bool(row.signal or row.stdout != "pipe" or row.twice or row.program or worker_case)


#: Rows left to the sweep for their time here: clean before as after, and slow in process (frameworks
#: imported, a case run).
SWEEP_ONLY = {"calibrate--device-gpu-none-here": "imports both frameworks to find no GPU (13 s)",
              "grid-bom-run": "runs its case (5 s); grid-bom lists the same grid",
              "bom-compare": "clean in the sweep; this module's hand-made record lacks fields a run writes, on "
                             "which compare's loading prints pandas' fillna FutureWarning"}
IN_PROCESS = [row for row in ROWS.values() if not row.control and not own_process(row)
              and row.id not in NOT_CLEAN and row.id not in SWEEP_ONLY]
CASE = Case.make("matmul", "torch", "cpu", params={"m": 8, "n": 8, "k": 8})


def stored(root: Path, machine: str, step_s: float) -> Path:
    record = Record(case=CASE, status=Status.OK, run_id=f"run-{machine}", timestamp="2026-01-01T00:00:00+00:00",
                    suite="tiny", environment={"machine": machine}, measurement=Measurement(samples=(step_s,) * 9))
    store = ResultsStore(root)
    store.ensure_writable()
    return store.append(record)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sweep's fixture, made here: the grid, `results/` (machine box) and `other/` (machine other)."""
    folder = tmp_path_factory.mktemp("hostile") / "fixture"
    folder.mkdir()
    (folder / "tiny.toml").write_text(sweep.TINY_GRID)
    stored(folder / "results", "box", 1e-6)
    stored(folder / "other", "other", 1.1e-6)
    runs = folder / "results" / "parbench" / "runs"
    runs.mkdir()
    (runs / "run-box.json").write_text('{"run_id": "run-box", "suite": "tiny", "machine": "box"}\n')
    return folder


def prepared(row: sweep.Row, base: Path, tmp_path: Path) -> tuple[sweep.Fixture, dict[str, bytes]]:
    root = tmp_path / "w"
    shutil.copytree(base, root)
    records = next((root / "results").rglob("records-*.jsonl")).relative_to(root)
    fixture = sweep.Fixture(root, sweep.json.loads((root / records).read_text().splitlines()[0]), records)
    sweep.make_files(root, row.files, fixture)
    if row.setup:
        row.setup(fixture)
    return fixture, sweep.snapshot(root)


def fake_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's analyses, page and file faked: a row's input is loaded, refused or warned about before them."""
    from suites.report import content
    from suites.report.render import html

    monkeypatch.setattr(content, "build_content", lambda frame, options: frame)
    monkeypatch.setattr(html, "render", lambda *args: "")
    monkeypatch.setattr(html, "write", lambda page, folder: Path(folder) / "index.html")


class FifoGuard:
    """Opens each FIFO's other end, so that a read of it (a regression) ends instead of waiting forever."""

    def __init__(self, root: Path) -> None:
        self.fifos = [path for path in root.rglob("*") if path.is_fifo()]
        self.threads = [threading.Thread(target=lambda p=path: open(p, "wb").close(), daemon=True)
                        for path in self.fifos]
        for thread in self.threads:
            thread.start()

    def release(self) -> None:
        for path in self.fifos:  # a writer still waiting for a reader gets one, and ends
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        for thread in self.threads:
            thread.join(5)


def named(row: sweep.Row) -> str | None:
    """What a refusal's line must name: the knob, the option or the file the row bends."""
    if row.env:
        return next(iter(row.env))
    if row.area in ("cli-number",):
        return row.argv[-2]
    if row.area == "toml":
        return next(iter(row.files)).split("/")[0]
    return None


def invoke(row: sweep.Row, fixture: sweep.Fixture) -> int:
    argv = [sweep.placed(arg, fixture) for arg in row.argv]
    try:
        return main(argv)
    except SystemExit as end:  # the worker's own exits: sys.exit("parbench worker: ...")
        if isinstance(end.code, str):
            print(end.code, file=sys.stderr)
            return 1
        return int(end.code or 0)


@pytest.mark.parametrize("row", IN_PROCESS, ids=[row.id for row in IN_PROCESS])
def test_each_hostile_row_is_clean(row: sweep.Row, base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    fixture, before = prepared(row, base, tmp_path)
    for name in [name for name in os.environ if name.startswith("PARBENCH_")]:
        monkeypatch.delenv(name)
    for name, value in row.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(fixture.root / row.cwd)
    monkeypatch.setattr(os, "_exit", lambda code: (_ for _ in ()).throw(SystemExit(code)))  # a worker's exit
    if row.area == "records":
        fake_page(monkeypatch)
    guard = FifoGuard(fixture.root)
    try:
        code = invoke(row, fixture)
    finally:
        guard.release()
    err = capsys.readouterr().err
    assert sweep.classify(row, code, err, sweep.lost(before, fixture.root)) == "clean", f"exit {code}: {err}"
    if row.expect == sweep.REFUSE:
        line = err.strip()
        assert re.match(r"parbench( worker)?: error: |parbench worker: ", line), line
        assert named(row) is None or named(row) in line, line


def test_one_real_report_over_every_bent_records_file(base: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The records rows' files together beside the good record, a real page: exit 0, the good record
    reported, and a warning line for each file the loader passed over."""
    rows = [row for row in ROWS.values() if row.area == "records" and row.expect == sweep.WARN
            and row.argv == sweep.REPORT and not any(isinstance(v, sweep.Fifo) for v in row.files.values())]
    root = tmp_path / "w"
    shutil.copytree(base, root)
    records = next((root / "results").rglob("records-*.jsonl")).relative_to(root)
    record = sweep.json.loads((root / records).read_text().splitlines()[0])
    for number, row in enumerate(rows):  # each row's files in a folder of its own: their names repeat
        folder = root / "results" / f"row{number}"
        folder.mkdir()
        fixture = sweep.Fixture(folder.parent.parent, record, records)
        sweep.make_files(folder, {name.removeprefix("results/"): content for name, content in row.files.items()},
                         fixture)
        if row.setup:
            row.setup(fixture)
            for made in (root / "results").glob("records-bent.jsonl"):
                made.rename(folder / made.name)
    before = sweep.snapshot(root)
    monkeypatch.chdir(root)
    assert main(list(sweep.REPORT)) == 0
    err = capsys.readouterr().err
    assert "box" in (root / "out" / "index.html").read_text()
    lines = err.splitlines()
    assert all(line.startswith("warning: ") for line in lines), err
    for number, row in enumerate(rows):
        if row.id not in NOT_CLEAN and any((root / "results" / f"row{number}").iterdir()):
            assert sum(f"row{number}/" in line for line in lines) == 1, (row.id, err)
    assert not sweep.lost(before, root)


@pytest.mark.parametrize("signal_name, code", [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 129)])
def test_a_signal_while_the_command_is_read_or_runs(signal_name: str, code: int, base: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The sweep's signal rows, at a moment chosen here: a Ctrl-C while the command modules are
    imported (issue 43: a raw KeyboardInterrupt from inside an import), and each signal while `list`
    runs, as parbench's handler raises it: one line, the shell's exit code, nothing lost."""
    import importlib
    import signal

    from suites.frontends import cli
    from suites.frontends.commands import list as list_command
    from suites.runner.termination import Terminated

    fixture, before = prepared(ROWS["signal-list-sigint"], base, tmp_path)
    monkeypatch.chdir(fixture.root)
    if signal_name == "SIGINT":
        def interrupted(name: str):  # noqa: ANN202
            raise KeyboardInterrupt
        monkeypatch.setattr(cli.importlib, "import_module", interrupted)
        assert main(["list", "--suite", "tiny.toml"]) == 130
        monkeypatch.setattr(cli.importlib, "import_module", importlib.import_module)
        assert "interrupted before the command began; nothing was run" in one_line(capsys)

    def stopped(args):  # noqa: ANN001, ANN202
        if signal_name == "SIGINT":
            raise KeyboardInterrupt
        raise Terminated(getattr(signal, signal_name))
    monkeypatch.setattr(list_command, "run", stopped)
    assert main(["list", "--suite", "tiny.toml"]) == code
    assert re.match(r"parbench: (interrupted|stopped by SIG)", one_line(capsys))
    assert not sweep.lost(before, fixture.root)


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return lines[0]


@pytest.mark.parametrize("row_id", AS_PROCESS)
def test_rows_of_a_process_of_their_own(row_id: str, base: Path, tmp_path: Path) -> None:
    row = ROWS[row_id]
    fixture, before = prepared(row, base, tmp_path)
    env = {name: value for name, value in os.environ.items() if not name.startswith("PARBENCH_")}
    env["PYTHONPATH"] = str(REPO)
    code, err = sweep.execute(row, [sys.executable, "-m", "suites", *row.argv], fixture.root, env)
    assert sweep.classify(row, code, err, sweep.lost(before, fixture.root)) == "clean", f"exit {code}: {err}"


def test_the_sweep_has_350_hostile_rows_with_distinct_ids() -> None:
    assert sum(not row.control for row in ROWS.values()) >= 350


def test_the_classes_name_a_traceback_a_silent_exit_and_a_lost_file(tmp_path: Path) -> None:
    """The sweep's classifier itself: it must be able to say each kind of failure."""
    row = sweep.Row("x", "cli-text", ("list",))
    assert sweep.classify(row, 2, "parbench: error: bad\n", False) == "clean"
    assert sweep.classify(row, 1, "Traceback (most recent call last):\n  File x\nValueError: y\n", False) == "traceback"
    assert sweep.classify(row, 0, "", False) == "silent"
    assert sweep.classify(row, 2, "usage: parbench\nparbench: error: bad\n", False) == "multi-line"
    assert sweep.classify(row, None, "", False) == "hang"
    kept = tmp_path / "kept"
    kept.write_bytes(b"one\n")
    before = sweep.snapshot(tmp_path)
    kept.write_bytes(b"one\ntwo\n")
    assert not sweep.lost(before, tmp_path)  # appended
    kept.write_bytes(b"two\n")
    assert sweep.lost(before, tmp_path)
    assert sweep.classify(row, 2, "parbench: error: bad\n", True) == "lost"
