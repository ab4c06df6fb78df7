"""The README and docs/: the README stays short and names the test command, every relative link
and anchor leads somewhere, code fences close, and the strategy hook table in
docs/strategy-hooks.md is the one the code generates."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import ClassVar

import pytest

from suites.strategies import hook_table
from suites.strategies.base import StrategyPlugin
from suites.strategies.hook_table import Member, Plugin

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
README_LIMIT_BYTES = 15 * 1024
REGENERATE = "python -m suites.strategies.hook_table --write"

LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)\)")
HEADING = re.compile(r"^(?P<level>#{1,6})\s+(?P<text>.+?)\s*#*\s*$")
FENCE = re.compile(r"^\s{0,3}(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


def prose_lines(text: str) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks."""
    lines, fence = [], None
    for line in text.splitlines():
        match = FENCE.match(line)
        if match and (fence is None or match["fence"].startswith(fence)):
            fence = match["fence"] if fence is None else None
            continue
        if fence is None:
            lines.append(line)
    return lines


def unclosed_fences(text: str) -> list[str]:
    """Problems with the fenced code blocks of a Markdown text: a fence left open, or a closing
    fence with an info string (which Markdown reads as a new opening fence)."""
    problems, fence, opened = [], None, 0
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if not match:
            continue
        if fence is None:
            fence, opened = match["fence"], number
        elif match["fence"].startswith(fence[0] * len(fence)):
            if match["info"].strip():
                problems.append(f"line {number}: a fence with an info string inside the block opened on line {opened}")
            fence = None
    if fence is not None:
        problems.append(f"the fence opened on line {opened} is never closed")
    return problems


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown text's headings (a repeated one also as `-1`, `-2`, ...)."""
    found: set[str] = set()
    for line in prose_lines(text):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match["text"])
        name, count = base, 0
        while name in found:
            count += 1
            name = f"{base}-{count}"
        found.add(name)
    return found


def broken_links(path: Path) -> list[str]:
    """The relative links of a Markdown file that lead to no file, or to no heading of it."""
    broken = []
    for line in prose_lines(path.read_text()):
        for match in LINK.finditer(line):
            target = match["target"]
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.exists():
                broken.append(f"{target}: no file "
                              f"{linked.relative_to(ROOT) if linked.is_relative_to(ROOT) else linked}")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text()):
                broken.append(f"{target}: no heading with anchor #{anchor} in {linked.name}")
    return broken


# --- the README ----------------------------------------------------------------------------
def test_the_readme_is_at_most_15_kb():
    size = len(README.read_bytes())
    assert size <= README_LIMIT_BYTES, f"README.md is {size} bytes; move detail into docs/ (limit {README_LIMIT_BYTES})"


def test_the_readme_names_the_test_command():
    assert "bash tests/run.sh" in README.read_text()


def test_the_docs_exist_and_the_readme_links_to_each():
    readme = README.read_text()
    assert DOCS
    unlinked = [doc.name for doc in DOCS if f"(docs/{doc.name}" not in readme]
    assert not unlinked, f"docs the README does not link to: {unlinked}"


# --- links and code fences -------------------------------------------------------------------
@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_relative_link_leads_to_a_file_and_heading(path):
    assert not broken_links(path)


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda path: path.relative_to(ROOT).as_posix())
def test_code_fences_close(path):
    assert not unclosed_fences(path.read_text())


def test_the_link_checker_finds_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## What `bound_by` says: a verdict\n")
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n[ok](other.md#what-bound_by-says-a-verdict) [self](#page)\n"
                    "[gone](missing.md) [no anchor](other.md#nowhere) [web](https://example.com/x.md)\n"
                    "```\n[in code](missing-too.md)\n```\n")
    assert broken_links(page) == [f"missing.md: no file {tmp_path / 'missing.md'}",
                                  "other.md#nowhere: no heading with anchor #nowhere in other.md"]


def test_anchors_skip_code_and_number_repeats():
    text = "# A: b\n```toml\n# not a heading\n```\n## A: b\n### `x_y` (z)\n"
    assert anchors(text) == {"a-b", "a-b-1", "x_y-z"}


def test_the_fence_checker_finds_an_open_fence_and_a_closing_fence_with_a_language():
    assert unclosed_fences("```python\nx = 1\n```\n") == []
    assert unclosed_fences("```python\nx = 1\n") == ["the fence opened on line 1 is never closed"]
    assert unclosed_fences("```\nx\n```python\ny\n```\n") == [
        "line 3: a fence with an info string inside the block opened on line 1",
        "the fence opened on line 5 is never closed"]


# --- the generated hook table ------------------------------------------------------------------
def test_the_committed_hook_table_is_the_generated_one():
    document = (ROOT / "docs" / "strategy-hooks.md").read_text()
    assert hook_table.committed(document) == hook_table.render(), (
        f"docs/strategy-hooks.md's hook table differs from the code; regenerate it with `{REGENERATE}`")


