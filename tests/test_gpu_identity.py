"""Which physical GPU a CUDA ordinal is (issue 32, N16 and N19): NVML readers find a process's
GPUs by UUID, not by index, and read each GPU once; TF's logical GPUs share the memory of the GPU
TF splits, not of nvidia-smi's first row.

CUDA numbers the GPUs a process sees fastest first (CUDA_DEVICE_ORDER's default) after
CUDA_VISIBLE_DEVICES has picked and reordered them; NVML and nvidia-smi number every GPU of the
machine by PCI bus. The fakes below are a machine of two GPUs where the two orders disagree."""
from __future__ import annotations

import ctypes
from types import SimpleNamespace

import pytest

from suites.hardware import devices
from suites.measure.energy_meters import NvmlMeter, nvml_handles
from suites.measure.telemetry_sampler import GpuSampler

#: NVML's (PCI) order: an A100 40GB first, then an H100 80GB, each with its UUID and energy counter.
PCI_GPUS = [
    {"uuid": "11111111-2222-3333-4444-555555555555", "memory": 40 * 2**30, "energy_mj": 1_000},
    {"uuid": "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "memory": 80 * 2**30, "energy_mj": 5_000},
]
#: CUDA's default order, fastest first: the H100 is CUDA's GPU 0.
FASTEST_FIRST = [PCI_GPUS[1], PCI_GPUS[0]]


class FakeNvml:
    """The part of pynvml the readers call, over `PCI_GPUS` (handles are NVML indices)."""

    def __init__(self) -> None:
        self.energy = {i: gpu["energy_mj"] for i, gpu in enumerate(PCI_GPUS)}

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        for index, gpu in enumerate(PCI_GPUS):
            if uuid == f"GPU-{gpu['uuid']}":
                return index
        raise LookupError(uuid)

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{PCI_GPUS[handle]['uuid']}"

    def nvmlDeviceGetIndex(self, handle: int) -> int:
        return handle

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        return self.energy[handle]

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return 300_000

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        return 1980 if handle == 1 else 1410

    def nvmlDeviceGetMaxClockInfo(self, handle: int, clock: int) -> int:
        return self.nvmlDeviceGetClockInfo(handle, clock)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        return 700_000 if handle == 1 else 400_000

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return 50

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=100)


def uuids(gpus: list[dict]) -> list[str]:
    return [gpu["uuid"] for gpu in gpus]


def test_cuda_gpu_0_is_read_through_its_uuid_not_as_nvmls_gpu_0():
    """No CUDA_VISIBLE_DEVICES, fastest first: CUDA's GPU 0 is NVML's GPU 1."""
    nvml = FakeNvml()
    meter = NvmlMeter([0], nvml=nvml, visible="", uuids=uuids(FASTEST_FIRST))  # type: ignore[arg-type]
    assert meter.reason == ""
    meter.start()
    nvml.energy[1] += 2_000
    (reading,) = meter.stop()
    assert (reading.device, reading.joules) == (1, 2.0)


def test_cuda_visible_devices_indices_are_cudas_not_nvmls():
    """CUDA_VISIBLE_DEVICES=1 names CUDA's GPU 1 (fastest first: the A100, NVML's GPU 0); read as
    NVML's numbering it would have been the H100."""
    handles, problems = nvml_handles(FakeNvml(), [0], "1", uuids(FASTEST_FIRST[1:]))  # type: ignore[arg-type]
    assert handles == [(0, 0)] and problems == []


def test_ordinals_of_one_gpu_are_read_once():
    """Two ordinals naming one GPU (by UUID) get one reader: its energy is not counted twice."""
    same = uuids(PCI_GPUS[:1]) * 2
    handles, problems = nvml_handles(FakeNvml(), [0, 1], None, same)  # type: ignore[arg-type]
    assert handles == [(0, 0)] and problems == []
    meter = NvmlMeter([0, 1], nvml=FakeNvml(), uuids=same)  # type: ignore[arg-type]
    meter.start()
    assert [reading.device for reading in meter.stop()] == [0]


def test_a_gpu_nvml_does_not_know_is_not_guessed_by_index():
    handles, problems = nvml_handles(FakeNvml(), [0], None, ["00000000-0000-0000-0000-000000000000"])  # type: ignore[arg-type]
    assert handles == [] and problems == ["GPU 0 (00000000-0000-0000-0000-000000000000): no NVML handle (LookupError)"]


