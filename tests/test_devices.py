"""Device discovery: reasons for every missing kind, a TPU probe that cannot hang, lazy imports."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import DeviceKind, Framework
from suites.hardware import devices
from suites.runner.plan import plan, unavailable_reason


def test_tpu_is_unavailable_quickly_with_a_reason(monkeypatch):
    pytest.importorskip("tensorflow")  # TF's TPU probe: without TF the reason is that TF is missing
    for var in ("TPU_NAME", "COLAB_TPU_ADDR"):
        monkeypatch.delenv(var, raising=False)
    devices.discover.cache_clear()
    start = time.monotonic()
    info = devices.discover(Framework.TF, DeviceKind.TPU)
    assert time.monotonic() - start < 5
    assert info.count == 0 and "no TPU runtime" in info.reason
    devices.discover.cache_clear()


def test_tpu_address_that_is_not_there_cannot_hang_the_probe(monkeypatch):
    """With TPU_NAME pointing nowhere the probe runs in a subprocess bounded by a timeout."""
    pytest.importorskip("tensorflow")  # TF's TPU probe: without TF the reason is that TF is missing
    monkeypatch.setenv("TPU_NAME", "grpc://127.0.0.1:1")
    monkeypatch.setattr("suites.frameworks.tf.TPU_PROBE_TIMEOUT_S", 8.0)
    devices.discover.cache_clear()
    start = time.monotonic()
    info = devices.discover(Framework.TF, DeviceKind.TPU)
    devices.discover.cache_clear()
    assert time.monotonic() - start < 8 + 5
    assert info.count == 0 and "TPU_NAME" in info.reason


def test_framework_not_installed_is_a_reason(monkeypatch):
    monkeypatch.setattr(devices, "framework_installed", lambda framework: framework is not Framework.TF)
    monkeypatch.setattr("suites.runner.plan.framework_installed",
                        lambda framework: framework is not Framework.TF)
    reason = unavailable_reason(plan(Case.make("matmul", "tf", "cpu", params={"m": 1, "n": 1, "k": 1})))
    assert reason == "tensorflow is not installed"


def test_tf32_needs_a_gpu():
    reason = unavailable_reason(plan(Case.make("matmul", "torch", "cpu", precision="tf32",
                                          params={"m": 1, "n": 1, "k": 1})))
    assert reason and "tf32" in reason


def test_neutral_code_imports_no_framework():
    code = ("import sys, suites, suites.grids.grid, suites.frontends.cli, suites.runner.runner, "
            "suites.records.store, suites.workloads;"
            "suites.frontends.cli.build_parser(); suites.grids.grid.load_suite('training');"
            "from suites.workloads import WORKLOADS; from suites.strategies.versions import version_of; "
            "[version_of(w) for w in WORKLOADS.values()];"
            "print([m for m in ('torch', 'tensorflow') if m in sys.modules])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
