"""TPU host readiness (issue 32, items 11, 12 and 23), without a TPU: the accelerator type from
the GCE metadata server, the TPU cores' own peak memory, and the environment that keeps libtpu
out of the parbench process and gives it to the TPU processes.

No test touches the network: the metadata server's opener is a fake, and one that fails the
test wherever the read must not even be tried. TensorFlow is imported inside the tests that
need it (its memory statistics are monkeypatched on the real module).
"""
from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import DeviceKind, Framework, Precision
from suites.frameworks.tf import DESCRIPTOR as TF_DESCRIPTOR
from suites.frameworks.tf import environment
from suites.hardware import devices
from suites.hardware.peaks import PeakTable
from suites.records import provenance
from suites.records.peak_memory import MemoryPeak
from suites.measure.memory_probes import ResidentMemoryProbe
from suites.strategies.jobs import job_for
from tests.test_memory import gathered_by_every_rank

REPO = Path(__file__).resolve().parent.parent
MiB = 2**20
TPU_CASE = Case.make("train_step", "tf", "tpu", "tpu", "bf16", 4, {"model": "mlp", "batch": 32})
LIBTPU = "/lib/libtpu.so"
#: Every variable the libtpu environment reads or writes: cleared for each test, restored after.
LIBTPU_VARIABLES = (*environment.DEFAULTS, environment.PLUGGABLE_DEVICE_LIBRARY,
                    environment.HELD_PLUGGABLE_DEVICE_LIBRARY)


# --- item 11: the accelerator type --------------------------------------------------------------
class FakeResponse:
    """What `OpenerDirector.open` returns: a context manager with `read`."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def __enter__(self) -> "FakeResponse":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def read(self, limit: int = -1) -> bytes:
        return self.body


class FakeOpener:
    """Stands for `urllib.request.build_opener(...)`: records the handlers it was built with and
    each request with its timeout, and answers with `answer` (bytes, or an exception to raise)."""

    def __init__(self, answer: bytes | BaseException) -> None:
        self.answer = answer
        self.handlers: list[Any] = []
        self.opened: list[tuple[urllib.request.Request, float | None]] = []

    def build(self, *handlers: Any) -> "FakeOpener":
        self.handlers.extend(handlers)
        return self

    def open(self, request: urllib.request.Request, timeout: float | None = None) -> FakeResponse:
        self.opened.append((request, timeout))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return FakeResponse(self.answer)


@pytest.fixture
def no_accelerator_variables(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Neither variable set, and the metadata read not cached from another test."""
    for name in devices.TPU_ACCELERATOR_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    devices.metadata_accelerator_type.cache_clear()
    yield
    devices.metadata_accelerator_type.cache_clear()


