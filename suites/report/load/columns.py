"""The tidy results table: its columns, what each means, and how a case and an environment fill them.

One row per measurement (or per unavailable/failed case), whatever front end produced it.
Every loader builds rows with `case_fields` and `environment_fields`, so the three sources
describe the same case and the same machine in the same words.
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from suites.cases.case import Case
from suites.cases.vocabulary import Compile, DeviceKind, Framework, Strategy
from suites.records.metric_registry import MEMORY_BREAKDOWN_METRICS, METRICS, TIDY_METRICS
from suites.report.load.like_columns import LIKE_COLUMNS, LIKE_FLOATS
from suites.report.load.limit_columns import LIMIT_COLUMNS, LIMIT_FLOATS

#: Column -> meaning, in table order. `param_<name>` columns (one per workload parameter found)
#: follow `params`. A derived metric's meaning is the registry's (suites.records.metric_registry).
COLUMNS: dict[str, str] = {
    "source": "front end that measured it: parbench, asv or pytest-benchmark",
    "machine": "machine label (`--label`, $PARBENCH_MACHINE or hostname; asv's machine name)",
    "device": f"device kind: {', '.join(DeviceKind.names())}",
    "device_name": "model of the device (GPU name from nvidia-smi, CPU model); '' when unknown",
    "n_devices": "devices the case spans (logical devices or ranks when emulated)",
    "framework": " or ".join(Framework.names()),
    "workload": "matmul, conv2d, allreduce, train_step, ...",
    "strategy": ", ".join(Strategy.names()),
    "precision": "fp32, tf32, fp16 (mixed) or bf16 (mixed)",
    "compile": f"how the step was compiled: {', '.join(Compile.names())} (TF jit_compile; torch.compile); "
               "rows from before the axis: none",
    "params": "workload parameters as name=value pairs, e.g. 'k=512,m=512,n=512'",
    "problem": "workload and parameters: what was computed, independent of where and how",
    "case_id": "the case's stable id (suites.cases.case.Case.id)",
    "emulated": "several devices emulated on one CPU (logical devices, gloo ranks)",
    "status": "ok, unavailable or failed",
    "reason": "why not ok ('' when ok)",
    "median_s": "median seconds per step",
    "iqr_s": "interquartile range of the step time, seconds",
    "q1_s": "first quartile of the step time, seconds",
    "q3_s": "third quartile of the step time, seconds",
    "n": "number of timing samples",
    "samples_s": "raw samples, seconds per step (empty when the source stored none)",
    "noisy": "spread stayed above the run's target (IQR/median)",
    "contended": "other work competed for the CPU while the case ran (load average above the cores, or steal "
                 "time: suites.records.contention); empty where not recorded (older records, asv, pytest-benchmark)",
    "contention": "why the row is contended, e.g. 'load average 4.1 on 2 cores'; '' otherwise",
    "starved": "the record says the device waited for the host (contention.starved); empty where not recorded",
    "bimodal": "the step times fall in two clusters (measurement.bimodal); empty where not recorded",
    "samples_per_s": METRICS["samples_per_s"].description,
    "tokens_per_s": METRICS["tokens_per_s"].description,
    "mfu_pct": METRICS["mfu_pct"].description,
    "sustained_step_s": "seconds timed / steps timed: the mean step over the whole timed span, gaps included "
                        "(parbench and pytest-benchmark rows)",
    "tflops": METRICS["tflops"].description,
    "pct_peak_table": METRICS["pct_peak_table"].description,
    "pct_peak_measured": METRICS["pct_peak_measured"].description,
    "algbw_gbs": METRICS["algbw_gbs"].description,
    "busbw_gbs": METRICS["busbw_gbs"].description,
    "exchange_share": METRICS["exchange_share"].description,
    "peak_memory_bytes": METRICS["peak_memory_bytes"].description,
    "peak_reserved_bytes": METRICS["peak_reserved_bytes"].description,
    "training_state_bytes": METRICS["training_state_bytes"].description,
    "peak_memory_total_bytes": METRICS["peak_memory_total_bytes"].description,
    "device_memory_gib": "memory of one device of the row's kind, GiB: a GPU's (nvidia-smi memory.total of the "
                         "machine's first GPU), the machine's RAM for CPU rows; empty where unknown",
    "memory_fits": "the measured peak fits the device: GPU rows: the largest peak reserved (else allocated) of one "
                   "GPU <= device_memory_gib; CPU rows: peak_memory_total_bytes (every rank process of one host) <= "
                   "the machine's RAM; empty without a peak or a device memory",
    "state_bytes_per_device_estimate": METRICS["state_bytes_per_device_estimate"].description,
    "activation_bytes_per_device_estimate": METRICS["activation_bytes_per_device_estimate"].description,
    **{name: METRICS[name].description for name in MEMORY_BREAKDOWN_METRICS},
    "pipeline_bubble": METRICS["pipeline_bubble"].description,
    **{name: METRICS[name].description for name in (
        "energy_j_per_step", "energy_watts", "samples_per_joule", "samples_per_kwh", "gflop_per_joule",
        "arithmetic_intensity", "roof_peak_tflops", "roof_bandwidth_gbs", "roofline_bound_tflops",
        "roofline_fraction")},
    "energy_scope": "what the energy reading covers: 'gpu board (NVML)' or 'cpu package (RAPL)'; samples per "
                    "joule compare only within one scope; '' where none was read",
    "energy_reason": "why the row has no energy figures (no readable counter, ...); '' where it has them or the "
                     "source does not say",
    "throughput_per_watt": "`throughput` / energy_watts: perf per watt (samples/J, or TFLOP/s per W, ...)",
    "recompiles": METRICS["recompiles"].description,
    "straggler": "one rank's compute (or busy time) per step is over 1.1x another's",
    **LIMIT_COLUMNS,
    **LIKE_COLUMNS,
    "throughput": "the figure compared across configurations: samples/s, else TFLOP/s, else busbw GB/s, else steps/s",
    "throughput_unit": "unit of `throughput`",
    "sustained_throughput": "`throughput` at the sustained step time (throughput x median_s / sustained_step_s): "
                            "what a long run keeps up; costs use it",
    "sustained_basis": "'timed span' where the source stored one, else 'median' (sustained_throughput = throughput)",
    "comparable": "the row may stand in a cross-machine ratio, a rank, a price or a crown "
                  "(suites.report.analyses.comparability: usable, not emulated, contended, starved, bimodal, "
                  "launch- or host-bound, nor above a peak)",
    "pairable": "the row may stand in a ratio within its own machine (a precision, compile or strategy "
                "speedup): usable, and only emulated or launch/host-bound if anything",
    "why_not": "why the row is not comparable, as a code (suites.report.analyses.comparability.CODES); '' where it is",
    "why_not_text": "every reason the row is not comparable, in words; '' where it is",
    "notes": "what the row says that leaves it comparable, in words: a figure above the calibrated peak flags "
             "the calibration (suites.report.analyses.comparability.NOTES); '' where none",
    "energy_why_not": "why the row's energy figures enter no ratio (a reading too short for its counter, or above "
                      "the board's power limit), in words; '' where they may",
    "check_passed": "numerics check passed (empty when the case did not run)",
    "check_metric": "what the check measured (e.g. max_rel_err)",
    "check_value": "the check's measured value",
    "check_s": "wall time of the numerics check (its steps on the small check batch and its reference), seconds",
    "check_memory_gib": "the most memory the check held beyond what was held when it began (rank 0), GiB",
    "compile_s": "first-step time beyond a steady step (tracing, compilation), seconds",
    "run_id": "one `parbench run` (asv: commit-env; pytest-benchmark: saved file)",
    "timestamp": "when the case finished (UTC)",
    "suite": "suite name ('' when unknown)",
    "hostname": "host name",
    "cpu_model": "CPU model",
    "cpu_cores": "CPU cores usable by the run",
    "memory_gib": "RAM, GiB",
    "gpus": "GPUs nvidia-smi listed, comma-separated",
    "os": "operating system",
    "python": "Python version",
    "libraries": "library versions, 'name version' comma-separated",
    "git_commit": "parbench commit (asv: the benchmarked commit)",
    "threads": "framework intra-op threads, e.g. 'torch=2'",
    "path": "file the row was loaded from",
}

#: Columns that identify a configuration: what ran, where and how.
CONFIG = ["machine", "device", "n_devices", "framework", "strategy", "precision", "compile"]
#: Columns that identify one measured case on one machine.
IDENTITY = [*CONFIG, "workload", "params"]
ENVIRONMENT = ["hostname", "cpu_model", "cpu_cores", "memory_gib", "gpus", "os", "python",
               "libraries", "git_commit", "threads"]
FLOAT_COLUMNS = ["median_s", "iqr_s", "q1_s", "q3_s", *TIDY_METRICS, "throughput", "throughput_per_watt",
                 "check_value", "check_s", "check_memory_gib",
                 "sustained_step_s", "sustained_throughput", "compile_s", "memory_gib", "device_memory_gib",
                 *LIMIT_FLOATS, *LIKE_FLOATS]
INT_COLUMNS = ["n", "n_devices", "cpu_cores"]
BOOL_COLUMNS = ["emulated", "noisy", "contended", "starved", "bimodal", "straggler", "check_passed", "memory_fits"]
#: Columns the loader derives from the whole row once it is loaded (`comparability.flag`), not read
#: from a source: `tidy` leaves them out.
FLAGS = ["comparable", "pairable", "why_not", "why_not_text", "notes", "energy_why_not"]


def params_text(params: Mapping[str, Any]) -> str:
    return ",".join(f"{name}={value}" for name, value in sorted(params.items()))


def problem_text(workload: str, params: Mapping[str, Any]) -> str:
    """e.g. 'matmul k=512,m=512,n=512': the same problem on every machine and strategy."""
    return f"{workload} {params_text(params)}".strip()


def case_fields(case: Case) -> dict[str, Any]:
    return {"case_id": case.id, "workload": case.workload, "framework": str(case.framework),
            "device": str(case.device), "n_devices": case.n_devices, "strategy": str(case.strategy),
            "precision": str(case.precision), "compile": str(case.compile),
            "params": params_text(case.param_dict),
            "problem": problem_text(case.workload, case.param_dict),
            **{f"param_{name}": value for name, value in case.params}}


def gib(text: Any) -> float | None:
    """nvidia-smi's memory.total ('81920 MiB') in GiB; None where it is not a size."""
    parts = str(text).split()
    scale = {"KiB": 2**-20, "MiB": 2**-10, "GiB": 1.0, "TiB": 2**10}.get(parts[1]) if len(parts) == 2 else None
    try:
        return float(parts[0]) * scale if scale else None
    except ValueError:
        return None


