"""docs/running.md's table of the built-in suites says how many cases each expands to (and, in its
text, how many of them are on one kind of device: "40 CPU cases"): every number is checked
against what `parbench list --suite NAME` lists, and every built-in suite has exactly one row."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import DeviceKind
from suites.frontends.commands import list as list_command
from suites.grids.grid import builtin_suite_names

RUNNING = Path(__file__).resolve().parent.parent / "docs" / "running.md"
SECTION = "## Built-in suites"
#: A row of the table: | `suite` (a note) | cases | what it answers |
ROW = re.compile(r"\| `(?P<suite>[^`]+)`[^|]* \| *(?P<cases>\d+) *\| (?P<what>.*) \|")
#: A count of one device kind's cases in a row's text.
DEVICE_COUNT = re.compile(r"\b(?P<count>\d+) (?P<device>CPU|GPU|TPU) cases\b")


def documented_rows(text: str) -> list[tuple[str, int, str]]:
    """(suite, cases, what it answers) of each row of the table under SECTION in `text`."""
    assert SECTION in text, f"docs/running.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue  # prose, the header and its rule
        match = ROW.fullmatch(line.strip())
        assert match, f"docs/running.md, {SECTION}: a row that is not | `suite` | cases | what |: {line[:100]}"
        rows.append((match["suite"], int(match["cases"]), match["what"]))
    return rows


ROWS = documented_rows(RUNNING.read_text(encoding="utf-8"))


def listed(suite: str, capsys: pytest.CaptureFixture[str]) -> list[Case]:
    """The cases `parbench list --suite suite` prints, one id per line."""
    capsys.readouterr()
    assert list_command.run(argparse.Namespace(suite=suite, filter=None, availability=False)) == 0
    return [Case.from_id(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_every_built_in_suite_has_one_row_and_every_row_is_a_built_in_suite():
    names = [suite for suite, _, _ in ROWS]
    repeated = sorted({name for name in names if names.count(name) > 1})
    missing = sorted(set(builtin_suite_names()) - set(names))
    unknown = sorted(set(names) - set(builtin_suite_names()))
    assert not (repeated or missing or unknown), (
        f"docs/running.md, {SECTION}: rows repeated {repeated}, built-in suites without a row {missing}, "
        f"rows of no built-in suite {unknown}")


@pytest.mark.parametrize("suite, documented, what", ROWS, ids=[row[0] for row in ROWS])
def test_a_suites_documented_counts_are_the_cases_it_lists(suite, documented, what, capsys):
    if suite not in builtin_suite_names():
        pytest.skip(f"{suite} is no built-in suite (the test above says so)")
    cases = listed(suite, capsys)
    assert documented == len(cases), (
        f"docs/running.md: suite {suite!r} is documented with {documented} cases; "
        f"`parbench list --suite {suite}` lists {len(cases)}")
    for match in DEVICE_COUNT.finditer(what):
        device = DeviceKind(match["device"].lower())
        real = sum(case.device is device for case in cases)
        assert int(match["count"]) == real, (
            f"docs/running.md: suite {suite!r} is documented with {match['count']} {match['device']} cases; "
            f"`parbench list --suite {suite}` lists {real}")


def test_the_table_parser_reads_counts_and_device_counts():
    text = (f"{SECTION}\n\n| suite | cases | what |\n| --- | ---: | --- |\n| `quick` (default) | 16 | smoke |\n"
            f"| `standard` | 152 | big; on a CPU: 40 CPU cases. |\n\n## Next\n| `other` | 1 | not this table |\n")
    assert documented_rows(text) == [("quick", 16, "smoke"), ("standard", 152, "big; on a CPU: 40 CPU cases.")]
    assert [m.groups() for m in DEVICE_COUNT.finditer("big; on a CPU: 40 CPU cases.")] == [("40", "CPU")]
