"""The record's schema: version 3 writes every field (its work fingerprint too) and reads back
whole; version-2 and version-1 records still read, and keep their version when written again; an
unknown version is refused by name; the writer writes exactly the declared fields; and
`Environment` declares exactly the provenance the code builds (and the sample records hold), with the types it holds."""
from __future__ import annotations

import json
import types
import warnings
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints, is_typeddict

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.records import provenance
from suites.records.bound_by import BoundBy
from suites.records.check import Check
from suites.records.contention import Contention
from suites.records.environment_schema import ADDED_PER_RECORD, Cpu, Environment, Git, Gpu, GpuTopology
from suites.records.measurement import Measurement
from suites.records.record import FIELDS, READS, SCHEMA_VERSION, Record
from suites.records.store import ResultsStore, load_records

SAMPLES = Path("/work/shared/sample-records")
H100_LINE = SAMPLES / "h100-2026-11-24" / "r1-gpu.jsonl"


def full_record() -> Record:
    """A record with every part filled in."""
    case = Case.make("matmul", "torch", "cpu", params={"m": 64, "n": 64, "k": 64})
    return Record(case=case, status=Status.OK, run_id="r2", timestamp="2026-12-01T00:00:00+00:00", suite="t",
                  environment={**provenance.environment("box"), "threads": {"torch": 2}},
                  reason="", emulated=True,
                  measurement=Measurement(samples=(1e-3, 1.1e-3, 0.9e-3, 1e-3), block_size=4, timed_s=0.02),
                  metrics={"tflops": 1.0, "mfu_pct": None}, check=Check(True, "max_rel_err", 1e-7, 1e-4, "", 0.5, 10),
                  details={"cpus_pinned": [0, 1]},
                  contention=Contention(0.5, 0.6, 0.0, 2, False, "", 0.01, 0.9),
                  bound_by=BoundBy("unknown", "no roofline", {"tflops": 1.0}),
                  work={"version": 1, "fingerprint": "0123456789abcdef", "parts": {"workload": "matmul definition 1"}})


def minimal_record() -> Record:
    case = Case.make("matmul", "torch", "cpu", params={"m": 8, "n": 8, "k": 8})
    return Record(case=case, status=Status.UNAVAILABLE, run_id="r2", timestamp="2026-12-01T00:00:00+00:00",
                  suite="t", environment={"machine": "box"}, reason="no such device")


def through_json(data: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(data, allow_nan=True))


def version_1_line() -> dict[str, Any]:
    """A version-1 line as parbench wrote it before the contention and bound_by fields: a real
    one from the H100 sample records where they are here, else one built alike."""
    if H100_LINE.exists():
        return json.loads(H100_LINE.read_text().splitlines()[0])
    data = full_record().to_dict()
    data["schema"] = 1
    for name in ("contention", "bound_by"):
        del data[name]
    for name in ("memory", "memory_breakdown", "energy", "telemetry", "cpu"):
        del data["measurement"][name]
    return through_json(data)


# --- versions -----------------------------------------------------------------------------------

def test_the_version_written_is_3_and_every_version_reads():
    assert SCHEMA_VERSION == 3 and READS == (1, 2, 3)


@pytest.mark.parametrize("make", [full_record, minimal_record])
def test_a_record_round_trips_at_version_3(make):
    record = make()
    data = through_json(record.to_dict())
    assert data["schema"] == 3 and record.schema == 3 and "work" in data
    again = Record.from_dict(data)
    assert again == record and again.schema == 3
    assert through_json(again.to_dict()) == data


def test_a_version_2_record_reads_without_work_and_keeps_version_2():
    data = full_record().to_dict()
    data["schema"] = 2
    del data["work"]
    record = Record.from_dict(through_json(data))
    assert record.schema == 2 and record.work is None  # not recorded then: inferred by `work_of`
    assert "work" not in record.to_dict()  # written again, it claims no field it lacked


def test_a_version_1_record_reads_and_keeps_version_1():
    data = version_1_line()
    assert data["schema"] == 1 and "contention" not in data and "bound_by" not in data
    record = Record.from_dict(data)
    assert record.schema == 1
    assert record.contention is None and record.bound_by is None  # not recorded then: unknown
    assert record.measurement is not None and record.measurement.samples == tuple(data["measurement"]["samples_s"])
    written = record.to_dict()
    assert written["schema"] == 1  # written again, it claims no field it lacked
    assert Record.from_dict(through_json(written)) == record


def test_a_version_1_line_loads_from_the_store_without_a_warning(tmp_path):
    store = ResultsStore(tmp_path)
    store.ensure_writable()
    data = version_1_line()
    path = store.path_for(Record.from_dict(data).machine)
    path.write_text(json.dumps(data) + "\n")
    assert store.append(replace(Record.from_dict(data), schema=SCHEMA_VERSION)) == path  # a new one beside it
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        old, new = load_records([path])
    assert (old.schema, new.schema) == (1, 3)
    assert [json.loads(line)["schema"] for line in path.read_text().splitlines()] == [1, 3]


@pytest.mark.parametrize("version", [0, 4, -1, "x", "2", 2.0, True, None, [2]])
def test_an_unknown_version_is_refused_naming_it_and_the_versions_read(version):
    data = minimal_record().to_dict()
    data["schema"] = version
    with pytest.raises(ValueError, match=r"versions 1, 2, 3") as raised:
        Record.from_dict(data)
    assert repr(version) in str(raised.value)


