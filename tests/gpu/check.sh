#!/usr/bin/env bash
# The GPU check in one short window (issues 34, 48; ../shared/gpu-check.md): a lent GPU machine gives
# about 8 minutes, its start included, so the default budget is 300 s, steps in order of value, each
# under its own time limit, everything it writes landing in $OUT as it goes.
#
#   OUT=/some/folder bash tests/gpu/check.sh              # on the GPU machine (default budget 300 s)
#   OUT=/some/folder bash tests/gpu/check.sh --dry-run    # on a CPU: the same steps at CPU sizes
#   CHECK_BUDGET_S=200 CHECK_STEPS="preflight ready" ...   # a shorter budget, or chosen steps only
#   CHECK_STEPS="preflight gemm_power compile_pairs standard_single shared_gpu parity_precisions pytest_gpu"
#                                                           # the longer steps, for a second session
#   CHECK_PARITY_ARGS="--model gpt2_small --rounds 3" ...   # the parity step narrowed
#   CHECK_SHARED_PARTS="tensor memory" CHECK_PARITY_PRECISIONS=tf32   # parts of those steps only
#   CHECK_STANDARD_FILTER="model=bert_base"                 # added to standard_single's filter
#
# Default steps and their limits (s): preflight 5 (30 in the dry run), versions 15, ddp_torchrun 30, parity 60, ready 180,
# records 10 = 300. A step gets the smaller of its limit and what is left of the budget; one with
# under 10 s left is skipped, and says so.
#
# What comes back in $OUT, written as each step goes (a SIGKILL of the whole script at the machine's
# limit still leaves every finished step's files, and the running one's log so far):
# summary.txt (one line per step: ok / failed rc / timed out / skipped, with seconds; then the parity
# lines, the readiness verdict and one line per record), logs/STEP.log, records/ (every run's
# records), readiness.json (`parbench ready`), smi.csv (nvidia-smi every 250 ms). On SIGTERM or
# Ctrl-C the running step's whole process group is killed and the summary says so.
# The dry run is the same script on a CPU: `run` steps expand the same filters (the GPU cases come
# back unavailable with their reason), parity runs at CPU sizes for one round, the torchrun case is
# its CPU twin over gloo, and pytest collects the gpu tests without running them; it checks the
# script, not the GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."

DRY_RUN=0
[ "${1:-}" = "--dry-run" ] && DRY_RUN=1
: "${OUT:?set OUT to the folder whose files come back}"
BUDGET_S=${CHECK_BUDGET_S:-300}
STEPS=${CHECK_STEPS:-"preflight versions ddp_torchrun parity ready records"}
RESULTS="$OUT/records"
LOGS="$OUT/logs"
mkdir -p "$RESULTS" "$LOGS"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
START=$SECONDS
SMI_PID=""
STEP_PID=""
STEP_NAME=""

# SIGTERM / SIGINT: the running step's process group (setsid made it one) goes, then the sampler.
stop() {
  [ -n "$STEP_PID" ] && kill -TERM -- "-$STEP_PID" 2>/dev/null && sleep 1 && kill -KILL -- "-$STEP_PID" 2>/dev/null
  echo "$STEP_NAME: stopped by a signal after $((SECONDS - START)) s in all" >> "$SUMMARY"
  exit 143
}
trap stop TERM INT
trap '[ -n "$SMI_PID" ] && kill "$SMI_PID" 2>/dev/null' EXIT

DEVICE=gpu
# parity's arguments as words (arrays do not cross `export -f`): the dry run's CPU sizes, or CHECK_PARITY_ARGS
PARITY_ARGS=""
PARITY_MODELS="--model bert_base --model gpt2_small"
# the dry run: CPU sizes, one round, BERT alone (both models and their profiles take the CPU past 60 s)
[ "$DRY_RUN" = 1 ] && { DEVICE=cpu; PARITY_ARGS="--device cpu --rounds 1 --steps 1"; PARITY_MODELS="--model bert_base"; }
[ -n "${CHECK_PARITY_ARGS:-}" ] && PARITY_ARGS=$CHECK_PARITY_ARGS

# step NAME LIMIT_S COMMAND...: runs COMMAND in a process group of its own, its log in $LOGS/NAME.log,
# under the smaller of LIMIT_S and what is left of the budget.
step() {
  local name=$1 limit=$2; shift 2
  case " $STEPS " in *" $name "*) ;; *) return 0 ;; esac
  local left=$((BUDGET_S - (SECONDS - START)))
  if [ "$left" -lt 10 ]; then
    echo "$name: skipped (budget of ${BUDGET_S} s spent)" | tee -a "$SUMMARY"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local began=$SECONDS
  echo "== $name (limit ${limit} s): $*" | tee "$LOGS/$name.log"
  STEP_NAME=$name
  setsid timeout --kill-after=5 "$limit" bash -c '"$@"' "$name" "$@" >> "$LOGS/$name.log" 2>&1 &
  STEP_PID=$!
  wait "$STEP_PID"
  local rc=$?
  STEP_PID=""
  local took=$((SECONDS - began))
  case $rc in
    0) echo "$name: ok in ${took} s" ;;
    124|137) echo "$name: timed out after ${took} s" ;;
    *) echo "$name: failed (exit $rc) in ${took} s" ;;
  esac | tee -a "$SUMMARY"
}

