"""Every backticked dotted name in a docstring of the package resolves: a docstring that names
`check_case` or `StrategyPlugin.serve` after they were renamed or removed sends a reader to
nothing. A name is checked where it can be: fully qualified (`suites.report.load.files.load_files`),
or starting from a name the module itself defines or imports (`Record.case`, `knobs.read`).
Names of local variables (`job.case`) and of other libraries (`torch.compile`) are not checked."""
from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import re

import suites

DOTTED = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")
#: Top-level names that are other libraries even where a module imports them.
FOREIGN = {"torch", "tf", "tensorflow", "np", "numpy", "pd", "pandas", "keras", "os", "sys", "json", "subprocess",
           "signal", "math", "re", "time", "asv", "pytest", "matplotlib", "scipy", "archspec", "jinja2", "rich",
           "faulthandler", "threading", "multiprocessing", "statistics", "dataclasses", "typing", "socket",
           "pathlib", "importlib", "functools", "collections", "shutil", "tempfile", "resource", "gzip", "io"}


def _has(owner: object, name: str) -> bool:
    if hasattr(owner, name):
        return True
    fields = getattr(owner, "__dataclass_fields__", {})
    annotations = {}
    for klass in getattr(owner, "__mro__", ()):
        annotations.update(getattr(klass, "__annotations__", {}))
    return name in fields or name in annotations


def _resolve(module: object, dotted: str) -> str | None:
    """None where `dotted` resolves or cannot be checked; else the part that does not exist."""
    parts = dotted.split(".")
    if parts[0] == "suites":
        for cut in range(len(parts), 0, -1):
            try:
                owner = importlib.import_module(".".join(parts[:cut]))
                break
            except ImportError:
                continue
        rest = parts[cut:]
    elif parts[0] in FOREIGN or not hasattr(module, parts[0]):
        return None
    else:
        owner, rest = getattr(module, parts[0]), parts[1:]
        home = getattr(owner, "__module__", None) or getattr(owner, "__name__", "")
        if not str(home).startswith("suites"):
            return None  # another library's object, imported by name
    for name in rest:
        if not _has(owner, name):
            return name
        owner = getattr(owner, name, None)
        if owner is None:
            return None  # a field without a default: exists, nothing further to check
    return None


def _docstrings(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node, clean=False)
            if text:
                yield getattr(node, "lineno", 1), text


def test_every_checkable_dotted_name_in_a_docstring_resolves():
    unresolved = []
    for info in pkgutil.walk_packages(suites.__path__, "suites."):
        if info.name.endswith("__main__"):
            continue  # runs the CLI when imported
        module = importlib.import_module(info.name)
        source = importlib.util.find_spec(info.name).origin
        if not source or not source.endswith(".py"):
            continue
        tree = ast.parse(open(source, encoding="utf-8").read())
        for line, text in _docstrings(tree):
            for dotted in DOTTED.findall(text):
                missing = _resolve(module, dotted)
                if missing:
                    unresolved.append(f"{info.name}:{line}: `{dotted}` ({missing!r} does not exist)")
    assert not unresolved, "\n".join(unresolved)
