"""The package's layers, bottom to top, and the one-way imports between them — five, and the
report beside them:

1. vocabulary: what a case and a record are (`suites.cases`, `errors`, `knobs`, `ranges`, `records`,
   `hardware`);
2. measuring: what a workload computes and how a step is timed and probed (`suites.workloads`,
   the models' specs, `suites.measure`);
3. frameworks and strategies: the torch and TF implementations, the strategy plugins and the job
   a case resolves into (`suites.frameworks`, the models' implementations, `suites.strategies`);
4. the runner: availability, estimate, launch (in process, isolated, ranks, Slurm) and recording
   of jobs (`suites.runner`);
5. front ends: the CLI, asv, pytest, the grids and the tools (`suites.frontends`, `grids`,
   `selfchecks`, `studies`, `examples`).

`report` stands beside them: it reads records and needs none of the code that ran a case. A
module imports only from its own layer and the layers `ALLOWED` names for it, so each layer can be
read, tested and reused without the ones above. Inside the report, three sub-layers and the page
on top of them (`REPORT_LAYERS`): loading (records into the tidy table), analyses (pandas in,
pandas out), rendering (HTML, tables, figures, terminal, exports), then the page: the first
screen, the sections (one module each, none importing another) and the content they make.

An import is any `suites` import a module makes: at module level, inside a function, or under
`if TYPE_CHECKING:` (a name a type checker reads is a dependency too: a type-only import that
points up is a circle a reader must hold in mind), and any module named by a string in code (not
a docstring): `importlib.import_module("suites.x")`, "suites.x.y:Name" of an implementation
table. There is no import cycle among `suites` modules, static and dynamic edges together (the
imports Python runs; within a layer two modules may name each other's types, as a job holds its
strategy plugin and a plugin's hook takes the job).
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "suites"

#: A built-in model's folder holds its spec (workload level) beside its torch and TF
#: implementations (framework level): `suites.models.<model>.{torch,tf}_model`.
MODEL_IMPLEMENTATIONS = tuple(sorted(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
                                     for path in (PACKAGE / "models").glob("*/*_model.py")))

#: layer -> the module prefixes in it (the longest prefix of a module decides).
LAYERS: dict[str, tuple[str, ...]] = {
    "vocabulary": ("suites.errors", "suites.knobs", "suites.ranges", "suites.cases", "suites.records",
                   "suites.hardware"),
    "measuring": ("suites.workloads", "suites.models", "suites.measure"),
    "frameworks and strategies": ("suites.frameworks", *MODEL_IMPLEMENTATIONS, "suites.strategies"),
    "runner": ("suites.runner",),
    "report": ("suites.report",),
    # The package itself: its public names are imported lazily from the layers below.
    "front ends": ("suites", "suites.startup", "suites.frontends", "suites.__main__", "suites.grids",
                   "suites.selfchecks", "suites.studies", "suites.examples", "suites.predict"),
}

#: layer -> the layers below it that it may import (its own is always allowed): a DAG.
ALLOWED: dict[str, frozenset[str]] = {
    "vocabulary": frozenset(),
    "measuring": frozenset({"vocabulary"}),
    "frameworks and strategies": frozenset({"vocabulary", "measuring"}),
    "runner": frozenset({"vocabulary", "measuring", "frameworks and strategies"}),
    "report": frozenset({"vocabulary"}),
    "front ends": frozenset(LAYERS) - {"front ends"},
}


#: The report's sub-layers, bottom to top -> the module prefixes in each (the longest decides).
REPORT_LAYERS: dict[str, tuple[str, ...]] = {
    "load": ("suites.report.load",),
    "analyses": ("suites.report.analyses",),
    "render": ("suites.report.render",),
    "page": ("suites.report", "suites.report.content", "suites.report.overview", "suites.report.equal_terms",
             "suites.report.sections"),
}
#: report sub-layer -> the sub-layers below it that it may import (its own is always allowed).
REPORT_ALLOWED: dict[str, frozenset[str]] = {
    "load": frozenset(),
    "analyses": frozenset({"load"}),
    "render": frozenset({"load"}),
    "page": frozenset({"load", "analyses", "render"}),
}


def _longest_prefix(module: str, layers: dict[str, tuple[str, ...]], top: str) -> str | None:
    best = max(((len(prefix), layer) for layer, prefixes in layers.items() for prefix in prefixes
                if module == prefix or (prefix != top and module.startswith(prefix + "."))),
               default=None)
    return best[1] if best else None


def report_layer_of(module: str) -> str:
    """The report sub-layer of `module` (a module of `suites.report`)."""
    layer = _longest_prefix(module, REPORT_LAYERS, "suites.report")
    if layer is None:
        raise AssertionError(f"{module} is in no report sub-layer: add it to REPORT_LAYERS")
    return layer


def layer_of(module: str) -> str:
    """The layer of the longest prefix of `module` (a top-level module not named is vocabulary)."""
    best = max(((len(prefix), layer) for layer, prefixes in LAYERS.items() for prefix in prefixes
                if module == prefix or (prefix != "suites" and module.startswith(prefix + "."))),
               default=None)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS")
    return best[1]


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


MODULES = sorted(PACKAGE.rglob("*.py"))
KNOWN_MODULES = frozenset(module_name(path) for path in MODULES)
#: A whole string that names a module, possibly with ":Name" (an implementation table's entry).
MODULE_STRING = re.compile(r"suites(?:\.[A-Za-z_][A-Za-z_0-9]*)+(?::[A-Za-z_][A-Za-z_0-9]*)?")


def resolve(name: str, modules: frozenset[str] = KNOWN_MODULES) -> str | None:
    """The module `name` loads: itself, or for `package.attribute` its longest module prefix."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(tree: ast.AST, modules: frozenset[str] = KNOWN_MODULES) -> list[tuple[int, str, str]]:
    """(line, module, "static", "type-only" or "dynamic") of each `suites` module `tree` imports:
    import statements at any depth (under `if TYPE_CHECKING:`: "type-only"), and strings in code
    (not docstrings) that are a module path."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    type_only = {id(inner) for node in ast.walk(tree)
                 if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
                 for statement in node.body for inner in ast.walk(statement)}
    found: list[tuple[int, str, str]] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        names: list[tuple[str, str]] = []
        kind = "type-only" if id(node) in type_only else "static"
        if isinstance(node, ast.Import):
            names = [(alias.name, kind) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [(f"{node.module}.{alias.name}", kind) for alias in node.names]
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
              and MODULE_STRING.fullmatch(node.value)):
            names = [(node.value.partition(":")[0], "dynamic")]
        for name, kind in names:
            target = resolve(name, modules) if name.startswith("suites.") or name == "suites" else None
            if target is not None and target != "suites":  # the bare package: its lazy table only
                found.append((getattr(node, "lineno", 0), target, kind))
        pending += ast.iter_child_nodes(node)
    return sorted(found)


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """module -> the modules it imports when it runs (static and dynamic), for {module: source text}."""
    modules = frozenset(sources)
    return {module: {target for _, target, kind in imports_of(ast.parse(text), modules)
                     if target != module and kind != "type-only"}
            for module, text in sources.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def upward(module: str, tree: ast.AST) -> list[str]:
    return [f"line {line}: {target} ({kind}, {layer_of(target)})" for line, target, kind in imports_of(tree)
            if layer_of(target) != layer_of(module) and layer_of(target) not in ALLOWED[layer_of(module)]]


def upward_in_report(module: str, tree: ast.AST) -> list[str]:
    """The imports of a report module that point up (or sideways) among the report's sub-layers."""
    mine = report_layer_of(module)
    return [f"line {line}: {target} ({kind}, {report_layer_of(target)})" for line, target, kind in imports_of(tree)
            if layer_of(target) == "report" and report_layer_of(target) != mine
            and report_layer_of(target) not in REPORT_ALLOWED[mine]]


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_imports_point_down(path):
    module = module_name(path)
    found = upward(module, ast.parse(path.read_text()))
    assert not found, f"{module} ({layer_of(module)}) imports from a layer it may not: {found}"