def environment_fields(environment: Mapping[str, Any], device: str) -> dict[str, Any]:
    """Flatten a parbench provenance environment (suites.records.provenance.environment)."""
    cpu = environment.get("cpu") or {}
    gpu_list = [gpu for gpu in environment.get("gpus") or [] if isinstance(gpu, dict)]
    gpus = [gpu.get("name", "") for gpu in gpu_list]
    libraries = environment.get("libraries") or {}
    threads = environment.get("threads") or {}
    git = environment.get("git") or {}
    commit = git.get("commit") or ""
    device_name = {"cpu": cpu.get("model", ""), "gpu": gpus[0] if gpus else ""}.get(device, "")
    device_memory = {"cpu": environment.get("memory_gib"),
                     "gpu": gib(gpu_list[0].get("memory")) if gpu_list else None}.get(device)
    return {
        "machine": str(environment.get("machine", "?")), "hostname": environment.get("hostname", ""),
        "device_name": device_name, "device_memory_gib": device_memory, "cpu_model": cpu.get("model", ""),
        "cpu_cores": cpu.get("usable_cores") or cpu.get("logical_cores"),
        "memory_gib": environment.get("memory_gib"), "gpus": ", ".join(gpus),
        "os": environment.get("os", ""), "python": environment.get("python", ""),
        "libraries": ", ".join(f"{name} {version}" for name, version in sorted(libraries.items())),
        "git_commit": f"{commit[:12]}{' (dirty)' if git.get('dirty') else ''}",
        "threads": ", ".join(f"{name}={count}" for name, count in sorted(threads.items())),
    }


