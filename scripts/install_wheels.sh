#!/usr/bin/env bash
# The offline install of a GPU window, shared by scripts/gpu_benchmarks.sh and scripts/gpu_queue.sh:
#   scripts/install_wheels.sh DIR [MODULE...]      (default MODULE: fairseq)
# does nothing when every MODULE imports; else installs the wheels of DIR into $PYTHON (default python3) without
# the network. A folder of scripts/gather_wheels.sh (it holds requirements.txt) goes in as
# docs/benchmarks.md §Offline install has it: its requirements, then ve-fairseq without its own (they name torch
# and torchaudio). A folder of chosen wheels only (no requirements.txt; python -m devtools.gpu_queue wheels: what
# the GPU image lacks) goes in with --no-deps.
set -uo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 DIR [MODULE...]" >&2
  exit 2
fi
wheels=$1; shift
modules=("${@:-fairseq}")
PY=${PYTHON:-python3}
check=$(printf 'import %s\n' "${modules[@]}")
if "$PY" -c "$check" >/dev/null 2>&1; then
  exit 0
fi
echo "installing the wheels of $wheels" >&2
if [ -f "$wheels/requirements.txt" ]; then
  "$PY" -m pip install -q --no-index --find-links "$wheels" -r "$wheels/requirements.txt" &&
    "$PY" -m pip install -q --no-index --find-links "$wheels" --no-deps ve-fairseq==0.12.3
else
  "$PY" -m pip install -q --no-index --no-deps "$wheels"/*.whl
fi || { echo "error: the wheels of $wheels did not install" >&2; exit 1; }
"$PY" -c "$check" || { echo "error: installed, but ${modules[*]} does not import" >&2; exit 1; }
