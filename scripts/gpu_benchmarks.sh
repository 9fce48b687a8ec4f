#!/usr/bin/env bash
# Every GPU benchmark of issue 33 in one go, on a CUDA machine where torch, fairseq and this project are already
# installed (the offline wheels: docs/benchmarks.md §Offline install); it installs nothing.
#   scripts/gpu_benchmarks.sh OUTDIR [DATA]
# OUTDIR receives at most 10 files:
#   models.md, models.json   pe-bench models: base, L = 20 50 100 200, --max-tokens 4096, fp16, one process, 2 rounds
#                            of 10 timed steps after 3 warm-up ones, and each row's GPU busy time and kernel count
#   fp16.json                pe-bench fp16: every encoding's fp16 fast path against its fp32 reference
#   fp16_triton.json         the same for rpe with --impl triton (Shaw's fused Triton kernels)
#   models_triton.json       pe-bench models as above for rpe (and sape) with --attention-impl triton
#   posnet_kernel.json       pe-bench posnet_kernel --device cuda --quick
#   flex.json                pe-bench flex --quick: FlexAttention vs SDPA for T5 and ALiBi at L = 50 200
#   train_speed.json         pe-bench train-speed on DATA (a fairseq-preprocess'd folder with a joined dictionary),
#                            base models, 300 updates each, fp16 (skipped without DATA)
#   log.txt                  everything printed, with the time each step took
#   other.tar.gz             every further file (charts, CSVs, the markdown of each benchmark)
# Each step has its own --time-budget (seconds, the variables below; BUDGET_SCALE=2 doubles them all) and writes
# its JSON after every measurement, so a step never eats the next one's time and a killed script keeps what it
# measured. Run the same command again with the same OUTDIR and every JSON that says complete: false is resumed
# (--resume), complete ones are left alone: a run too long for one device call finishes over several. Budgets sum
# to 900 s (on one H100 the models step needed 475 s and train-speed 359 s for 5 of its 12 runs: resume).
# PYTHON=python3 by default; steps that fail are reported and the others still run.
set -uo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 OUTDIR [DATA]" >&2
  exit 2
fi
out=$1 data=${2:-}
repo=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log=$out/log.txt
[ -f "$log" ] && echo "=== resumed $(date)" >> "$log" || : > "$log"
failed=()
export PYTHONWARNINGS=ignore

step() {  # step NAME COMMAND...: run, log, time
  local name=$1; shift
  local t0=$SECONDS
  echo "=== $name: $*" | tee -a "$log"
  if "$@" >> "$log" 2>&1; then
    echo "=== $name: done in $((SECONDS - t0)) s" | tee -a "$log"
  else
    echo "=== $name: FAILED (exit $?) after $((SECONDS - t0)) s" | tee -a "$log"
    failed+=("$name")
  fi
}

"$PY" - >> "$log" 2>&1 <<'EOF' || { echo "torch with CUDA is needed (see $log)" >&2; exit 1; }
import torch, fairseq, platform
assert torch.cuda.is_available(), "no CUDA device visible to torch"
print("python", platform.python_version(), "torch", torch.__version__, "CUDA", torch.version.cuda,
      "fairseq", fairseq.__version__, "device", torch.cuda.get_device_name())
EOF
bench=("$PY" "$repo/scripts/benchmark.py")
scale=${BUDGET_SCALE:-1}
budget() { echo $(( $1 * scale )); }

# resumable STEP JSON: "skip" when JSON is complete, "--resume" when it holds a partial run, "" when absent
resumable() {
  [ -f "$1" ] || { echo ""; return; }
  "$PY" -c 'import json, sys; print("skip" if json.load(open(sys.argv[1])).get("complete", True) else "--resume")' "$1" \
    2>/dev/null || echo ""
}
bstep() {  # bstep NAME JSON COMMAND...: step, resumed or skipped after resumable JSON
  local name=$1 json=$2; shift 2
  local how; how=$(resumable "$json")
  if [ "$how" = skip ]; then
    echo "=== $name: $json is complete; skipped" | tee -a "$log"
    return
  fi
  step "$name" "$@" $how
}

bstep models "$out/models.json" "${bench[@]}" models --device cuda --fp16 --sizes base --lengths 20 50 100 200 \
  --max-tokens 4096 --rounds 2 --steps 10 --warmup 3 --processes one --out-dir "$work/models" \
  --json "$out/models.json" --time-budget "$(budget 330)"
bstep fp16 "$out/fp16.json" "${bench[@]}" fp16 --device cuda --size base --json "$out/fp16.json" \
  --time-budget "$(budget 45)"
# Shaw's RPE in fused Triton kernels (--pe-attention-impl triton): its fp16 agreement first, then its time
bstep fp16_triton "$out/fp16_triton.json" "${bench[@]}" fp16 --device cuda --size base --methods rpe --impl triton \
  --json "$out/fp16_triton.json" --time-budget "$(budget 30)"
bstep models_triton "$out/models_triton.json" "${bench[@]}" models --device cuda --fp16 --sizes base \
  --lengths 20 50 100 200 --max-tokens 4096 --rounds 2 --steps 10 --warmup 3 --processes one --pe rpe \
  --attention-impl triton --out-dir "$work/models_triton" --json "$out/models_triton.json" \
  --time-budget "$(budget 90)"
bstep posnet_kernel "$out/posnet_kernel.json" "${bench[@]}" posnet_kernel --device cuda --quick \
  --json "$out/posnet_kernel.json" --time-budget "$(budget 30)"
bstep flex "$out/flex.json" "${bench[@]}" flex --device cuda --quick --json "$out/flex.json" \
  --time-budget "$(budget 45)"
if [ -n "$data" ]; then
  bstep train_speed "$out/train_speed.json" "${bench[@]}" train-speed --data "$data" --device cuda --fp16 \
    --sizes base --max-update 300 --max-tokens 4096 --log-interval 50 --out-dir "$work/train_speed" \
    --json "$out/train_speed.json" --time-budget "$(budget 330)"
else
  echo "=== train_speed: skipped (no DATA argument)" | tee -a "$log"
fi
incomplete=$(cd "$out" && for f in *.json; do [ "$(resumable "$f")" = --resume ] && echo "${f%.json}"; done)
if [ -n "$incomplete" ]; then
  echo "incomplete (time budget): $(echo $incomplete); run $0 $* again to resume them" | tee -a "$log"
fi

[ -f "$work/models/benchmark.md" ] && cp "$work/models/benchmark.md" "$out/models.md"
rm -f "$work/models/benchmark.md" "$work/models/benchmark.json" "$work/train_speed/train_speed.json"
(cd "$work" && find . -type f | grep -q . && tar -czf "$out/other.tar.gz" .)
echo "wrote $(ls "$out" | wc -l) files to $out; failed: ${failed[*]:-none}" | tee -a "$log"
[ ${#failed[@]} -eq 0 ]
