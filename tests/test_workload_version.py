"""`Workload.version()` (asv's benchmark version) covers every parbench module a workload uses."""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from suites.workloads import WORKLOADS
from suites.workloads.sources import imported_names

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "suites"

#: Prints {workload: version}, the `suites` it read and the frameworks it imported, as JSON.
VERSIONS_SCRIPT = """
import json, sys
import suites
from suites.workloads import WORKLOADS
versions = {name: workload.version() for name, workload in WORKLOADS.items()}
frameworks = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "tensorflow"))
print(json.dumps({"versions": versions, "package": suites.__file__, "frameworks": frameworks}))
"""


def fresh_versions(package_parent: Path) -> dict:
    """What VERSIONS_SCRIPT prints in a fresh interpreter importing `suites` from `package_parent`."""
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    done = subprocess.run([sys.executable, "-c", VERSIONS_SCRIPT], cwd=package_parent, env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    result = json.loads(done.stdout)
    assert Path(result["package"]).resolve().parent == (package_parent / "suites").resolve()
    return result


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    """A copy of the `suites` package under tmp_path (returned: its parent directory)."""
    shutil.copytree(PACKAGE_DIR, tmp_path / "suites", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_editing_a_model_changes_train_step_version_and_not_matmul(package_copy):
    before = fresh_versions(package_copy)
    with open(package_copy / "suites" / "frameworks" / "torch" / "models.py", "a") as source:
        source.write("\n# an edit\n")
    after = fresh_versions(package_copy)
    assert after["versions"]["train_step"] != before["versions"]["train_step"]
    assert after["versions"]["matmul"] == before["versions"]["matmul"]
    assert before["frameworks"] == after["frameworks"] == []


def test_editing_a_model_folder_changes_train_step_version_and_not_matmul(package_copy):
    """A built-in model's implementation is imported by the path its spec names, no import
    statement: the framework module that looks it up declares the package (`LOADS_BY_PATH`)."""
    before = fresh_versions(package_copy)
    with open(package_copy / "suites" / "models" / "resnet" / "torch_model.py", "a") as source:
        source.write("\n# an edit\n")
    after = fresh_versions(package_copy)
    assert after["versions"]["train_step"] != before["versions"]["train_step"]
    assert after["versions"]["matmul"] == before["versions"]["matmul"]


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_version_reads_parbench_modules_only(name):
    modules = WORKLOADS[name].source_files()
    assert modules and all(module.startswith("suites.") for module in modules)
    assert list(modules) == sorted(modules)


def test_version_follows_imports_of_implementations_transitively():
    train_step = WORKLOADS["train_step"].source_files()
    assert {"suites.frameworks.torch.training", "suites.frameworks.torch.models",
            "suites.frameworks.tf.models", "suites.frameworks.tf.trainers"} <= set(train_step)
    assert "suites.frameworks.torch.models" not in WORKLOADS["matmul"].source_files()


def test_imported_names_resolve_relative_and_lazy_imports():
    tree = ast.parse("from .. import case\nfrom .base import Param\n"
                     "def f():\n    import suites.run.timing\n    from ...x import y\n")
    names = set(imported_names(tree, "suites.workloads"))
    assert {"suites", "suites.case", "suites.workloads.base", "suites.workloads.base.Param",
            "suites.run.timing"} <= names
    assert not any(name.endswith("x.y") for name in names)  # beyond the top package: dropped
