#!/usr/bin/env bash
# A GPU window in one command: one queue file's runs trained side by side, decoded, recorded and packed
# into OUTDIR within the budget (devtools/gpu_queue.py holds the steps; docs/results.md §6,000 updates). From the
# checkout's root:
#   scripts/gpu_queue.sh QUEUE OUTDIR [--wheels DIR] [--data DIR] [--budget SECONDS] [--commit REV] [--rehearse]
# --wheels DIR: installed first when fairseq or sacremoses does not import (scripts/gpu_node.sh); the budget
# (default 570 s) counts from this script's start, the install included. OUTDIR receives log.txt, window.json and
# one RUN.tar.gz per recorded run (python -m devtools.gpu_queue unpack OUTDIR, here, puts them in the checkout).
# --rehearse: the same on the CPU at tiny size.
set -uo pipefail
start=$(date +%s)
if [ $# -lt 2 ] || [[ $1 == -* ]] || [[ $2 == -* ]]; then
  echo "usage: $0 QUEUE OUTDIR [--wheels DIR] [--data DIR] [--budget SECONDS] [--commit REV] [--rehearse]" >&2
  exit 2
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
exec "$repo/scripts/gpu_node.sh" "fairseq sacremoses" "${PYTHON:-python3}" -m devtools.gpu_queue run "$1" "$2" \
  --started-at "$start" "${@:3}"