def tidy(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Rows (dicts) -> the tidy table with every documented column, in order, with fixed dtypes."""
    frame = pd.DataFrame(list(rows))
    param_columns = sorted(c for c in frame.columns if c.startswith("param_"))
    order = [column for column in COLUMNS if column not in FLAGS]
    order[order.index("params") + 1:order.index("params") + 1] = param_columns
    frame = frame.reindex(columns=order)
    for column in FLOAT_COLUMNS:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    for column in INT_COLUMNS:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("Int64")
    for column in BOOL_COLUMNS:
        frame[column] = frame[column].astype("boolean")
    frame["emulated"] = frame["emulated"].fillna(False)
    frame["noisy"] = frame["noisy"].fillna(False)
    frame["straggler"] = frame["straggler"].fillna(False)
    frame["samples_s"] = pd.Series([samples_array(s) for s in frame["samples_s"]], index=frame.index, dtype=object)
    frame[param_columns] = frame[param_columns].convert_dtypes()  # integral sizes stay integers
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True, errors="coerce", format="ISO8601")
    text = [c for c in order if c not in (*FLOAT_COLUMNS, *INT_COLUMNS, *BOOL_COLUMNS, "samples_s",
                                          "timestamp", *param_columns)]
    frame[text] = frame[text].fillna("").astype(str)
    for column in text:  # one string object per distinct value: a fleet repeats its labels, paths, versions
        codes, uniques = pd.factorize(frame[column])
        frame[column] = pd.Series(uniques.to_numpy(dtype=object)[codes] if len(frame) else [],
                                  index=frame.index, dtype=object)
    # One block per dtype: the report adds columns without copying the table (copy-on-write), so a
    # frame of one block per column would stay fragmented through every later step.
    return frame.copy()


def retidy(frame: pd.DataFrame) -> pd.DataFrame:
    """Tidy frames of different row batches concatenated: their union of `param_*` columns put
    back in `tidy`'s order and dtypes (a batch without a parameter has it missing, not absent)."""
    param_columns = sorted(c for c in frame.columns if c.startswith("param_"))
    order = [column for column in COLUMNS if column not in FLAGS]
    order[order.index("params") + 1:order.index("params") + 1] = param_columns
    frame = frame.reindex(columns=order)
    frame[param_columns] = frame[param_columns].astype(object).convert_dtypes()
    return frame


def config_label(frame: pd.DataFrame) -> pd.Series:
    """e.g. 'box-a · gpu×4 · torch ddp bf16' (compiled: 'bf16+inductor'; emulated devices:
    '... fp32 (emulated)'): where and how a row ran, for tables and figures."""
    compiled = frame["compile"].where(frame["compile"].isin(["", str(Compile.NONE)]).eq(False), "")
    emulated = (frame["emulated"].fillna(False).astype(bool) if "emulated" in frame
                else pd.Series(False, index=frame.index))
    return (frame["machine"] + " · " + frame["device"] + "×" + frame["n_devices"].astype(str) + " · "
            + frame["framework"] + " " + frame["strategy"] + " " + frame["precision"]
            + compiled.map(lambda name: f"+{name}" if name else "") + emulated.map({True: " (emulated)", False: ""}))


def samples_array(samples: Any) -> np.ndarray:
    """A row's raw samples as a read-only float array (empty where the source stored none):
    a fleet's samples as Python floats were most of its table (1,000 machines: ~150 MB of the
    ~260 MB), and parsed floats left scattered between freed records hold memory after loading."""
    try:
        values = np.asarray(samples if isinstance(samples, (list, tuple)) else (), dtype=float)
    except (TypeError, ValueError):  # a record's samples that are not numbers: none usable
        values = np.asarray((), dtype=float)
    values.flags.writeable = False
    return values


def samples_json(samples: Sequence[float]) -> str:
    """How raw samples are written to CSV: a JSON list."""
    return json.dumps([float(value) for value in samples])