def test_generating_the_table_imports_no_framework():
    code = ("import sys; from suites.strategies.hook_table import render; render(); "
            "print(sorted(name for name in ('torch', 'tensorflow', 'keras', 'jax') if name in sys.modules))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                            check=True)
    assert result.stdout.strip() == "[]"


class FakeBase(StrategyPlugin):
    """A base for the tests. Its second sentence is not shown."""

    first: ClassVar[int] = 1  # data: no hook, not tabled
    _private = 2

    def plain(self) -> None:
        """What plain does, e.g. nothing. More."""

    @staticmethod
    def launched() -> None:
        """Launches."""

    def compile_reason(self, job):
        return None

    def unavailable_reason(self, job, device):  # no hook (`NOT_HOOKS`): never tabled
        return None

    def _hidden(self) -> None:
        """Not public."""


class FakeIntermediate(FakeBase):
    def plain(self) -> None:
        """Overridden in an intermediate base."""


class FakeOwn(FakeBase):
    def launched(self) -> None:
        """Its own."""


class FakeInherits(FakeIntermediate):
    pass


def test_hooks_are_the_public_methods_in_definition_order_with_their_first_sentence():
    assert hook_table.members_of(FakeBase) == [
        Member("plain", "What plain does, e.g. nothing."),
        Member("launched", "Launches."),
        Member("compile_reason", "Overrides `StrategyPlugin.compile_reason`."),
    ]


def test_overriders_are_named_with_the_intermediate_base_they_inherit_from():
    registered = [Plugin("torch/own", FakeOwn()), Plugin("torch/inherits", FakeInherits()),
                  Plugin("tf/unrelated", StrategyPlugin())]
    bases = [FakeBase, FakeIntermediate]
    assert hook_table.overriders(FakeBase, "plain", registered, bases) == "via `FakeIntermediate`: inherits"
    assert hook_table.overriders(FakeBase, "launched", registered, bases) == "own"
    assert hook_table.overriders(FakeBase, "compile_reason", registered, bases) == "—"
    assert hook_table.overriders(StrategyPlugin, "compile_reason", registered, bases) == \
        "via `FakeBase`: torch/own, torch/inherits"
    registered = [Plugin("torch/own", FakeOwn())]
    assert hook_table.overriders(FakeBase, "launched", registered, bases) == "every plugin (1)"


CAPABILITIES = '''
from typing import Protocol


class Stepping(Protocol):
    """Runs its own step."""

    def own_step(self) -> None:
        """The step."""


class NotAProtocol:
    def own_step(self) -> None:
        """Not tabled."""
'''


def test_capability_protocols_are_tabled_with_the_plugins_that_implement_them(tmp_path, monkeypatch):
    (tmp_path / "fake_capabilities_for_docs.py").write_text(textwrap.dedent(CAPABILITIES))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(hook_table, "CAPABILITIES_MODULE", "fake_capabilities_for_docs")

    class Implements(StrategyPlugin):
        def own_step(self) -> None:
            """Its step."""

    monkeypatch.setattr(hook_table, "plugins", lambda: [
        Plugin("torch/implements", Implements()), Plugin("tf/neither", StrategyPlugin())])
    table = hook_table.render()
    protocols = table[table.index("## Capability protocols"):]
    assert "### `Stepping`" in protocols and "NotAProtocol" not in table
    assert "| `own_step()` | The step. | torch/implements |" in protocols


def test_the_tables_leave_out_unavailable_reason_and_end_with_the_requirements():
    """`unavailable_reason` evaluates `requirements` and no plugin overrides it: a row saying so
    would be noise. The requirements have their table, a row per registered plugin."""
    table = hook_table.render()
    assert "`unavailable_reason()`" not in table
    section = table[table.index("## Availability requirements"):]
    assert section.count("\n| ") == 2 + len(hook_table.plugins())
    assert "| ddp | torch | `process-group-backend` (from `RankProcesses`): " in section


def test_the_rules_section_is_each_plugins_values_and_every_fields_documentation():
    table = hook_table.render()
    section = table[table.index("## Rules"):table.index("## Availability requirements")]
    rows = [line for line in section.splitlines()
            if line.startswith("| ") and not line.startswith(("| strategy", "| ---"))]
    assert len(rows) == len(hook_table.plugins())
    assert "| ddp | torch | cpu, gpu | collective, training | ranks | inductor, none | replicas, sync |" in section
    assert "`startup_allowance_s`: 300.0" in section  # a field without a column, where it differs
    for name in ("devices", "launch", "coordinated", "soft_placement_reason"):  # Rules' and TfRules' fields
        assert f"- `{name}`: " in section


def test_write_replaces_only_the_text_between_the_markers(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(hook_table, "render", lambda: "| the | table |\n")
    page = tmp_path / "hooks.md"
    page.write_text(f"# Hooks\n\nBefore.\n\n{hook_table.START_MARKER}\nstale\n{hook_table.END_MARKER}\n\nAfter.\n")
    assert hook_table.main(["--write", str(page)]) == 0
    assert page.read_text() == (f"# Hooks\n\nBefore.\n\n{hook_table.START_MARKER}\n| the | table |\n"
                                f"{hook_table.END_MARKER}\n\nAfter.\n")
    assert hook_table.committed(page.read_text()) == "| the | table |\n"
    page.write_text("# Hooks without markers\n")
    assert hook_table.main(["--write", str(page)]) == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_printing_the_table_writes_it_to_stdout(monkeypatch, capsys):
    monkeypatch.setattr(hook_table, "render", lambda: "| the | table |\n")
    assert hook_table.main([]) == 0
    assert capsys.readouterr().out == "| the | table |\n"


def test_a_sentence_ends_at_a_full_stop_but_not_at_e_g():
    assert hook_table.first_sentence("One (e.g. `x`), i.e. two.\nThree.\n\nFour.") == "One (e.g. `x`), i.e. two."
    assert hook_table.first_sentence("") == ""
