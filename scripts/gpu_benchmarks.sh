#!/usr/bin/env bash
# The GPU measurements in one command of at most 8 minutes (scripts/gpu_window.py holds the steps; docs/benchmarks.md
# §A GPU run in one command):
#   scripts/gpu_benchmarks.sh OUTDIR [--wheels DIR] [--budget SECONDS] [--data DIR] [--steps ...] [--rehearse]
# --wheels DIR: install the offline wheels first when fairseq is not importable (scripts/gpu_node.sh: a folder of
# scripts/gather_wheels.sh, or of the wheels the node lacks); the budget (default 450 s) counts from this
# script's start, the install included. Steps: a speed_splits 110 s, b speed_all 220 s, c fp16_triton 30 s and
# speed_triton (what is left). Every step writes OUTDIR/STEP.json as it goes; the same command with the same OUTDIR
# resumes what is partial and skips what is complete. --rehearse: the same steps on the CPU at tiny size.
set -uo pipefail
start=$(date +%s)
if [ $# -lt 1 ] || [[ $1 == -* ]]; then
  echo "usage: $0 OUTDIR [--wheels DIR] [--budget SECONDS] [--data DIR] [--steps ...] [--rehearse]" >&2
  exit 2
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
exec "$repo/scripts/gpu_node.sh" fairseq "${PYTHON:-python3}" "$repo/scripts/gpu_window.py" "$1" --started-at "$start" \
  "${@:2}"
