"""`compare --fail-on-regression` over records other work competed with (issue 47 item 6): a gate
whose cases ran contended, starved or bimodal says so and exits INCONCLUSIVE, never 1 ("regression")
nor 0; a regression among quiet cases still fails. And a pytest gate baseline that holds no case
is refused, never a pass that judged nothing (issue 43 item 4)."""
from __future__ import annotations

import json

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.errors import UserError
from suites.frontends.cli import main
from suites.frontends.commands.compare import INCONCLUSIVE
from suites.frontends.gate import Baseline
from suites.records.contention import Contention
from suites.records.measurement import Measurement
from suites.records.record import Record
from suites.records.store import ResultsStore

CASES = [Case.make("matmul", "torch", "cpu", params={"m": m, "n": 64, "k": 64}) for m in (64, 128)]
CONTENDED = Contention(None, None, None, 2, True, "others took 60% of its 2 cores", others_core_share=0.6)
QUIET = Contention(None, None, None, 2, False, "", others_core_share=0.01)


def store(results, machine: str, step_s: float, contention: Contention, slower: tuple[int, ...] = ()) -> None:
    """Two matmul records of `machine`, each step `step_s` (1.3 x that for the indices in `slower`)."""
    records = ResultsStore(results)
    records.ensure_writable()
    for index, case in enumerate(CASES):
        step = step_s * (1.3 if index in slower else 1.0)
        samples = tuple(step * (1 + 0.001 * i) for i in range(15))
        records.append(Record(case=case, status=Status.OK, run_id=f"run-{machine}", timestamp="2026-11-28T00:00:00Z",
                              suite="t", environment={"machine": machine}, measurement=Measurement(samples),
                              metrics={"tflops": 2 * case.param_dict["m"] * 64 * 64 / step / 1e12},
                              contention=contention))


def gate(results, capsys) -> tuple[int, str]:
    code = main(["compare", "a", "b", "--results", str(results), "--fail-on-regression", "0.05"])
    return code, capsys.readouterr().out


def test_two_contended_runs_are_inconclusive_not_a_regression(tmp_path, capsys):
    store(tmp_path, "a", 1e-3, CONTENDED)
    store(tmp_path, "b", 1e-3, CONTENDED, slower=(0, 1))  # 30% slower: the neighbours', not the code's
    code, out = gate(tmp_path, capsys)
    assert code == INCONCLUSIVE and "regression(s)" not in out
    assert "inconclusive: 2 of 2 case(s) judged" in out and "2 contended in A, 2 contended in B" in out


def test_a_contended_baseline_cannot_pass_a_quiet_run_either(tmp_path, capsys):
    store(tmp_path, "a", 1e-3, CONTENDED)
    store(tmp_path, "b", 1e-3, QUIET)
    code, out = gate(tmp_path, capsys)
    assert code == INCONCLUSIVE and "2 contended in A" in out and "in B" not in out


def test_a_regression_among_quiet_cases_still_fails(tmp_path, capsys):
    store(tmp_path, "a", 1e-3, QUIET)
    store(tmp_path, "b", 1e-3, QUIET, slower=(0,))
    code, out = gate(tmp_path, capsys)
    assert code == 1 and "1 regression(s)" in out


def test_quiet_runs_alike_pass(tmp_path, capsys):
    store(tmp_path, "a", 1e-3, QUIET)
    store(tmp_path, "b", 1e-3, QUIET)
    code, out = gate(tmp_path, capsys)
    assert code == 0 and "no regression" in out


def test_without_a_gate_the_flags_are_named(tmp_path, capsys):
    store(tmp_path, "a", 1e-3, QUIET)
    store(tmp_path, "b", 1e-3, CONTENDED)
    assert main(["compare", "a", "b", "--results", str(tmp_path)]) == 0
    assert "not to be trusted: 2 contended in B" in capsys.readouterr().out


def test_a_gate_baseline_with_no_case_is_refused(tmp_path):
    path = tmp_path / "baseline.json"
    reference = "numpy einsum float32 matmul 192x192x192"
    path.write_text(json.dumps({"format": "parbench-gate-baseline", "version": 1, "reference": reference,
                                "cases": {}}))
    with pytest.raises(UserError, match="holds no case, so nothing could be judged"):
        Baseline.load(path, reference)


def test_a_pytest_gate_that_judged_no_case_says_so_and_does_not_count_it_judged():
    from suites.frontends.gate import RelativeTime, Verdict
    from suites.frontends.pytest_plugin import GateSession

    measured = RelativeTime(1.0, 1e-3, 1e-3, 15, "cpu")
    session = GateSession(0.2, Baseline("ref", {"other/case": measured}))
    session.verdicts.append(Verdict("this/case", measured, None, 0.2))  # not in the baseline: recorded only
    assert session.judged_nothing and session.judged == []
    assert any(line.startswith("nothing judged: none of the 1 case(s) measured is in the baseline")
               for line in session.summary())
    session.verdicts.append(Verdict("other/case", measured, 1.0, 0.2))
    assert not session.judged_nothing and "1 case(s) judged, 0 regressed" in session.summary()[-1]