parbench() { python3 -m suites "$@"; }

# 0. python3 and the commit; what the steps import, installed where missing, torch pinned to the
#    machine's own build (never installed or changed: it is what is under test; nor torchvision, whose
#    build must match it). The dry run says what it would install and installs nothing.
preflight() {
  echo "python3: $(command -v python3)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo 'not a git checkout')"
  local found missing torch_version
  found=$(python3 - <<'EOF'
import importlib.util
from importlib.metadata import version
needed = {"rich": "rich", "pandas": "pandas", "pynvml": "nvidia-ml-py", "transformers": "transformers",
          "pytest": "pytest"}
if importlib.util.find_spec("torch") is None:
    raise SystemExit("torch is not installed: the check tests the machine's own torch and installs none")
if importlib.util.find_spec("torchvision") is None:
    print("# torchvision missing (parity's resnet50 needs it; its build must match torch's, so none is installed)")
print(version("torch"), *(package for module, package in needed.items() if importlib.util.find_spec(module) is None))
EOF
) || return 1
  grep "^#" <<< "$found"
  read -r torch_version missing <<< "$(grep -v "^#" <<< "$found")"
  echo "torch $torch_version"
  if [ -n "$missing" ] && [ "$DRY_RUN" = 1 ]; then
    echo "would install: $missing (not in a dry run)"
  elif [ -n "$missing" ]; then
    echo "installing: $missing"
    # shellcheck disable=SC2086 # the missing packages are words
    timeout 3 python3 -m pip install --quiet --disable-pip-version-check --retries 0 --timeout 2 \
      $missing "torch==$torch_version" || echo "could not install: $missing"
  fi
  python3 -c "import suites, rich; print('imports ok')"
}

versions() {
  python3 - <<'EOF'
import importlib, platform, sys
print("python", sys.version.split()[0], platform.machine())
for name in ("torch", "torchvision", "transformers", "tensorflow", "pynvml", "pandas", "pytest_benchmark"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"))
    except Exception as error:  # noqa: BLE001 - a missing package is a line of the listing
        print(name, "not importable:", type(error).__name__)
import torch
print("cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
EOF
  command -v nvidia-smi >/dev/null && nvidia-smi -L && nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total --format=csv
  nproc
}

# 2. one rank of NCCL DDP under torchrun: NCCL's init, barrier and broadcasts, the gloo side group
#    beside it (the dry run: its CPU twin over gloo)
ddp_torchrun() {
  local precision=bf16
  [ "$DEVICE" = cpu ] && precision=fp32
  torchrun --nproc-per-node 1 --max-restarts 0 -m suites worker \
    --case "train_step/torch/$DEVICE:1/ddp/$precision/batch=32,model=mlp" --timing '{"budget_s": 2}' \
    --results "$RESULTS" --label "$CHECK_LABEL"
}

# 3. parity: ok only where something was compared; BERT's and GPT-2's profiles beside (their 1.09 on
#    the H200 is unexplained)
parity() {
  local args models
  read -ra args <<< "$PARITY_ARGS"
  read -ra models <<< "$PARITY_MODELS"
  [ -z "${CHECK_PARITY_ARGS:-}" ] && args+=("${models[@]}" --profile 8)
  parbench parity "${args[@]}"
  local rc=$?
  grep -q "parbench / canonical = " "$LOGS/parity.log" || { echo "parity: nothing was compared"; return 1; }
  return $rc
}

# 6. one line per record: case, median, TFLOP/s, % of peak, bound_by and its evidence, both clocks
records() {
  python3 - "$RESULTS" <<'EOF'
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).rglob("*.jsonl")):
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        median_s = (record.get("measurement") or {}).get("median_s")
        median = "-" if median_s is None else f"{median_s * 1e3:.3f} ms"
        metrics, bound = record.get("metrics") or {}, record.get("bound_by") or {}
        evidence = bound.get("evidence") or {}
        figures = " ".join(f"{name}={evidence[name]:.4g}" if isinstance(evidence[name], float) else f"{name}={evidence[name]}"
                           for name in ("sm_clock_mhz", "max_sm_clock_mhz", "peak_clock_mhz", "busy_share",
                                        "roofline_fraction", "peak_fraction_at_clock") if name in evidence)
        tflops, pct = metrics.get("tflops"), metrics.get("pct_peak_table")
        print(f"{record['case']['id']} | {record['status']} | {median} | "
              f"{'-' if tflops is None else f'{tflops:.3g} TFLOP/s'} | {'-' if pct is None else f'{pct:.3g}% of peak'} | "
              f"{bound.get('verdict', '-')}: {bound.get('reason') or record.get('reason') or ''} | {figures}")
EOF
}

