#!/usr/bin/env bash
# Every GPU benchmark of issue 33 in one go, on a CUDA machine where torch, fairseq and this project are already
# installed (the offline wheels: docs/benchmarks.md §Offline install); it installs nothing.
#   scripts/gpu_benchmarks.sh OUTDIR [DATA]
# OUTDIR receives at most 8 files:
#   models.md, models.json   pe-bench models: base, L = 20 50 100 200, --max-tokens 4096, fp16, one process, 3 rounds
#   fp16.json                pe-bench fp16: every encoding's fp16 fast path against its fp32 reference
#   posnet_kernel.json       pe-bench posnet_kernel
#   flex.json                pe-bench flex: FlexAttention vs SDPA for T5 and ALiBi
#   train_speed.json         pe-bench train-speed on DATA (a fairseq-preprocess'd folder with a joined dictionary),
#                            tiny models, 300 updates each, fp16 (skipped without DATA)
#   log.txt                  everything printed, with the time each step took
#   other.tar.gz             every further file (charts, CSVs, the markdown of each benchmark)
# About 8 minutes on one H100. PYTHON=python3 by default; steps that fail are reported and the others still run.
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
: > "$log"
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

step models "${bench[@]}" models --device cuda --fp16 --sizes base --lengths 20 50 100 200 --max-tokens 4096 \
  --rounds 3 --processes one --out-dir "$work/models"
step fp16 "${bench[@]}" fp16 --device cuda --size base --json "$out/fp16.json"
step posnet_kernel "${bench[@]}" posnet_kernel --json "$out/posnet_kernel.json"
step flex "${bench[@]}" flex --device cuda --json "$out/flex.json"
if [ -n "$data" ]; then
  step train_speed "${bench[@]}" train-speed --data "$data" --device cuda --fp16 --sizes tiny --max-update 300 \
    --max-tokens 4096 --log-interval 50 --out-dir "$work/train_speed"
else
  echo "=== train_speed: skipped (no DATA argument)" | tee -a "$log"
fi

[ -f "$work/models/benchmark.md" ] && cp "$work/models/benchmark.md" "$out/models.md"
[ -f "$work/models/benchmark.json" ] && cp "$work/models/benchmark.json" "$out/models.json"
[ -f "$work/train_speed/train_speed.json" ] && cp "$work/train_speed/train_speed.json" "$out/train_speed.json"
rm -f "$work/models/benchmark.md" "$work/models/benchmark.json" "$work/train_speed/train_speed.json"
(cd "$work" && find . -type f | grep -q . && tar -czf "$out/other.tar.gz" .)
echo "wrote $(ls "$out" | wc -l) files to $out; failed: ${failed[*]:-none}" | tee -a "$log"
[ ${#failed[@]} -eq 0 ]
