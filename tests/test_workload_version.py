"""`version_of(workload)` (asv's benchmark version) covers exactly the parbench code a workload's cases run."""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from suites.strategies.versions import version_sources
from suites.workloads import WORKLOADS
from suites.workloads.sources import imported_names

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "suites"

#: Prints {workload: version}, the `suites` it read and the frameworks it imported, as JSON.
VERSIONS_SCRIPT = """
import json, sys
import suites
from suites.strategies.versions import version_of
from suites.workloads import WORKLOADS
versions = {name: version_of(workload) for name, workload in WORKLOADS.items()}
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


def _edit(package: Path, module: str) -> None:
    with open(package / "suites" / module, "a") as source:
        source.write("\n# an edit\n")


def test_editing_a_training_strategy_plugin_changes_train_step_version_only(package_copy):
    """torch's ddp plugin applies to training steps and allreduce, not to kernels."""
    before = fresh_versions(package_copy)
    _edit(package_copy, "strategies/torch/ddp.py")
    after = fresh_versions(package_copy)
    assert after["versions"]["train_step"] != before["versions"]["train_step"]
    assert after["versions"]["allreduce"] != before["versions"]["allreduce"]
    assert after["versions"]["matmul"] == before["versions"]["matmul"]
    assert after["versions"]["conv2d"] == before["versions"]["conv2d"]


@pytest.mark.parametrize("module", ["strategies/tf/model_parallel/staged.py", "strategies/tf/towers/trainer.py",
                                    "strategies/tf/parameter_server/trainer.py"])
def test_editing_a_strategy_mechanism_changes_train_step_version_and_not_matmul(package_copy, module):
    """A TF strategy's mechanism lives in its plugin's package, imported by its hooks only."""
    before = fresh_versions(package_copy)
    _edit(package_copy, module)
    after = fresh_versions(package_copy)
    assert after["versions"]["train_step"] != before["versions"]["train_step"]
    assert after["versions"]["matmul"] == before["versions"]["matmul"]


@pytest.mark.parametrize("module", ["models/resnet/spec.py", "models/resnet/torch_model.py",
                                    "models/resnet/tf_model.py"])
def test_editing_the_resnet_model_changes_train_step_version_only(package_copy, module):
    """A built-in model's implementation is imported by the path its spec names, no import
    statement: the framework module that looks it up declares the package (`LOADS_BY_PATH`)."""
    before = fresh_versions(package_copy)
    _edit(package_copy, module)
    after = fresh_versions(package_copy)
    assert after["versions"]["train_step"] != before["versions"]["train_step"]
    assert {name: after["versions"][name] for name in ("matmul", "conv2d", "allreduce")} == \
        {name: before["versions"][name] for name in ("matmul", "conv2d", "allreduce")}


def test_a_plugins_training_hooks_are_no_part_of_a_kernels_version():
    """TF `single` builds a training step's trainer in its `trainer` hook; a matmul never calls it."""
    assert "suites.strategies.tf.single" in version_sources(WORKLOADS["matmul"])
    assert "suites.frameworks.tf.trainers" not in version_sources(WORKLOADS["matmul"])
    assert "suites.frameworks.tf.trainers" in version_sources(WORKLOADS["train_step"])


def test_imports_under_type_checking_and_in_skipped_functions_are_not_followed():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import suites.a\n"
                     "def trainer():\n    import suites.b\ndef other():\n    import suites.c\n")
    names = set(imported_names(tree, "suites", frozenset({"trainer"})))
    assert "suites.c" in names and not names & {"suites.a", "suites.b"}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_version_reads_parbench_modules_only(name):
    modules = version_sources(WORKLOADS[name])
    assert modules and all(module.startswith("suites.") for module in modules)
    assert list(modules) == sorted(modules)


def test_version_follows_imports_of_implementations_transitively():
    train_step = version_sources(WORKLOADS["train_step"])
    assert {"suites.frameworks.torch.training", "suites.frameworks.torch.models",
            "suites.frameworks.tf.models", "suites.frameworks.tf.trainers"} <= set(train_step)
    assert "suites.frameworks.torch.models" not in version_sources(WORKLOADS["matmul"])


def test_imported_names_resolve_relative_and_lazy_imports():
    tree = ast.parse("from .. import case\nfrom .base import Param\n"
                     "def f():\n    import suites.measure.timing\n    from ...x import y\n")
    names = set(imported_names(tree, "suites.workloads"))
    assert {"suites", "suites.case", "suites.workloads.base", "suites.workloads.base.Param",
            "suites.measure.timing"} <= names
    assert not any(name.endswith("x.y") for name in names)  # beyond the top package: dropped
