"""The parbench modules a workload's code runs, found by reading its import statements.

`suites.strategies.versions.version_of` hashes their source: asv keys stored results on it, so editing any
module a workload's definition or implementations use (a model, a trainer) must change it.
Modules are parsed with `ast`, never imported, so this needs no framework. Imports inside
functions count (the implementations import frameworks lazily); modules outside the `suites`
package (the standard library, NumPy, torch) are left out: they are versioned with the
environment, not with parbench. A module that imports modules by import path at run time (a
model's implementation, named by its spec) says which packages in `LOADS_BY_PATH`, and every
module of those packages counts as imported.
"""
from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from typing import Callable, Iterable, Iterator

PACKAGE = "suites"
#: A module-level tuple of the packages whose modules a module imports by import path at run
#: time, which no import statement shows.
LOADS_BY_PATH = "LOADS_BY_PATH"
_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def in_package(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


def module_file(name: str) -> Path | None:
    """The source file of module `name`; None where there is none (`name` is an attribute,
    a built-in module or an unknown one). `suites` modules are found from the package's own
    directory, so looking one up runs no package's `__init__`."""
    if in_package(name):
        base = _PACKAGE_DIR.joinpath(*name.split(".")[1:])
        return next((path for path in (base / "__init__.py", base.with_suffix(".py")) if path.is_file()), None)
    origin = getattr(sys.modules.get(name), "__file__", None) or _spec_origin(name)
    return Path(origin) if origin and origin.endswith(".py") else None


def _spec_origin(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return spec.origin if spec else None


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The module a `from ... import` names, with a relative one resolved against `package`."""
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    if node.level > len(parts):  # beyond the top package: an import that cannot run
        return ""
    head = ".".join(parts[:len(parts) - node.level + 1])
    return f"{head}.{node.module}" if node.module else head


def imported_names(tree: ast.AST, package: str, skip: frozenset[str] = frozenset()) -> Iterator[str]:
    """Every name an import in `tree` may load: the modules named, and for `from m import x`
    also `m.x` (a submodule where one exists; callers drop names that are not modules). Imports
    under `if TYPE_CHECKING:` never run and are left out, and so are those inside a function
    named in `skip` (hooks a workload never calls)."""
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            pending += node.orelse
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in skip:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)
        pending += ast.iter_child_nodes(node)


def loaded_by_path(tree: ast.Module) -> Iterator[str]:
    """Every module of the packages the module's `LOADS_BY_PATH` names."""
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and any(getattr(target, "id", None) == LOADS_BY_PATH
                                                     for target in node.targets)):
            continue
        for leaf in ast.walk(node.value):
            if isinstance(leaf, ast.Constant) and isinstance(leaf.value, str) and in_package(leaf.value):
                directory = _PACKAGE_DIR.joinpath(*leaf.value.split(".")[1:])
                yield from (module_name(path) for path in sorted(directory.rglob("*.py")))


def module_name(path: Path) -> str:
    """The module name of a source file of the `suites` package."""
    return ".".join((PACKAGE, *path.relative_to(_PACKAGE_DIR).with_suffix("").parts)).removesuffix(".__init__")


def source_files(roots: Iterable[str], skip: Callable[[str], frozenset[str]] = lambda name: frozenset()
                 ) -> dict[str, Path]:
    """`roots` and every `suites` module they import, directly or not: {module name: its
    source file}, sorted by name. Roots without a source file are left out, and so is the
    top-level package itself (`from suites import knobs` runs `suites/__init__.py`, whose public
    re-exports are no part of what a case computes). `skip(module)` names the functions of a
    module whose imports are not followed (`imported_names`)."""
    found: dict[str, Path] = {}
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name in found or (path := module_file(name)) is None:
            continue
        found[name] = path
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_bytes(), filename=str(path))
        pending += [imported for imported in (*imported_names(tree, package, skip(name)), *loaded_by_path(tree))
                    if in_package(imported) and imported != PACKAGE]
    return dict(sorted(found.items()))