def network_forbidden(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything builds an opener or opens a socket."""
    def refuse(*args: object, **kwargs: object) -> None:
        pytest.fail("the metadata server was asked without evidence of a TPU VM")

    monkeypatch.setattr(devices.urllib.request, "build_opener", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def tpu_vm(monkeypatch: pytest.MonkeyPatch, files: list[str]) -> None:
    """This host's TPU device files, as `tpu_device_files` finds them (both modules' names)."""
    monkeypatch.setattr(devices, "tpu_device_files", lambda: list(files))
    monkeypatch.setattr("suites.frameworks.tf.tpu_device_files", lambda: list(files))


def metadata_server(monkeypatch: pytest.MonkeyPatch, answer: bytes | BaseException) -> FakeOpener:
    opener = FakeOpener(answer)
    monkeypatch.setattr(devices.urllib.request, "build_opener", opener.build)
    return opener


def test_the_environment_names_the_type_and_nothing_is_asked(monkeypatch, no_accelerator_variables):
    network_forbidden(monkeypatch)
    tpu_vm(monkeypatch, ["/dev/vfio/0"])
    monkeypatch.setenv("ACCELERATOR_TYPE", "v6e-8")
    assert devices.tpu_accelerator() == ("v6e-8", "ACCELERATOR_TYPE")
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", " v5litepod-8 ")
    assert devices.tpu_accelerator() == ("v5litepod-8", "TPU_ACCELERATOR_TYPE")


@pytest.mark.parametrize("tpu_name", [None, "grpc://10.0.0.2:8470"])
def test_without_a_tpu_vm_the_metadata_server_is_never_asked(monkeypatch, no_accelerator_variables, tpu_name):
    """No device file: no read, whatever else is set (a TPU_NAME names a TPU on another host,
    whose type this host's metadata does not hold, if this host has a metadata server at all)."""
    network_forbidden(monkeypatch)
    tpu_vm(monkeypatch, [])
    if tpu_name:
        monkeypatch.setenv("TPU_NAME", tpu_name)
    else:
        monkeypatch.delenv("TPU_NAME", raising=False)
    assert devices.tpu_accelerator() == (None, "")
    assert devices.tpu_accelerator_type() is None


def test_on_a_tpu_vm_the_type_is_read_once_from_the_metadata_server(monkeypatch, no_accelerator_variables):
    tpu_vm(monkeypatch, ["/dev/vfio/0"])
    opener = metadata_server(monkeypatch, b"v5litepod-8\n")
    assert devices.tpu_accelerator() == ("v5litepod-8", devices.METADATA_SOURCE)
    assert devices.tpu_accelerator_type() == "v5litepod-8"
    (request, timeout), = opener.opened  # cached: asked once per process
    assert request.full_url == devices.TPU_METADATA_URL
    assert request.get_header("Metadata-flavor") == "Google"
    assert timeout == devices.TPU_METADATA_TIMEOUT_S
    (proxies,) = [handler for handler in opener.handlers if isinstance(handler, urllib.request.ProxyHandler)]
    assert proxies.proxies == {}  # never through a proxy from the environment


@pytest.mark.parametrize("failure", [
    urllib.error.URLError("[Errno -2] Name or service not known"),
    socket.timeout("timed out"),
    ConnectionRefusedError(111, "Connection refused"),
    urllib.error.HTTPError(devices.TPU_METADATA_URL, 404, "Not Found", None, None),
    b"  \n",
])
def test_any_failure_of_the_read_is_no_type_and_is_not_retried(monkeypatch, no_accelerator_variables, failure):
    tpu_vm(monkeypatch, ["/dev/accel0"])
    opener = metadata_server(monkeypatch, failure)
    assert devices.tpu_accelerator() == (None, "")
    assert devices.tpu_accelerator() == (None, "")
    assert len(opener.opened) == 1


def probe_that_sees(count: int, calls: list[dict[str, str]]) -> Callable[..., subprocess.CompletedProcess]:
    """A stand-in for the TPU probe's subprocess: records its environment, prints `count`."""
    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
        calls.append(kwargs.get("env") or {})
        return subprocess.CompletedProcess(command, 0, stdout=f"{count}\n", stderr="")
    return run


def test_the_metadata_type_names_the_tpu_its_peak_and_its_provenance(monkeypatch, no_accelerator_variables):
    tpu_vm(monkeypatch, ["/dev/vfio/0"])
    metadata_server(monkeypatch, b"v5litepod-4")
    monkeypatch.setattr("suites.frameworks.tf.tpu_runtime_evidence", lambda: "a TPU device file exists")
    monkeypatch.setattr("suites.frameworks.tf.subprocess.run", probe_that_sees(4, []))
    info = TF_DESCRIPTOR.tpus()
    assert info.names == ("TPU v5litepod-4",) * 4
    assert info.details == {"accelerator_type": "v5litepod-4", "accelerator_type_source": devices.METADATA_SOURCE}
    assert PeakTable.load().lookup(info, Precision.BF16).tflops == 197.0  # v5e's bf16 peak per chip
    monkeypatch.setitem(devices._FOUND, (Framework.TF, DeviceKind.TPU), info)  # what `discover` keeps
    recorded = provenance.discovered_accelerators()["tf/tpu"]
    assert (recorded["accelerator_type"], recorded["accelerator_type_source"]) == ("v5litepod-4",
                                                                                    devices.METADATA_SOURCE)


def test_a_tpu_without_a_type_says_why_it_has_no_peak(monkeypatch, no_accelerator_variables):
    tpu_vm(monkeypatch, ["/dev/vfio/0"])
    metadata_server(monkeypatch, urllib.error.URLError("refused"))
    monkeypatch.setattr("suites.frameworks.tf.tpu_runtime_evidence", lambda: "a TPU device file exists")
    monkeypatch.setattr("suites.frameworks.tf.subprocess.run", probe_that_sees(8, []))
    info = TF_DESCRIPTOR.tpus()
    assert info.names == tuple(f"TPU:{i}" for i in range(8))
    assert info.details == {"accelerator_type_reason": devices.NO_ACCELERATOR_TYPE}


# --- item 12: the TPU cores' own peak memory ----------------------------------------------------
class FakeStatistics:
    """`tf.config.experimental`'s reset_memory_stats / get_memory_info over scripted TPU cores:
    bytes in use now and at the peak per device name ("TPU:0"); `broken`: raise as TF does for
    a device whose statistics it does not track."""

    def __init__(self, current: dict[str, int], peak: dict[str, int], broken: str = "") -> None:
        self.current, self.peak, self.broken = current, peak, broken
        self.resets: list[str] = []

    def reset_memory_stats(self, device: str) -> None:
        if self.broken == "reset":
            raise ValueError(f"Memory statistics not tracked for device {device}")
        self.resets.append(device)

    def get_memory_info(self, device: str) -> dict[str, int]:
        if self.broken == "read" or device not in self.peak:
            raise ValueError(f"Memory statistics not tracked for device {device}")
        return {"current": self.current[device], "peak": self.peak[device]}


def fake_statistics(monkeypatch: pytest.MonkeyPatch, statistics: FakeStatistics) -> Any:
    """The TF memory-probe module with `statistics` in place of TF's (on the real module)."""
    tf = pytest.importorskip("tensorflow")
    from suites.frameworks.tf import memory_probe as tf_memory

    monkeypatch.setattr(tf.config.experimental, "reset_memory_stats", statistics.reset_memory_stats)
    monkeypatch.setattr(tf.config.experimental, "get_memory_info", statistics.get_memory_info)
    return tf_memory


CORES = [f"/TPU:{i}" for i in range(4)]


def four_cores(broken: str = "") -> FakeStatistics:
    return FakeStatistics({f"TPU:{i}": (i + 1) * MiB for i in range(4)},
                          {f"TPU:{i}": (i + 1) * 512 * MiB for i in range(4)}, broken)


def test_a_tpu_case_measures_each_core_it_uses():
    pytest.importorskip("tensorflow")
    from suites.frameworks.tf.distribute import local_gpus, local_tpus, replica_devices

    job = job_for(TPU_CASE)
    assert local_tpus(job) == CORES
    assert replica_devices(job) == ["/CPU:0"]  # what the probe was given before: the host's resident set
    assert local_gpus(job) == []
    cpu_job = job_for(Case.make("train_step", "tf", "cpu", params={"model": "mlp", "batch": 8}))
    assert local_tpus(cpu_job) == []


def test_each_tpu_core_reports_its_own_peak_with_kind_tpu(monkeypatch):
    statistics = four_cores()
    tf_memory = fake_statistics(monkeypatch, statistics)
    details: dict[str, Any] = {}
    baseline = tf_memory.Baseline(rss_bytes=900 * MiB).with_tpus(CORES)
    assert baseline.tpu_bytes == {core: (i + 1) * MiB for i, core in enumerate(CORES)}
    probe = tf_memory.memory_probe(CORES, baseline, details)
    assert isinstance(probe, tf_memory.TfTpuMemoryProbe)
    probe.start()
    assert statistics.resets == ["TPU:0", "TPU:1", "TPU:2", "TPU:3"]
    assert probe.stop() == [MemoryPeak("tpu", i, (i + 1) * 512 * MiB, None, (i + 1) * MiB) for i in range(4)]
    assert details == {}


@pytest.mark.parametrize("broken, call", [("read", "get_memory_info('TPU:0')"),
                                          ("reset", "reset_memory_stats('TPU:0')")])
def test_unreadable_tpu_statistics_are_an_unknown_peak_not_the_hosts_memory(monkeypatch, broken, call):
    tf_memory = fake_statistics(monkeypatch, four_cores(broken))
    details: dict[str, Any] = {}
    baseline = tf_memory.Baseline(rss_bytes=900 * MiB).with_tpus(CORES)
    if broken == "read":
        assert baseline.tpu_bytes == {}  # no baseline where nothing can be read
    probe = tf_memory.memory_probe(CORES, baseline, details)
    assert not isinstance(probe, ResidentMemoryProbe)
    probe.start()
    assert probe.stop() == []
    assert call in details["memory_not_measured"]
    assert "its peak is unknown" in details["memory_not_measured"]


def test_a_core_without_statistics_leaves_the_case_without_a_peak(monkeypatch):
    """One core TF does not track among four: no partial figure that would pass for the case's."""
    statistics = four_cores()
    del statistics.peak["TPU:3"]
    tf_memory = fake_statistics(monkeypatch, statistics)
    details: dict[str, Any] = {}
    probe = tf_memory.memory_probe(CORES, tf_memory.Baseline(rss_bytes=None), details)
    probe.start()
    assert probe.stop() == []
    assert "get_memory_info('TPU:3')" in details["memory_not_measured"]


def test_tpu_peaks_survive_gathering_and_the_record():
    own = {0: [MemoryPeak("tpu", 0, 3 * 2**30, None, MiB)], 1: [MemoryPeak("tpu", 1, 2 * 2**30, None, None)]}
    results = gathered_by_every_rank(own)
    assert results[0] == (MemoryPeak("tpu", 0, 3 * 2**30, None, MiB, rank=0),
                          MemoryPeak("tpu", 1, 2 * 2**30, None, None, rank=1))
    assert [MemoryPeak.from_dict(peak.to_dict()) for peak in results[0]] == list(results[0])


# --- item 23: libtpu stays out of the parbench process ------------------------------------------
@pytest.fixture
def bare_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """None of `LIBTPU_VARIABLES` set; each restored after the test, whatever the test set."""
    for name in LIBTPU_VARIABLES:
        monkeypatch.setenv(name, "placeholder")  # recorded first, so the test's own settings are undone
        monkeypatch.delenv(name)


def test_the_parbench_process_keeps_libtpu_out_on_both_of_tfs_routes(monkeypatch, bare_environment):
    """TPU_LOAD_LIBRARY=0 (the tensorflow-tpu loader's switch), and no TF_PLUGGABLE_DEVICE_LIBRARY_PATH
    naming libtpu (which TF loads at import, TPU_LOAD_LIBRARY or not): the path is held for the
    TPU processes, which get it back with TPU_LOAD_LIBRARY=1."""
    monkeypatch.setenv(environment.PLUGGABLE_DEVICE_LIBRARY, LIBTPU)
    environment.apply_defaults()
    assert os.environ["TPU_LOAD_LIBRARY"] == "0"
    assert environment.PLUGGABLE_DEVICE_LIBRARY not in os.environ
    assert os.environ[environment.HELD_PLUGGABLE_DEVICE_LIBRARY] == LIBTPU
    assert environment.tpu_process_env() == {"TPU_LOAD_LIBRARY": "1", environment.PLUGGABLE_DEVICE_LIBRARY: LIBTPU}


def test_without_a_libtpu_plugin_the_tpu_processes_get_only_tpu_load_library(bare_environment):
    environment.apply_defaults()
    assert os.environ["TPU_LOAD_LIBRARY"] == "0"
    assert environment.tpu_process_env() == {"TPU_LOAD_LIBRARY": "1"}


def test_a_tpu_process_keeps_its_libtpu_plugin(monkeypatch, bare_environment):
    monkeypatch.setenv("TPU_LOAD_LIBRARY", "1")
    monkeypatch.setenv(environment.PLUGGABLE_DEVICE_LIBRARY, LIBTPU)
    environment.apply_defaults()
    assert os.environ[environment.PLUGGABLE_DEVICE_LIBRARY] == LIBTPU
    assert environment.HELD_PLUGGABLE_DEVICE_LIBRARY not in os.environ


def test_another_pluggable_device_stays_and_a_folder_holding_libtpu_is_held(monkeypatch, bare_environment, tmp_path):
    monkeypatch.setenv(environment.PLUGGABLE_DEVICE_LIBRARY, "/opt/plugins/libitex_xpu.so")
    environment.apply_defaults()
    assert os.environ[environment.PLUGGABLE_DEVICE_LIBRARY] == "/opt/plugins/libitex_xpu.so"
    (tmp_path / "libtpu.so").write_bytes(b"")
    monkeypatch.setenv(environment.PLUGGABLE_DEVICE_LIBRARY, str(tmp_path))
    environment.apply_defaults()
    assert os.environ[environment.HELD_PLUGGABLE_DEVICE_LIBRARY] == str(tmp_path)


def test_the_tpu_probe_and_the_tpu_worker_get_libtpu_back(monkeypatch, bare_environment):
    from suites.strategies.tf.tpu import PLUGIN as TPU_PLUGIN

    monkeypatch.setenv(environment.PLUGGABLE_DEVICE_LIBRARY, LIBTPU)
    environment.apply_defaults()  # as the parbench process does when TF loads
    tpu_vm(monkeypatch, ["/dev/vfio/0"])
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5litepod-4")
    monkeypatch.setattr("suites.frameworks.tf.tpu_runtime_evidence", lambda: "a TPU device file exists")
    calls: list[dict[str, str]] = []
    monkeypatch.setattr("suites.frameworks.tf.subprocess.run", probe_that_sees(4, calls))
    assert TF_DESCRIPTOR.tpus().count == 4
    (probe_env,) = calls
    assert (probe_env["TPU_LOAD_LIBRARY"], probe_env[environment.PLUGGABLE_DEVICE_LIBRARY]) == ("1", LIBTPU)
    assert TPU_PLUGIN.isolated_env(job_for(TPU_CASE)) == {"TPU_LOAD_LIBRARY": "1",
                                                           environment.PLUGGABLE_DEVICE_LIBRARY: LIBTPU}


def test_the_installed_tensorflow_loads_a_pluggable_device_at_import():
    """Pins route 3 of `suites.frameworks.tf.environment`'s notes: TF (2.21:
    tensorflow/__init__.py:443-446) loads TF_PLUGGABLE_DEVICE_LIBRARY_PATH when it is imported,
    and reads TPU_LOAD_LIBRARY nowhere in its Python. Read, not imported."""
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or spec.origin is None:
        pytest.skip("tensorflow is not installed")
    source = Path(spec.origin).read_text()
    assert 'load_pluggable_device_library(\n      _os.getenv("TF_PLUGGABLE_DEVICE_LIBRARY_PATH")' in source
    assert "TPU_LOAD_LIBRARY" not in source


def test_tensorflow_imported_through_parbench_does_not_load_a_held_libtpu():
    """A TF_PLUGGABLE_DEVICE_LIBRARY_PATH that does not exist makes a bare `import tensorflow`
    fail (TF loads it at import); through parbench's backend TF imports, and the path waits for
    the TPU processes."""
    pytest.importorskip("tensorflow")
    env = {**{k: v for k, v in os.environ.items() if k not in LIBTPU_VARIABLES},
           "TF_CPP_MIN_LOG_LEVEL": "3", environment.PLUGGABLE_DEVICE_LIBRARY: "/nonexistent/libtpu.so"}
    code = ("import os; from suites.frameworks.tf import backend; import tensorflow; "
            "from suites.frameworks.tf.environment import tpu_process_env; "
            "print(os.environ.get('TPU_LOAD_LIBRARY'), tpu_process_env())")
    held = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=300)
    assert held.returncode == 0, held.stderr
    assert held.stdout.strip().splitlines()[-1] == "0 " + str(
        {"TPU_LOAD_LIBRARY": "1", environment.PLUGGABLE_DEVICE_LIBRARY: "/nonexistent/libtpu.so"})