REPORT_MODULES = [path for path in MODULES if layer_of(module_name(path)) == "report"]


@pytest.mark.parametrize("path", REPORT_MODULES, ids=module_name)
def test_report_imports_point_down_its_sub_layers(path):
    module = module_name(path)
    found = upward_in_report(module, ast.parse(path.read_text()))
    assert not found, f"{module} ({report_layer_of(module)}) imports from a report sub-layer it may not: {found}"


SECTION_PACKAGE = "suites.report.sections"


@pytest.mark.parametrize("path", [path for path in REPORT_MODULES if module_name(path).startswith(SECTION_PACKAGE + ".")
                                  and module_name(path) != f"{SECTION_PACKAGE}.base"], ids=module_name)
def test_a_section_imports_no_other_section(path):
    """A section reads the analyses and the section base; the ordered list (the package) alone
    knows every section."""
    module = module_name(path)
    others = [target for _, target, _ in imports_of(ast.parse(path.read_text()))
              if target.startswith(SECTION_PACKAGE) and target not in (module, f"{SECTION_PACKAGE}.base")]
    assert not others, f"{module} imports other sections: {others}"


def test_the_report_sub_layers_form_a_dag():
    assert set(REPORT_ALLOWED) == set(REPORT_LAYERS)
    assert not cycles({layer: set(allowed) for layer, allowed in REPORT_ALLOWED.items()})
    assert "analyses" not in REPORT_ALLOWED["render"] and "render" not in REPORT_ALLOWED["analyses"]