def test_a_mig_instance_is_found_by_its_mig_uuid():
    class MigNvml(FakeNvml):
        def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
            if uuid == "MIG-" + PCI_GPUS[1]["uuid"]:
                return 1
            raise LookupError(uuid)

    handles, _ = nvml_handles(MigNvml(), [0], None, uuids(PCI_GPUS[1:]))  # type: ignore[arg-type]
    assert handles == [(0, 1)]


def test_the_telemetry_sampler_samples_the_gpu_cuda_names():
    sampler = GpuSampler([0], nvml=FakeNvml(), interval_s=3600, visible="", uuids=uuids(FASTEST_FIRST))  # type: ignore[arg-type]
    sampler.start()
    (gpu,) = sampler.stop()
    assert gpu.device == 0 and gpu.power_limit_w == 700.0 and gpu.max_sm_clock_mhz == 1980.0


# --- the CUDA driver: UUIDs and memory by CUDA ordinal ------------------------------------------
class FakeDriver:
    """libcuda's calls parbench makes, for a process that sees `gpus` (CUDA's order, after
    CUDA_VISIBLE_DEVICES): device handles are 100 + ordinal."""

    def __init__(self, gpus: list[dict]) -> None:
        self.gpus = gpus

    def cuInit(self, flags: int) -> int:
        return 0

    def cuDeviceGetCount(self, count) -> int:
        count._obj.value = len(self.gpus)
        return 0

    def cuDeviceGet(self, device, ordinal: int) -> int:
        device._obj.value = 100 + ordinal
        return 0

    def cuDeviceGetUuid_v2(self, uuid, device: ctypes.c_int) -> int:
        uuid._obj[:] = bytes.fromhex(self.gpus[device.value - 100]["uuid"].replace("-", ""))
        return 0

    def cuDeviceTotalMem_v2(self, total, device: ctypes.c_int) -> int:
        total._obj.value = self.gpus[device.value - 100]["memory"]
        return 0


@pytest.fixture
def driver(monkeypatch):
    def install(gpus: list[dict]) -> None:
        monkeypatch.setattr(devices.ctypes, "CDLL", lambda library: FakeDriver(gpus))
    return install


def test_the_cuda_driver_gives_each_ordinals_uuid_and_memory(driver):
    driver(FASTEST_FIRST)
    assert devices.cuda_device_uuids() == uuids(FASTEST_FIRST)
    assert devices.cuda_total_memory_bytes(0) == 80 * 2**30 and devices.cuda_total_memory_bytes(2) is None


def test_without_a_cuda_driver_there_are_no_uuids():
    assert devices.cuda_device_uuids("libcuda-that-is-not-here.so.1") is None
    assert devices.cuda_total_memory_bytes(0, "libcuda-that-is-not-here.so.1") is None


def test_the_real_nvml_is_tied_to_cuda_through_the_drivers_uuids(driver):
    """Without `uuids`, a meter over the real NVML (`nvml` not given) asks the CUDA driver."""
    from suites.measure.energy_meters import cuda_uuids

    driver(FASTEST_FIRST)
    assert cuda_uuids(None, None) == uuids(FASTEST_FIRST)
    assert cuda_uuids(FakeNvml(), None) is None  # type: ignore[arg-type]  # a fake NVML: its test says


# --- TF's logical GPUs: the memory of the GPU split -------------------------------------------
def test_logical_gpus_share_the_memory_of_the_gpu_tf_splits_not_nvidia_smis_first(driver, monkeypatch):
    """CUDA_VISIBLE_DEVICES=1 on the PCI-ordered machine: TF splits the H100 (80 GB), while
    nvidia-smi's first row is the A100 (40 GB)."""
    tf = pytest.importorskip("tensorflow")
    from suites.frameworks.tf import distribute

    driver([PCI_GPUS[1]])
    monkeypatch.setattr("suites.records.provenance.nvidia_smi",
                        lambda: [{"memory": "40960 MiB"}, {"memory": "81920 MiB"}])
    split = []
    monkeypatch.setattr(tf.config, "set_logical_device_configuration",
                        lambda device, configs: split.append([c.memory_limit for c in configs]))
    gpu = tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
    distribute._split_gpu(gpu, 2)
    assert split == [[int(81920 * distribute.LOGICAL_GPUS_MEMORY_SHARE / 2)] * 2]
