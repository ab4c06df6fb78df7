#!/usr/bin/env bash
# The whole GPU check in one call (issue 34, ../shared/gpu-check.md): what a GPU machine lent for
# a few minutes should run, in order of value, each step with its own time limit and the whole
# under a total budget, everything written to $OUT in a few files.
#
#   OUT=/some/folder bash tests/gpu/check.sh              # on the GPU machine (default budget 420 s)
#   OUT=/some/folder bash tests/gpu/check.sh --dry-run    # on a CPU: the same steps at CPU sizes
#   CHECK_BUDGET_S=300 CHECK_STEPS="ready parity" ...      # a shorter budget, or chosen steps only
#   CHECK_PARITY_ARGS="--model gpt2_small --rounds 3" ...   # the parity step narrowed
#   CHECK_SHARED_PARTS="tensor memory" CHECK_PARITY_PRECISIONS=tf32   # parts of steps 7 and 8 only
#   CHECK_STANDARD_FILTER="model=bert_base"                 # added to step 6's filter
#
# What comes back in $OUT: summary.txt (one line per step: ok / failed rc / timed out / skipped,
# with seconds; then the parity lines and the readiness verdict), logs.tgz (every step's log),
# records.tgz (the records of every run), smi.csv (nvidia-smi sampled every 250 ms).
# The dry run is the same script on a CPU: `run` steps expand the same filters (the GPU cases come
# back unavailable with their reason), parity runs at CPU sizes for one round, and pytest collects
# the gpu tests without running them; it checks the script, not the GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."

DRY_RUN=0
[ "${1:-}" = "--dry-run" ] && DRY_RUN=1
: "${OUT:?set OUT to the folder whose files come back}"
# The whole list does not fit one lent session (an H200, 2026-11-26: ready 120+ s, ResNet-50 fp32's
# first step 57 s): a second session picks up the rest with CHECK_STEPS.
BUDGET_S=${CHECK_BUDGET_S:-420}
STEPS=${CHECK_STEPS:-"versions parity gemm_power compile_pairs ready standard_single shared_gpu parity_precisions pytest_gpu"}
WORK=$(mktemp -d)
RESULTS="$WORK/records"
LOGS="$WORK/logs"
mkdir -p "$RESULTS" "$LOGS" "$OUT"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
START=$SECONDS
SMI_PID=""

cleanup() {
  [ -n "$SMI_PID" ] && kill "$SMI_PID" 2>/dev/null
  tar czf "$OUT/records.tgz" -C "$WORK" records 2>/dev/null
  tar czf "$OUT/logs.tgz" -C "$WORK" logs 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

DEVICE=gpu
PARITY_ARGS=()
[ "$DRY_RUN" = 1 ] && PARITY_ARGS=(--device cpu --rounds 1 --steps 1)
# CHECK_PARITY_ARGS narrows the parity step (e.g. "--model gpt2_small --rounds 3") when a session
# only needs one model re-measured
[ -n "${CHECK_PARITY_ARGS:-}" ] && read -ra PARITY_ARGS <<< "$CHECK_PARITY_ARGS"

# step NAME LIMIT_S COMMAND...: runs COMMAND with its log in $LOGS/NAME.log under the smaller of
# LIMIT_S and what is left of the budget; a step with under 20 s left is skipped, and says so.
step() {
  local name=$1 limit=$2; shift 2
  case " $STEPS " in *" $name "*) ;; *) return 0 ;; esac
  local left=$((BUDGET_S - (SECONDS - START)))
  if [ "$left" -lt 20 ]; then
    echo "$name: skipped (budget of ${BUDGET_S} s spent)" | tee -a "$SUMMARY"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local began=$SECONDS
  echo "== $name (limit ${limit} s): $*" | tee "$LOGS/$name.log"
  timeout --kill-after=10 "$limit" bash -c '"$@"' "$name" "$@" >> "$LOGS/$name.log" 2>&1
  local rc=$?
  local took=$((SECONDS - began))
  case $rc in
    0) echo "$name: ok in ${took} s" ;;
    124|137) echo "$name: timed out after ${took} s" ;;
    *) echo "$name: failed (exit $rc) in ${took} s" ;;
  esac | tee -a "$SUMMARY"
}

parbench() { python3 -m suites "$@"; }

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

if command -v nvidia-smi >/dev/null && [ "$DRY_RUN" = 0 ]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active \
    --format=csv -lms 250 > "$OUT/smi.csv" 2>/dev/null &
  SMI_PID=$!
fi

