#!/usr/bin/env bash
# A GPU window in one command: one queue file's runs trained side by side, decoded, recorded and packed
# into OUTDIR within the budget (pe_tools/gpu_queue.py holds the steps; docs/results.md §6,000 updates). From the
# checkout's root:
#   scripts/gpu_queue.sh QUEUE OUTDIR [--wheels DIR] [--data DIR] [--budget SECONDS] [--commit REV] [--rehearse]
# --wheels DIR: installed first when fairseq or sacremoses does not import (scripts/install_wheels.sh); the budget
# (default 570 s) counts from this script's start, the install included. OUTDIR receives log.txt, window.json and
# one RUN.tar.gz per recorded run (python -m pe_tools.gpu_queue unpack OUTDIR, here, puts them in the checkout).
# --rehearse: the same on the CPU at tiny size.
set -uo pipefail
start=$(date +%s)
if [ $# -lt 2 ] || [[ $1 == -* ]] || [[ $2 == -* ]]; then
  echo "usage: $0 QUEUE OUTDIR [--wheels DIR] [--data DIR] [--budget SECONDS] [--commit REV] [--rehearse]" >&2
  exit 2
fi
queue=$1 out=$2; shift 2
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
  PYTHON=$PY "$repo/scripts/install_wheels.sh" "$wheels" fairseq sacremoses || exit 1
fi
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's pe_tools (the runs train from pinned code)
exec "$PY" -m pe_tools.gpu_queue run "$queue" "$out" --started-at "$start" "${rest[@]}"