if command -v nvidia-smi >/dev/null && [ "$DRY_RUN" = 0 ]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active \
    --format=csv -lms 250 > "$OUT/smi.csv" 2>/dev/null &
  SMI_PID=$!
fi

run_cases() {  # run_cases SUITE FILTER [more run options]: the suite's cases matching FILTER
  local suite=$1 filter=$2; shift 2
  parbench run --suite "$suite" --filter "$filter" --results "$RESULTS" --label "$CHECK_LABEL" "$@"
}

shared_gpu() {  # every part runs; the step fails if any part did
  local rc=0
  local parts=" ${CHECK_SHARED_PARTS:-resnet50 language tensor memory} "
  [[ $parts == *" resnet50 "* ]] && { run_cases standard "framework=torch device=gpu n_devices=2 precision=bf16 strategy=ddp,fsdp model=resnet50" || rc=$?; }
  [[ $parts == *" language "* ]] && { run_cases standard "framework=torch device=gpu n_devices=2 precision=bf16 strategy=ddp model=gpt2_small,bert_base" || rc=$?; }
  [[ $parts == *" tensor "* ]] && { run_cases parallel "framework=torch device=gpu strategy=fsdp_tensor,tensor precision=bf16 model=transformer" || rc=$?; }
  [[ $parts == *" memory "* ]] && { run_cases memory "framework=torch device=gpu strategy=tensor" || rc=$?; }
  return $rc
}

parity_precisions() {
  local rc=0 precision
  for precision in ${CHECK_PARITY_PRECISIONS:-fp16 tf32}; do
    # shellcheck disable=SC2086 # PARITY_ARGS is words
    if [ "$DRY_RUN" = 1 ]; then parbench parity $PARITY_ARGS --model resnet50 --precision bf16 || rc=$?; break; fi
    parbench parity --model resnet50 --precision "$precision" --rounds 3 || rc=$?
  done
  return $rc
}

export RESULTS LOGS DEVICE DRY_RUN PARITY_ARGS PARITY_MODELS CHECK_LABEL="${CHECK_LABEL:-gpu-check}" CHECK_PARITY_ARGS="${CHECK_PARITY_ARGS:-}"
export -f parbench preflight versions ddp_torchrun parity records run_cases shared_gpu parity_precisions

# 5 s on the GPU machine; the dry run, on CI's busy cores, has 30 (the python and git starts)
step preflight "$([ "$DRY_RUN" = 1 ] && echo 30 || echo 5)" preflight
step versions 15 versions
step ddp_torchrun 30 ddp_torchrun
step parity 60 parity
step ready 180 parbench ready --minutes 3 --out "$OUT/readiness.json" --results "$RESULTS" --label "$CHECK_LABEL"
# The longer steps, for a session of their own (CHECK_STEPS names them):
# a sustained 8192^3 bf16 GEMM, long enough to meet the power cap (bound_by: power)
step gemm_power 60 run_cases gpu "framework=torch device=gpu precision=bf16 m=8192" --budget 20
# the compile suite's reduce-overhead pairs: the batch-32 mlp eager beside CUDA-graph replay
step compile_pairs 180 run_cases compile "framework=torch device=gpu strategy=single model=mlp batch=32 precision=fp32,bf16"
# the standard suite's torch single-GPU cases at the published sizes
step standard_single 200 run_cases standard "framework=torch device=gpu n_devices=1 precision=bf16,fp16,tf32 ${CHECK_STANDARD_FILTER:-}"
# the multi-GPU combinations on the one GPU (ranks sharing it, through gloo)
step shared_gpu 200 shared_gpu
# ResNet-50's other precisions beside torchvision (fp16 with GradScaler, tf32)
step parity_precisions 120 parity_precisions
if [ "$DRY_RUN" = 1 ]; then
  step pytest_gpu 60 python3 -m pytest -q -m gpu --collect-only -p no:cacheprovider tests/test_gpu.py
else
  step pytest_gpu 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu.py
fi
step records 10 records

{
  echo "--- parity"
  grep -h -E "ratio|parbench|skipped|not compared|nothing was compared" "$LOGS"/parity*.log 2>/dev/null | head -60
  echo "--- readiness"
  tail -n 20 "$LOGS/ready.log" 2>/dev/null
  echo "--- records"
  grep -v "^== " "$LOGS/records.log" 2>/dev/null
  echo "total ${SECONDS}s of ${BUDGET_S}s budget"
} >> "$SUMMARY"
cat "$SUMMARY"
