"""A fingerprint of the work a record did: what must be equal before two records' figures stand side by side.

Two records pair as equal work where their fingerprints are equal, whatever their case ids say: an
H200 record naming `optimizer=momentum` and an H100 record of the same model that named none are
the same case id family, but not the same work if the H100 ran the older recipe. The fingerprint
hashes these parts (`PARTS`), each a canonical text:

- workload: its name and definition version (`suites.workloads.base.Workload.definition_version`);
- model (training): the model and every size of its resolved spec, the sequence and layout apart;
- optimizer (training): its name and options (learning rate, momentum, weight decay);
- layout (training): the memory format of a conv net's tensors (channels_last, nchw);
- batch (training): the global batch of one step;
- sequence (training): the tokens of one sample, for a sequence model;
- shape (kernels, collectives): the case's parameters;
- precision: the precision and, in mixed precision, who applies it (autocast or the strategy).

A record written by this parbench stores its work (`Record.work`: parts, fingerprint, resolved when
it ran). An older record's is inferred from its case and details (`work_of`), with what its
parbench's names meant: a torch conv net without a `memory_format` detail ran NCHW (before the
recipes gained channels_last), an unnamed optimizer was plain SGD, and its sizes and options are
resolved by `Definitions` — this parbench's defaults, right for a record of the same definition
version (a record of another is left unresolved, never guessed). `why_not_paired` names the parts
two records differ in, in words ("the older record ran the older ResNet-50 recipe: NCHW, plain SGD").

Reads record dicts as stored, so the report needs nothing but this module and a `Definitions`.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

#: The parts of a fingerprint, in the order they are described.
PARTS = ("workload", "model", "optimizer", "layout", "batch", "sequence", "shape", "precision")
#: What a part reads where a record cannot say (an older record's sizes without `Definitions`).
UNRESOLVED = "unresolved"
#: What a part reads where it does not apply (a kernel's optimizer, an MLP's layout).
NOT_APPLICABLE = "-"
#: The version of this module's rules: a stored work of another version is inferred anew.
FINGERPRINT_VERSION = 1
#: Names that are no model size: the layout and the sequence are parts of their own.
_APART = frozenset({"memory_format", "seq"})
#: The layout a torch conv net ran before the recipes gained channels_last, and TF's always.
OLDER_TORCH_LAYOUT, TF_LAYOUT = "nchw", "channels_last"
#: How a model and an optimizer read in a sentence.
MODEL_NAMES = {"resnet50": "ResNet-50", "bert_base": "BERT-base", "gpt2_small": "GPT-2 small",
               "llama_block": "Llama block", "mlp": "MLP", "cnn": "residual CNN", "transformer": "transformer"}
OPTIMIZER_NAMES = {"sgd": "plain SGD", "momentum": "SGD with momentum", "adam": "Adam", "adamw": "AdamW"}


@dataclass(frozen=True)
class Definitions:
    """What a case's names mean in one parbench: each workload's definition version, each model's
    sizes at their defaults, each optimizer's options (`suites.measure.work_definitions.current`)."""

    versions: Mapping[str, int] = field(default_factory=dict)
    model_sizes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    optimizers: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Work:
    """The work one record did: its parts, their fingerprint, and whether they were inferred from an
    older record's fields (`inferred`) rather than stored by the run."""

    parts: Mapping[str, str]
    inferred: bool = False

    @property
    def fingerprint(self) -> str:
        """16 hex digits of the parts' SHA-256; records pair as equal work where these are equal."""
        return self.digest(PARTS)

    def digest(self, names: tuple[str, ...]) -> str:
        """16 hex digits of the SHA-256 of the parts `names` (a view that compares one part apart,
        such as the precision, digests the others)."""
        text = json.dumps({name: self.parts.get(name, NOT_APPLICABLE) for name in names}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def resolved(self) -> bool:
        """Every part is known: a work with an unresolved part pairs with nothing."""
        return not any(value.startswith(UNRESOLVED) for value in self.parts.values())

    def describe(self) -> str:
        """Its parts in words, those that apply: "workload: train_step definition 1; model: ..."."""
        return "; ".join(f"{name}: {self.parts[name]}" for name in PARTS
                         if self.parts.get(name, NOT_APPLICABLE) != NOT_APPLICABLE)

    def to_dict(self) -> dict[str, Any]:
        return {"version": FINGERPRINT_VERSION, "fingerprint": self.fingerprint,
                "parts": {name: self.parts.get(name, NOT_APPLICABLE) for name in PARTS}}


def work_of(record: Mapping[str, Any], definitions: Definitions | None = None) -> Work:
    """The work `record` (a stored record's dict) did: the one it stores, else inferred from its case
    and details with `definitions` (an older record; without them its sizes stay unresolved)."""
    stored = record.get("work")
    if isinstance(stored, Mapping) and stored.get("version") == FINGERPRINT_VERSION:
        return Work(dict(stored.get("parts") or {}))
    return Work(infer_parts(record.get("case") or {}, record.get("details") or {}, definitions or Definitions(),
                            version=1), inferred=True)


def infer_parts(case: Mapping[str, Any], details: Mapping[str, Any], definitions: Definitions,
                version: int | None = None) -> dict[str, str]:
    """The parts of a case (`Case.to_dict`) that ran with `details`, its workload at definition
    `version` (default: `definitions`'). What the run stores, and how an older record is read."""
    workload = str(case.get("workload", "?"))
    params = dict(case.get("params") or {})
    ran = definitions.versions.get(workload, 1) if version is None else version
    resolvable = ran == definitions.versions.get(workload, 1) and bool(definitions.versions)
    parts = {"workload": f"{workload} definition {ran}", "precision": _precision(case, details)}
    if workload != "train_step":
        return {**parts, "shape": _call("", params)}
    model = str(params.get("model", "?"))
    sizes = _sizes(model, params, definitions if resolvable else None)
    optimizer = str(params.get("optimizer", "sgd"))
    options = definitions.optimizers.get(optimizer) if resolvable else None
    return {**parts,
            "model": (_call(model, {k: v for k, v in sizes.items() if k not in _APART}) if sizes is not None
                      else f"{UNRESOLVED}: {_call(model, params_sizes(params))} at the defaults of definition {ran}"),
            "optimizer": _call(optimizer, options) if options is not None else f"{UNRESOLVED}: {optimizer}",
            "layout": _layout(case, details, model, sizes),
            "batch": str(_global_batch(case, params)),
            "sequence": (str(sizes["seq"]) if sizes is not None and "seq" in sizes
                         else NOT_APPLICABLE if sizes is not None else UNRESOLVED)}


def params_sizes(params: Mapping[str, Any]) -> dict[str, Any]:
    """A training case's parameters that size its model (none of the step's own)."""
    return {key: value for key, value in params.items()
            if key not in ("model", "batch", "scaling", "optimizer") and key not in _STRATEGY_PARAMS}


#: A training case's parameters that are its strategy's, not its model's sizes.
_STRATEGY_PARAMS = frozenset({"reshard", "microbatches", "schedule", "mesh", "ps", "placement", "stages"})


def _sizes(model: str, params: Mapping[str, Any], definitions: Definitions | None) -> dict[str, Any] | None:
    """Every size of the model: its defaults with the case's own over them; None where the
    defaults are not known (no `definitions`, another definition version, an unknown model)."""
    if definitions is None or model not in definitions.model_sizes:
        return None
    defaults = definitions.model_sizes[model]
    return {**defaults, **{key: value for key, value in params.items() if key in defaults}}


def _layout(case: Mapping[str, Any], details: Mapping[str, Any], model: str, sizes: Mapping[str, Any] | None) -> str:
    """The conv net's memory format: the record's detail (torch), NCHW for a torch record older
    than the detail, channels_last in TF; not applicable to a model without one."""
    if sizes is None:
        return str(details["memory_format"]) if "memory_format" in details else UNRESOLVED
    if "memory_format" not in sizes:
        return NOT_APPLICABLE
    if case.get("framework") == "tf":
        return TF_LAYOUT
    return str(details.get("memory_format", OLDER_TORCH_LAYOUT))


def _global_batch(case: Mapping[str, Any], params: Mapping[str, Any]) -> int:
    batch, devices = int(params.get("batch", 0)), int(case.get("n_devices", 1))
    return batch * devices if params.get("scaling", "weak") == "weak" else batch


def _precision(case: Mapping[str, Any], details: Mapping[str, Any]) -> str:
    """The precision, and in mixed precision who applies it: FSDP's policy (parameters gathered in
    the low precision) or autocast over fp32 parameters (torch), TF's mixed policy."""
    precision = str(case.get("precision", "fp32"))
    if precision not in ("fp16", "bf16") or case.get("workload") != "train_step":
        return precision
    if case.get("framework") == "tf":
        return f"{precision} mixed (TF)"
    mechanism = str(details.get("mixed_precision", ""))
    strategy_own = mechanism.startswith("the strategy's own") or (not mechanism and case.get("strategy") == "fsdp")
    return f"{precision} {'by the strategy (FSDP policy)' if strategy_own else 'autocast over fp32 parameters'}"


def _call(name: str, values: Mapping[str, Any] | None) -> str:
    """`name(key=value, ...)`, keys sorted: a canonical text."""
    inner = ", ".join(f"{key}={values[key]}" for key in sorted(values or {}))
    return f"{name}({inner})"


def why_not_paired(a: Mapping[str, Any], b: Mapping[str, Any], definitions: Definitions | None = None) -> str:
    """Why records `a` and `b` (stored dicts) are not the same work, in words; "" where they are.
    Where two records of one model, run at different times, differ in layout or optimizer, it says
    which recipe the older (by timestamp) ran and which the newer."""
    first, second = work_of(a, definitions), work_of(b, definitions)
    if first.fingerprint == second.fingerprint and first.resolved:
        return ""
    unresolved = [name for work in (first, second) for name in PARTS
                  if work.parts.get(name, NOT_APPLICABLE).startswith(UNRESOLVED)]
    if unresolved:
        return (f"the work of an older record is not known: its {', '.join(dict.fromkeys(unresolved))} "
                "could not be resolved (no definitions of its version)")
    differing = [name for name in PARTS if first.parts.get(name) != second.parts.get(name)]
    recipe = [name for name in ("layout", "optimizer") if name in differing]
    times = str(a.get("timestamp") or ""), str(b.get("timestamp") or "")
    if recipe and first.parts.get("model") == second.parts.get("model") and all(times) and times[0] != times[1]:
        older, newer = (first, second) if times[0] < times[1] else (second, first)
        rest = [name for name in differing if name not in recipe]
        text = f"the older record ran the older {_recipe(older)} (the newer: {_recipe(newer, model=False)})"
        return text + (f"; and they differ in {_differences(first, second, rest)}" if rest else "")
    return f"not the same work: {_differences(first, second, differing)}"


def _recipe(work: Work, model: bool = True) -> str:
    """"ResNet-50 recipe: NCHW, plain SGD": a training record's model (unless not `model`), layout
    and optimizer."""
    name = work.parts.get("model", "?").split("(")[0]
    layout = work.parts.get("layout", NOT_APPLICABLE)
    optimizer = work.parts.get("optimizer", "?").split("(")[0]
    said = [layout.upper() if layout == OLDER_TORCH_LAYOUT else layout] if layout != NOT_APPLICABLE else []
    recipe = ", ".join([*said, OPTIMIZER_NAMES.get(optimizer, optimizer)])
    return f"{MODEL_NAMES.get(name, name)} recipe: {recipe}" if model else recipe


def _differences(first: Work, second: Work, names: list[str]) -> str:
    return "; ".join(f"{name} {first.parts.get(name, NOT_APPLICABLE)} vs {second.parts.get(name, NOT_APPLICABLE)}"
                     for name in names)
