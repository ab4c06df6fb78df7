"""Every bad input a user reported: one line on stderr naming the problem, exit != 0, records untouched.

Each row runs the CLI in process with one bad option, file or environment variable, against a
results folder that already holds a record; nothing may be measured, and that record's file
must be byte for byte what it was.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from suites import knobs
from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.frontends.cli import main
from suites.records.record import Record
from suites.records.store import ResultsStore

TINY_GRID = '[timing]\nbudget_s = 0.2\n[[grid]]\nworkload = "matmul"\nframework = "torch"\ndevice = "cpu"\n' \
            'params = { m = 8, n = 8, k = 8 }\n'
KEPT = Case.make("matmul", "torch", "cpu", params={"m": 8, "n": 8, "k": 8})
OTHER = Case.make("matmul", "torch", "cpu", params={"m": 16, "n": 16, "k": 16})


def record(case: Case, machine: str) -> Record:
    return Record(case=case, status=Status.UNAVAILABLE, run_id=f"run-{machine}",
                  timestamp="2026-01-01T00:00:00+00:00", suite="t", environment={"machine": machine},
                  reason="fixture")


@dataclass(frozen=True)
class BadInput:
    name: str
    argv: tuple[str, ...]
    #: What the one line must say (a regular expression).
    says: str
    env: dict[str, str] = field(default_factory=dict)
    #: Files written under the test's folder first: relative path -> text (or bytes).
    files: dict[str, str | bytes] = field(default_factory=dict)


RUN = ("run", "--suite", "{tmp}/tiny.toml", "--results", "{tmp}/results")
PLUGIN_LIST = ("list", "--suite", "{tmp}/tiny.toml")
CASES = [
    BadInput("budget nan", (*RUN, "--budget", "nan"), r"--budget: 'nan' is not valid: expected a finite number"),
    BadInput("budget inf", (*RUN, "--budget", "inf"), r"--budget: 'inf' is not valid: expected a finite number"),
    BadInput("budget a day", (*RUN, "--budget", "86400"), r"--budget: '86400' is not valid: .* <= 3600"),
    BadInput("grid file not UTF-8", ("list", "--suite", "{tmp}/latin.toml"), r"latin\.toml is not UTF-8 text",
             files={"latin.toml": "description = \"caf\u00e9\"\n".encode("latin-1")}),
    BadInput("suite name of 5000 characters", ("list", "--suite", "a" * 5000),
             r"--suite 'a{60}\.\.\. \(5000 characters\)' is neither a built-in suite nor a readable path"),
    BadInput("pinned to a CPU that is not there", RUN,
             r"\$PARBENCH_CPUS='99' is not valid: expected .*CPUs this process may use",
             env={"PARBENCH_CPUS": "99"}),
    BadInput("a run of 18 hours", ("run", "--suite", "{tmp}/huge.toml", "--results", "{tmp}/results"),
             r"huge: 10648 cases, about \d+ h .*past 12 h, so not started; .*--max-minutes.*--yes",
             files={"huge.toml": TINY_GRID.replace("[timing]\nbudget_s = 0.2\n", "").replace(
                 "m = 8, n = 8, k = 8", ", ".join(f"{axis} = {list(range(8, 184, 8))}" for axis in "mnk"))}),
    *[BadInput(f"grid {key} unbounded", ("run", "--suite", "{tmp}/long.toml", "--results", "{tmp}/results"),
               rf"long\.toml: timing\.{key}: .* is not valid: expected .* (<=|to) \d+",
               files={"long.toml": TINY_GRID.replace("budget_s = 0.2", f"{key} = {value}")})
      for key, value in (("warmup_s", 100000), ("block_min_s", 1e6), ("budget_s", 1e5), ("min_time_s", 1e5),
                         ("case_timeout_s", 1e7), ("min_samples", 10**7), ("max_samples", 10**9),
                         ("min_warmup_steps", 10**9))],
    BadInput("grid budget nan, list", ("list", "--suite", "{tmp}/nan.toml"), r"nan\.toml: timing\.budget_s: .*nan",
             files={"nan.toml": TINY_GRID.replace("0.2", "nan")}),
    BadInput("grid budget inf, run", ("run", "--suite", "{tmp}/inf.toml", "--results", "{tmp}/results"),
             r"inf\.toml: timing\.budget_s: .*inf", files={"inf.toml": TINY_GRID.replace("0.2", "inf")}),
    BadInput("plugin syntax error", PLUGIN_LIST, r"PARBENCH_PLUGINS: .*broken\.py: syntax error at line 1",
             env={"PARBENCH_PLUGINS": "{tmp}/broken.py"}, files={"broken.py": "x = (\n"}),
    BadInput("plugin file missing", PLUGIN_LIST, r"PARBENCH_PLUGINS: .*gone\.py: no such file",
             env={"PARBENCH_PLUGINS": "{tmp}/gone.py"}),
    BadInput("plugin module missing", PLUGIN_LIST, r"PARBENCH_PLUGINS: no_such_plugin_module: no module named",
             env={"PARBENCH_PLUGINS": "no_such_plugin_module"}),
    BadInput("plugin defines no model", PLUGIN_LIST, r"PARBENCH_PLUGINS: .*nothing\.py registers no model",
             env={"PARBENCH_PLUGINS": "{tmp}/nothing.py"}, files={"nothing.py": "VALUE = 1\n"}),
    BadInput("plugin raises", PLUGIN_LIST, r"nameerr\.py: importing it raised NameError",
             env={"PARBENCH_PLUGINS": "{tmp}/nameerr.py"}, files={"nameerr.py": "undefined_name\n"}),
    BadInput("rotation bytes", RUN, r"\$PARBENCH_ROTATION_BYTES='abc' is not valid: expected a whole number",
             env={"PARBENCH_ROTATION_BYTES": "abc"}),
    BadInput("threads", RUN, r"\$PARBENCH_THREADS='lots' is not valid", env={"PARBENCH_THREADS": "lots"}),
    BadInput("cpus", RUN, r"\$PARBENCH_CPUS='one' is not valid", env={"PARBENCH_CPUS": "one"}),
    BadInput("rendezvous timeout", RUN, r"\$PARBENCH_RENDEZVOUS_TIMEOUT_S='nan' is not valid",
             env={"PARBENCH_RENDEZVOUS_TIMEOUT_S": "nan"}),
    BadInput("peaks file", RUN, r"\$PARBENCH_PEAKS='.*nope\.toml' is not valid: expected the path of an existing",
             env={"PARBENCH_PEAKS": "{tmp}/nope.toml"}),
    BadInput("machine env too long", RUN, r"\$PARBENCH_MACHINE='m{300}' is not valid",
             env={"PARBENCH_MACHINE": "m" * 300}),
    BadInput("label too long", (*RUN, "--label", "x" * 300), r"--label 'x{40}\.\.\.' \(300 characters\)"),
    BadInput("label with slash", (*RUN, "--label", "lab/one"), r"--label 'lab/one' .* without '/'"),
    BadInput("label with NUL", (*RUN, "--label", "lab\0"), r"--label 'lab\\x00' .* control characters"),
    BadInput("compare with an empty folder", ("compare", "{tmp}/results", "{tmp}/empty", "--fail-on-regression",
                                              "0.05"), r"empty holds no results", files={"empty/.keep": ""}),
    BadInput("compare without a case in common", ("compare", "{tmp}/results", "{tmp}/disjoint",
                                                  "--fail-on-regression", "0.05"), r"no case in common"),
    BadInput("report into a file", ("report", "{tmp}/results", "-o", "{tmp}/tiny.toml"), r"-o .*tiny\.toml: is a file"),
    BadInput("report into /proc", ("report", "{tmp}/results", "-o", "/proc/parbench-x"),
             r"-o /proc/parbench-x: cannot create it"),
    BadInput("report prices file", ("report", "{tmp}/results", "-o", "{tmp}/out"), r"\$PARBENCH_PRICES=",
             env={"PARBENCH_PRICES": "{tmp}/none.toml"}),
    BadInput("report references file", ("report", "{tmp}/results", "-o", "{tmp}/out"), r"\$PARBENCH_REFERENCES=",
             env={"PARBENCH_REFERENCES": "{tmp}/none.toml"}),
    BadInput("calibrate size 0", ("calibrate", "--sizes", "0", "--results", "{tmp}/results"), r"--sizes must be"),
    BadInput("calibrate size -5", ("calibrate", "--sizes", "-5", "--results", "{tmp}/results"), r"--sizes must be"),
]


@pytest.mark.parametrize("bad", CASES, ids=[bad.name for bad in CASES])
def test_bad_input_is_one_line_and_a_nonzero_exit_with_records_untouched(bad, tmp_path, monkeypatch, capsys):
    def filled(text: str) -> str:
        return text.replace("{tmp}", str(tmp_path))

    (tmp_path / "tiny.toml").write_text(TINY_GRID)
    kept = stored(tmp_path / "results", record(KEPT, "box"))
    stored(tmp_path / "disjoint", record(OTHER, "other"))
    before = kept.read_bytes()
    for relative, text in bad.files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            (tmp_path / relative).write_bytes(text)
        else:
            (tmp_path / relative).write_text(text)
    for name, value in bad.env.items():
        monkeypatch.setenv(name, filled(value))
    code = main([filled(arg) for arg in bad.argv])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1, err
    assert lines[0].startswith("parbench: error: ") and re.search(bad.says, lines[0]), lines[0]
    assert kept.read_bytes() == before
    assert sorted(p.name for p in kept.parent.iterdir()) == [kept.name]


def stored(root: Path, kept: Record) -> Path:
    store = ResultsStore(root)
    store.ensure_writable()
    return store.append(kept)


def test_every_knob_is_documented_and_every_documented_variable_is_a_knob():
    """The README and docs/ (the variables' table is in docs/extending.md) name every knob, and
    no variable that is not one."""
    root = Path(__file__).resolve().parent.parent
    text = "".join(path.read_text() for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))])
    documented = set(re.findall(r"PARBENCH_[A-Z_]+", text))
    assert documented == set(knobs.KNOBS)
    table = (root / "docs" / "extending.md").read_text()
    assert all(f"`{name}`" in table for name in knobs.KNOBS)


def test_knobs_are_read_only_through_suites_knobs():
    """No module but suites/knobs.py reads a PARBENCH_* variable from the environment."""
    package = Path(__file__).resolve().parent.parent / "suites"
    readers = []
    for path in package.rglob("*.py"):
        if path.name == "knobs.py" and path.parent == package:
            continue
        tree = ast.parse(path.read_text())
        names = {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Constant) and str(node.value.value).startswith("PARBENCH_")
                 for target in node.targets if isinstance(target, ast.Name)}

        def is_knob(arg: ast.AST) -> bool:
            return (isinstance(arg, ast.Constant) and str(arg.value).startswith("PARBENCH_")) or \
                (isinstance(arg, ast.Name) and arg.id in names)
        for node in ast.walk(tree):
            read = (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and ast.unparse(node.func) in ("os.environ.get", "os.getenv") and node.args
                    and is_knob(node.args[0])) or \
                (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                 and ast.unparse(node.value) == "os.environ" and is_knob(node.slice))
            if read:
                readers.append(f"{path.relative_to(package)}:{node.lineno}")
    assert not readers


def test_a_bad_knob_is_one_line_naming_it_and_what_is_accepted(monkeypatch):
    monkeypatch.setenv("PARBENCH_GATE_THRESHOLD", "20%")
    with pytest.raises(knobs.UserError, match=r"\$PARBENCH_GATE_THRESHOLD='20%' is not valid: expected a fraction"):
        knobs.read("PARBENCH_GATE_THRESHOLD")
    monkeypatch.setenv("PARBENCH_GATE_THRESHOLD", "")
    assert knobs.read("PARBENCH_GATE_THRESHOLD") is None  # empty is unset


def test_harness_overhead_exits_non_zero_outside_its_agreement(monkeypatch, capsys):
    from suites.selfchecks import harness_overhead

    medians = {"ours": 1.0, "theirs": 1.0}
    monkeypatch.setattr(harness_overhead, "parbench_median", lambda framework, size, rotate: medians["ours"])
    monkeypatch.setattr(harness_overhead, "torch_timer_median", lambda size: medians["theirs"])
    assert harness_overhead.main(["--framework", "torch", "--rounds", "1"]) == 0
    medians["ours"] = 0.76
    assert harness_overhead.main(["--framework", "torch", "--rounds", "1"]) == 1
    assert "torch outside 0.98-1.02" in capsys.readouterr().err


def test_a_gpu_rank_on_a_machine_without_a_gpu_is_unavailable_with_the_reason(monkeypatch):
    torch = pytest.importorskip("torch")
    from suites.frameworks.torch.distributed import rank_device
    from suites.measure.unsupported import Unsupported

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    case = Case.make("train_step", "torch", "gpu", strategy="ddp", n_devices=2, params={"model": "mlp", "batch": 32})
    with pytest.raises(Unsupported, match="no GPU visible to this rank .CUDA_VISIBLE_DEVICES is set to ''"):
        rank_device(case, local_rank=1)
    assert rank_device(Case.make("train_step", "torch", "cpu", strategy="ddp", n_devices=2,
                                 params={"model": "mlp", "batch": 32}), 1) == torch.device("cpu")


def test_compare_gate_passes_noisy_overlap_and_fails_a_clear_regression(tmp_path, capsys):
    """The gate end to end on stored records: same case, A's noisy samples against B's."""
    from suites.records.measurement import Measurement

    steps = 1e-3 * np.random.default_rng(9).uniform(0.75, 1.25, 30)
    others = 1e-3 * np.random.default_rng(109).uniform(0.75, 1.25, 30)

    def results(name: str, samples: np.ndarray) -> str:
        measured = Record(case=KEPT, status=Status.OK, run_id=f"run-{name}", timestamp="2026-01-01T00:00:00+00:00",
                          suite="t", environment={"machine": name}, measurement=Measurement(samples=tuple(samples)))
        stored(tmp_path / name, measured)
        return str(tmp_path / name)

    a = results("a", steps)
    ten_percent = results("b", others * 1.10 * np.median(steps) / np.median(others))
    half_slower = results("c", steps * 1.5)
    assert main(["compare", a, ten_percent, "--fail-on-regression", "0.05"]) == 0
    assert "no regression" in capsys.readouterr().out
    assert main(["compare", a, half_slower, "--fail-on-regression", "0.05"]) == 1
    assert f"1 regression(s) beyond 5% and noise: {KEPT.id}" in capsys.readouterr().out
