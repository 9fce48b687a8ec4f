#!/usr/bin/env bash
# The GPU measurements in one command of at most 8 minutes (scripts/gpu_window.py holds the steps; docs/benchmarks.md
# §A GPU run in one command):
#   scripts/gpu_benchmarks.sh OUTDIR [--wheels DIR] [--budget SECONDS] [--data DIR] [--steps ...] [--rehearse]
# --wheels DIR: install the offline wheels first when fairseq is not importable (scripts/install_wheels.sh: a folder
# of scripts/gather_wheels.sh, or of the wheels the node lacks); the budget (default 450 s) counts from this
# script's start, the install included. Steps: a speed_splits 110 s, b speed_all 220 s, c fp16_triton 30 s and
# speed_triton (what is left). Every step writes OUTDIR/STEP.json as it goes; the same command with the same OUTDIR
# resumes what is partial and skips what is complete. --rehearse: the same steps on the CPU at tiny size.
set -uo pipefail
start=$(date +%s)
if [ $# -lt 1 ] || [[ $1 == -* ]]; then
  echo "usage: $0 OUTDIR [--wheels DIR] [--budget SECONDS] [--data DIR] [--steps ...] [--rehearse]" >&2
  exit 2
fi
out=$1; shift
wheels="" rest=()
while [ $# -gt 0 ]; do
  case $1 in
    --wheels) wheels=${2:?--wheels needs a folder}; shift 2 ;;
    *) rest+=("$1"); shift ;;
  esac
done
repo=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
if [ -n "$wheels" ]; then
  PYTHON=$PY "$repo/scripts/install_wheels.sh" "$wheels" fairseq || exit 1  # nothing when fairseq imports
fi
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's pe_plugin and pe_tools, not a wheel's
exec "$PY" "$repo/scripts/gpu_window.py" "$out" --started-at "$start" "${rest[@]}"
