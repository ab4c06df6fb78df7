"""The work a record did, fingerprinted: equal work pairs whatever the case id says, unequal work never
does and says why in words; a record written now stores its work, an older one's is inferred from
what its parbench's names meant (NCHW and plain SGD before the recipes), never guessed across a
definition version."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from suites.cases.case import Case
from suites.measure.work_definitions import current, stored_work
from suites.records.work_fingerprint import (NOT_APPLICABLE, PARTS, Definitions, Work, work_of, why_not_paired)
from suites.strategies.jobs import job_for

H100_STANDARD = Path("/work/shared/sample-records/h100-2026-11-24/r2-standard.jsonl")
DEFINITIONS = Definitions(
    versions={"train_step": 1, "matmul": 1},
    model_sizes={"resnet50": {"memory_format": "channels_last", "image": 224, "width": 64, "resnet_depth": 50},
                 "mlp": {"hidden": 512, "depth": 3},
                 "gpt2_small": {"seq": 1024, "d_model": 768}},
    optimizers={"sgd": {"lr": 0.01, "momentum": 0.0}, "momentum": {"lr": 0.01, "momentum": 0.9},
                "adamw": {"lr": 1e-4, "weight_decay": 0.1}})


def record(model: str = "resnet50", timestamp: str = "2026-11-26T00:00:00", details: dict | None = None,
           framework: str = "torch", precision: str = "fp32", strategy: str = "single", n: int = 1,
           **params) -> dict:
    """A stored record's dict as the report reads it: case, details, timestamp (no stored work)."""
    case = {"workload": "train_step", "framework": framework, "device": "gpu", "n_devices": n, "strategy": strategy,
            "precision": precision, "params": {"model": model, "batch": 256, **params}}
    return {"case": case, "details": details or {}, "timestamp": timestamp}


def test_an_older_resnet_record_ran_the_older_recipe_and_says_so():
    h100 = record(timestamp="2026-11-24T10:00:00")  # no optimizer named, no memory_format detail
    h200 = record(optimizer="momentum", details={"memory_format": "channels_last"})
    assert work_of(h100, DEFINITIONS).fingerprint != work_of(h200, DEFINITIONS).fingerprint
    why = why_not_paired(h100, h200, DEFINITIONS)
    assert why.startswith("the older record ran the older ResNet-50 recipe: NCHW, plain SGD")
    assert "(the newer: channels_last, SGD with momentum)" in why
    assert why_not_paired(h200, h100, DEFINITIONS) == why  # the older is the older, either way round


def test_equal_work_pairs_whatever_the_case_id_names():
    named = record(model="mlp", optimizer="sgd", details={"memory_format": "nope"})  # a detail an mlp ignores
    unnamed = record(model="mlp", hidden=512)  # a default size named: the same model
    assert why_not_paired(named, unnamed, DEFINITIONS) == ""
    assert work_of(named, DEFINITIONS).fingerprint == work_of(unnamed, DEFINITIONS).fingerprint


@pytest.mark.parametrize("change, part", [
    ({"batch": 512}, "batch"), ({"hidden": 1024}, "model"), ({"optimizer": "adamw"}, "optimizer"),
    ({"precision": "bf16"}, "precision"), ({"n": 2}, "batch")])
def test_unequal_work_never_pairs_and_names_the_part(change, part):
    base = record(model="mlp")
    other = record(model="mlp", **{"precision": "fp32", "n": 1, **change})
    why = why_not_paired(base, other, DEFINITIONS)
    assert why.startswith("not the same work") and f"{part} " in why


def test_mixed_precision_by_the_strategy_is_other_work_than_autocast():
    fsdp = record(model="mlp", precision="bf16", strategy="fsdp", n=2)  # an older FSDP record: its policy
    ddp = record(model="mlp", precision="bf16", strategy="ddp", n=2,
                 details={"mixed_precision": "torch.autocast(bf16) over fp32 parameters"})
    assert "by the strategy" in work_of(fsdp, DEFINITIONS).parts["precision"]
    assert "precision " in why_not_paired(fsdp, ddp, DEFINITIONS)


def test_the_sequence_is_a_part_of_its_own_and_a_kernel_has_a_shape():
    work = work_of(record(model="gpt2_small", seq=512), DEFINITIONS)
    assert work.parts["sequence"] == "512" and "seq" not in work.parts["model"]
    kernel = {"case": {"workload": "matmul", "framework": "torch", "precision": "bf16",
                       "params": {"m": 8, "n": 8, "k": 8}}}
    parts = work_of(kernel, DEFINITIONS).parts
    assert parts["shape"] == "(k=8, m=8, n=8)" and parts["precision"] == "bf16" and "model" not in parts


def test_an_older_record_without_definitions_pairs_with_nothing_and_says_why():
    a, b = record(model="mlp"), record(model="mlp")
    assert not work_of(a).resolved
    assert "could not be resolved" in why_not_paired(a, b)


def test_another_definition_version_is_never_resolved_with_todays_defaults():
    bumped = Definitions({**DEFINITIONS.versions, "train_step": 2}, DEFINITIONS.model_sizes, DEFINITIONS.optimizers)
    old = work_of(record(model="mlp"), bumped)  # an older record: definition 1
    assert old.parts["workload"] == "train_step definition 1" and not old.resolved


def test_a_stored_work_is_read_as_stored_and_described_in_words():
    work = Work({"workload": "train_step definition 1", "model": "mlp(depth=3, hidden=512)", "batch": "32",
                 "precision": "fp32", "optimizer": "sgd(lr=0.01)", "layout": NOT_APPLICABLE})
    stored = {**record(model="cnn"), "work": json.loads(json.dumps(work.to_dict()))}
    again = work_of(stored, DEFINITIONS)
    assert again.fingerprint == work.fingerprint == stored["work"]["fingerprint"] and not again.inferred
    assert again.describe() == ("workload: train_step definition 1; model: mlp(depth=3, hidden=512); "
                                "optimizer: sgd(lr=0.01); batch: 32; precision: fp32")
    assert list(stored["work"]["parts"]) == list(PARTS)


def test_the_run_stores_the_resolved_work_of_a_case_and_an_older_record_of_it_reads_alike():
    case = Case.make("train_step", "torch", "gpu", params={"model": "resnet50", "batch": 8, "optimizer": "momentum"})
    stored = stored_work(job_for(case).workload, {})  # never ran here: its layout is its spec's
    assert stored["parts"]["layout"] == "channels_last"
    assert "resnet_depth=50" in stored["parts"]["model"] and "lr=0.01" in stored["parts"]["optimizer"]
    older = {"case": case.to_dict(), "details": {"memory_format": "channels_last"}}
    assert work_of(older, current()).fingerprint == stored["fingerprint"]


@pytest.mark.skipif(not H100_STANDARD.exists(), reason="the H100 sample records are not here")
def test_the_h100_samples_resnet_is_the_older_recipe():
    line = next(json.loads(text) for text in H100_STANDARD.read_text().splitlines()
                if '"model": "resnet50"' in text)
    parts = work_of(line, current()).parts
    assert (parts["layout"], parts["optimizer"].split("(")[0]) == ("nchw", "sgd")
