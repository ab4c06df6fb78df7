"""The package's layers: what a case is / what is kept / how it is run / reports / front ends.
A module imports only from its own layer and the layers below it, so each layer can be read,
tested and reused without the ones above (a report never needs the code that ran a case).

Plugins cross upward only by import path, resolved at run time (a workload's implementations,
`suites.strategies.registry`, `suites.kept.devices.descriptor`): that is how the lower
layers stay free of torch and TensorFlow.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "suites"

#: Bottom to top.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("what a case is", ("suites", "suites.errors", "suites.knobs", "suites.cases", "suites.workloads", "suites.grids")),
    ("what is kept", ("suites.kept",)),
    ("how it is run", ("suites.run", "suites.strategies", "suites.frameworks")),
    ("reports", ("suites.report",)),
    ("front ends", ("suites.frontends", "suites.overhead", "suites.examples", "suites.__main__",
                    "suites.worker")),
]


def layer_of(module: str) -> int:
    """The highest layer with a prefix of `module` (the bare package `suites` is the bottom)."""
    matches = [index for index, (_, prefixes) in enumerate(LAYERS)
               if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes
                      if prefix != "suites" or module == "suites")]
    if not matches:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS")
    return max(matches)


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


def static_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """Every `suites` import, at module level or in a function; not those under TYPE_CHECKING."""
    type_only = {id(node) for branch in ast.walk(tree)
                 if isinstance(branch, ast.If) and getattr(branch.test, "id", None) == "TYPE_CHECKING"
                 for node in ast.walk(branch)}
    found = []
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return [(line, name) for line, name in found if name == "suites" or name.startswith("suites.")]


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_imports_point_down(path):
    module = module_name(path)
    upward = [f"line {line}: {target} ({LAYERS[layer_of(target)][0]})"
              for line, target in static_imports(ast.parse(path.read_text()))
              if layer_of(target) > layer_of(module)]
    assert not upward, f"{module} ({LAYERS[layer_of(module)][0]}) imports from above: {upward}"


def test_relative_imports_are_not_used():
    """Absolute imports name the layer they come from, which is what the test above reads."""
    relative = [f"{module_name(path)}:{node.lineno}" for path in MODULES
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.ImportFrom) and node.level > 0]
    assert not relative


def test_the_checker_sees_an_upward_import():
    tree = ast.parse("def f():\n    from suites.report.loading import load_results\n")
    imports = static_imports(tree)
    assert imports == [(2, "suites.report.loading")]
    assert layer_of("suites.report.loading") > layer_of("suites.kept.store")
    typed = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import suites.run.runnable\n")
    assert static_imports(typed) == []
