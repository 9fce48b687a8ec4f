#!/usr/bin/env bash
# Issue 40's GPU window in one command (pe_tools/bench/gpu_window.py holds the steps; docs/benchmarks.md §GPU run):
#   scripts/gpu_benchmarks.sh OUTDIR [--wheels DIR] [--budget SECONDS] [--data DIR] [--rehearse]
# --wheels DIR: install the offline wheels first when fairseq is not importable (scripts/gather_wheels.sh 3.12 DIR;
# docs/benchmarks.md §Offline install); the budget (default 540 s) counts from this script's start, install included.
# Steps: a fill_splits 180 s, b fill_recipe 170 s + fp16_triton 30 s + fill_more 50 s, c models (what is left);
# short of time, c is dropped first, then fill_more, then fill_recipe's last rows. Every step writes OUTDIR/STEP.json
# as it goes; the same command with the same OUTDIR resumes what is partial and skips what is complete.
# --rehearse: the same steps on the CPU at tiny size (about 3 minutes; docs/benchmarks.md §GPU run).
set -uo pipefail
start=$(date +%s)
if [ $# -lt 1 ] || [[ $1 == -* ]]; then
  echo "usage: $0 OUTDIR [--wheels DIR] [--budget SECONDS] [--data DIR] [--rehearse]" >&2
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
if [ -n "$wheels" ]; then  # the offline install, shared with scripts/gpu_queue.sh
  PYTHON=$PY "$repo/scripts/install_wheels.sh" "$wheels" fairseq || exit 1
fi
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's pe_plugin and pe_tools, not a wheel's
exec "$PY" -m pe_tools.bench.cli gpu-window "$out" --started-at "$start" "${rest[@]}"