def test_a_record_without_a_version_is_refused():
    data = minimal_record().to_dict()
    del data["schema"]
    with pytest.raises(ValueError, match=r"schema None .*versions 1, 2, 3"):
        Record.from_dict(data)


def test_a_record_cannot_be_made_with_a_version_it_could_not_be_read_back_with():
    with pytest.raises(ValueError, match="versions 1, 2, 3"):
        replace(minimal_record(), schema=4)


@pytest.mark.parametrize("name", [name for name in FIELDS if name != "schema"])
def test_a_version_3_record_without_a_field_is_refused_naming_it(name):
    data = full_record().to_dict()
    del data[name]
    with pytest.raises(ValueError, match=f"lacks {name} "):
        Record.from_dict(data)
    data["schema"] = 1  # the same line at version 1: the field was not recorded
    if name not in ("case", "status", "run_id", "timestamp"):  # what every version-1 record holds
        assert Record.from_dict(data).schema == 1


# --- the writer writes the declared fields, no more, no less ------------------------------------------

@pytest.mark.parametrize("make", [full_record, minimal_record])
def test_every_key_the_writer_writes_is_a_declared_field(make):
    declared = {field.name for field in fields(Record)}
    assert set(FIELDS) == declared
    assert set(make().to_dict()) == declared


def test_every_declared_field_is_documented_where_it_is_declared():
    source = Path(Record.__module__.replace(".", "/") + ".py")
    lines = (Path(__file__).resolve().parent.parent / source).read_text().splitlines()
    for name in FIELDS:
        (at,) = [i for i, line in enumerate(lines) if line.startswith(f"    {name}: ")]
        assert lines[at - 1].lstrip().startswith("#:"), f"Record.{name} has no #: comment above it"


# --- the environment's shape ----------------------------------------------------------------------

def problems(value: Any, hint: Any, where: str) -> list[str]:
    """Where `value` does not have the type `hint` (TypedDicts: an undeclared key is a problem, a
    declared key absent is not: every TypedDict here is total=False)."""
    origin = get_origin(hint)
    if hint is Any:
        return []
    if origin in (Union, types.UnionType):
        found = [problems(value, arm, where) for arm in get_args(hint)]
        return [] if any(not found_ for found_ in found) else [f"{where}: {value!r:.60} is not {hint}"]
    if hint is type(None):
        return [] if value is None else [f"{where}: {value!r:.60} is not None"]
    if is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, not an object"]
        declared = get_type_hints(hint)
        return ([f"{where}.{key}: not declared in {hint.__name__}" for key in value if key not in declared]
                + [problem for key in value if key in declared
                   for problem in problems(value[key], declared[key], f"{where}.{key}")])
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {value!r:.60} is not a list"]
        return [problem for i, item in enumerate(value)
                for problem in problems(item, get_args(hint)[0], f"{where}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {value!r:.60} is not an object"]
        key_hint, value_hint = get_args(hint)
        return [problem for key, item in value.items()
                for problem in problems(key, key_hint, f"{where} key") + problems(item, value_hint, f"{where}.{key}")]
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, hint)
    return [] if ok else [f"{where}: {value!r:.60} is not {hint.__name__}"]


def test_every_key_the_provenance_builds_is_declared_and_every_declared_one_built_or_added_per_record():
    declared = set(get_type_hints(Environment))
    built = provenance.environment("box")
    assert set(built) <= declared, f"built but not declared in Environment: {set(built) - declared}"
    never_built = declared - set(built) - ADDED_PER_RECORD
    assert not never_built, f"declared in Environment, neither built nor added per record: {never_built}"
    assert ADDED_PER_RECORD <= declared and not ADDED_PER_RECORD & set(built)
    assert set(built["cpu"]) == set(get_type_hints(Cpu))
    assert set(built["git"]) == set(get_type_hints(Git))


def test_the_environment_built_here_has_the_declared_types():
    built = {**provenance.environment("box"), "threads": provenance.threads_in_use()}
    assert problems(built, Environment, "environment") == []


def test_gpus_and_their_topology_are_declared_as_nvidia_smi_is_read(monkeypatch):
    assert [key for key, _, _ in provenance.GPU_FIELDS] == list(get_type_hints(Gpu))
    row = ("0, NVIDIA H100 80GB HBM3, 81559, 580.159.04, 9.0, 1980, 2619, 700.00, [N/A], "
           "GPU-5b3c4f1e-0a2d-4c6e-9f7a-1b2c3d4e5f60")
    topology = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-15\nGPU1\tNV18\t X \t0-15\n\nLegend:\n  X = Self"
    monkeypatch.setattr(provenance, "_nvidia_smi_output", lambda *args: topology if args[0] == "topo" else row)
    gpus, links = provenance.nvidia_smi(), provenance.gpu_topology()
    assert set(gpus[0]) == set(get_type_hints(Gpu)) and set(links) == set(get_type_hints(GpuTopology))
    assert links["links"] == {"GPU0": {"GPU1": "NV18"}, "GPU1": {"GPU0": "NV18"}}
    assert problems({"gpus": gpus, "gpu_topology": links}, Environment, "environment") == []


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*/*.jsonl")) or [pytest.param(None, marks=pytest.mark.skip(
    reason=f"{SAMPLES}: no sample records here"))], ids=lambda path: path and f"{path.parent.name}/{path.name}")
def test_the_sample_records_environments_have_the_declared_keys_and_types(path):
    for number, line in enumerate(path.read_text().splitlines(), 1):
        environment = json.loads(line)["environment"]
        assert problems(environment, Environment, f"{path.name}:{number}: environment") == []