run_cases() {  # run_cases SUITE FILTER [more run options]: the suite's cases matching FILTER
  local suite=$1 filter=$2; shift 2
  parbench run --suite "$suite" --filter "$filter" --results "$RESULTS" --label "${CHECK_LABEL:-gpu-check}" "$@"
}

export RESULTS DEVICE CHECK_LABEL="${CHECK_LABEL:-gpu-check}"
export -f parbench versions run_cases

# 1. what the machine is
step versions 30 versions
# 2. the parity ratios: parbench's ResNet-50 / GPT-2 small / BERT-base beside torchvision / HF, bf16
step parity 150 parbench parity "${PARITY_ARGS[@]}"
# 3. a sustained 8192^3 bf16 GEMM, long enough to meet the power cap (bound_by: power)
step gemm_power 60 run_cases gpu "framework=torch device=$DEVICE precision=bf16 m=8192" --budget 20
# 4. the compile suite's reduce-overhead pairs: the batch-32 mlp eager (bound_by: launch) beside
#    CUDA-graph replay, and the 512^3 GEMM
step compile_pairs 180 run_cases compile "framework=torch device=$DEVICE strategy=single model=mlp batch=32 precision=fp32,bf16"
# 5. whether every GPU path starts at all (on an H200, 2026-11-26: 11 paths in 120 s)
step ready 200 parbench ready --results "$RESULTS"
# 6. the standard suite's torch single-GPU cases at the published sizes (fp32 apart: its ResNet-50 first
#    step took 57 s on an H200)
step standard_single 200 run_cases standard "framework=torch device=$DEVICE n_devices=1 precision=bf16,fp16,tf32 ${CHECK_STANDARD_FILTER:-}"
# 7. the multi-GPU combinations on the one GPU (ranks sharing it, through gloo): ddp and fsdp x
#    ResNet-50, ddp x GPT-2 and BERT, tensor and fsdp_tensor x a transformer, the memory suite's
#    tensor-parallel mlp with Adam. Not the Llama block at its full size: two ranks' copies of it
#    and its gradients through gloo took 134 GiB and over 100 s a step on an H200.
shared_gpu() {  # every part runs; the step fails if any part did
  local rc=0
  local parts=" ${CHECK_SHARED_PARTS:-resnet50 language tensor memory} "
  [[ $parts == *" resnet50 "* ]] && { run_cases standard "framework=torch device=$DEVICE n_devices=2 precision=bf16 strategy=ddp,fsdp model=resnet50" || rc=$?; }
  [[ $parts == *" language "* ]] && { run_cases standard "framework=torch device=$DEVICE n_devices=2 precision=bf16 strategy=ddp model=gpt2_small,bert_base" || rc=$?; }
  [[ $parts == *" tensor "* ]] && { run_cases parallel "framework=torch device=$DEVICE strategy=fsdp_tensor,tensor precision=bf16 model=transformer" || rc=$?; }
  [[ $parts == *" memory "* ]] && { run_cases memory "framework=torch device=$DEVICE strategy=tensor" || rc=$?; }
  return $rc
}
export -f shared_gpu
step shared_gpu 200 shared_gpu
# 8. ResNet-50's other precisions beside torchvision (fp16 with GradScaler, tf32)
if [ "$DRY_RUN" = 1 ]; then
  step parity_precisions 60 parbench parity "${PARITY_ARGS[@]}" --precision bf16
else
  parity_precisions() {
    local rc=0
    local precision
    for precision in ${CHECK_PARITY_PRECISIONS:-fp16 tf32}; do
      parbench parity --model resnet50 --precision "$precision" --rounds 3 || rc=$?
    done
    return $rc
  }
  export -f parity_precisions
  step parity_precisions 120 parity_precisions
fi
# 9. the gpu-marked tests
if [ "$DRY_RUN" = 1 ]; then
  step pytest_gpu 120 python3 -m pytest -q -m gpu --collect-only tests/test_gpu.py
else
  step pytest_gpu 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu.py
fi

{
  echo "--- parity"
  grep -h -E "ratio|parbench|skipped|not compared" "$LOGS"/parity*.log 2>/dev/null | head -40
  echo "--- readiness"
  tail -n 20 "$LOGS/ready.log" 2>/dev/null
  echo "--- run summaries"
  grep -H -E "^[0-9]+ ok, " "$LOGS"/*.log 2>/dev/null
  echo "total ${SECONDS}s of ${BUDGET_S}s budget"
} >> "$SUMMARY"
cat "$SUMMARY"