def test_the_layers_form_a_dag():
    assert set(ALLOWED) == set(LAYERS)
    assert all(layer not in allowed for layer, allowed in ALLOWED.items())
    assert not cycles({layer: set(allowed) for layer, allowed in ALLOWED.items()})
    assert len(LAYERS) - 1 == 5  # five a reader holds in mind, and the report beside them
    assert not {"runner", "frameworks and strategies", "measuring"} & ALLOWED["report"]
    assert "report" not in ALLOWED["runner"] | ALLOWED["frameworks and strategies"]


def test_no_import_cycle_among_suites_modules():
    graph = import_graph({module_name(path): path.read_text() for path in MODULES})
    assert not cycles(graph)


def test_relative_imports_are_not_used():
    """Absolute imports name the layer they come from, which is what the tests above read."""
    relative = [f"{module_name(path)}:{node.lineno}" for path in MODULES
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.ImportFrom) and node.level > 0]
    assert not relative


# --- the checker itself -------------------------------------------------------------------------
def test_the_checker_sees_an_upward_import_in_a_function():
    tree = ast.parse("def f():\n    from suites.report.load.files import load_results\n")
    assert imports_of(tree) == [(2, "suites.report.load.files", "static")]
    assert upward("suites.records.store", tree) == ["line 2: suites.report.load.files (static, report)"]


def test_the_checker_sees_an_upward_dynamic_import():
    tree = ast.parse('"""Mentions suites.strategies.jobs in a docstring."""\nimport importlib\n'
                     'def f():\n    return importlib.import_module("suites.strategies.jobs")\n'
                     'TABLE = {"x": "suites.frameworks.torch.kernels:TorchMatmul"}\n'
                     'MESSAGE = "run python -m suites.worker"\n')
    assert imports_of(tree) == [(4, "suites.strategies.jobs", "dynamic"),
                                (5, "suites.frameworks.torch.kernels", "dynamic")]
    assert upward("suites.workloads.kernels", tree) == [
        "line 4: suites.strategies.jobs (dynamic, frameworks and strategies)",
        "line 5: suites.frameworks.torch.kernels (dynamic, frameworks and strategies)"]


def test_the_checker_sees_a_type_only_import():
    typed = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import suites.measure.runnable\n"
                      "else:\n    import suites.records.store\n")
    assert imports_of(typed) == [(3, "suites.measure.runnable", "type-only"), (5, "suites.records.store", "static")]
    assert upward("suites.records.check", typed) == ["line 3: suites.measure.runnable (type-only, measuring)"]


def test_the_checker_places_report_modules_in_their_sub_layer():
    tree = ast.parse("from suites.report.sections.summary import build\nfrom suites.report.load.columns import tidy\n")
    assert report_layer_of("suites.report.render.figures") == "render"
    assert report_layer_of("suites.report.sections.summary") == "page"
    assert upward_in_report("suites.report.analyses.choice", tree) == [
        "line 1: suites.report.sections.summary (static, page)"]


def test_the_checker_finds_a_cycle_through_a_dynamic_import():
    sources = {"suites.a": "from suites.b import x\n",
               "suites.b": "import importlib\nMODULE = importlib.import_module('suites.c')\n",
               "suites.c": "IMPLEMENTATION = 'suites.a:Thing'\n",
               "suites.d": "from suites.a import y\n"}
    assert cycles(import_graph(sources)) == [["suites.a", "suites.b", "suites.c"]]
    assert cycles(import_graph({**sources, "suites.c": ""})) == []
