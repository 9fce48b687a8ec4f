#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment and install pe_plugin with its stack.
# Idempotent: a finished environment is detected by a stamp file and left alone.
#   VENV=.venv (default)   PYTHON=python3 (default)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
STAMP="$VENV/.pe_plugin_setup_v2"

# Python 3.11 or 3.12: fairseq's last release (0.12.2) does not import on Python >= 3.11, and its build for
# modern Pythons, ve-fairseq 0.12.3, has wheels for 3.11 and 3.12 only (docs/fairseq.md §Python and fairseq).
# setup.py (python_requires) and README.md state the same floor; tests/test_python_floor.py checks that they agree.
pyver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || {
  echo "error: '$PYTHON' not found; set PYTHON=/path/to/python3.11 and re-run" >&2; exit 2; }
major=${pyver%%.*}; minor=${pyver#*.}
if [ "$major" -ne 3 ] || [ "$minor" -lt 11 ] || [ "$minor" -gt 12 ]; then
  echo "error: Python $pyver is not supported; pe_plugin needs Python 3.11 or 3.12 (ve-fairseq 0.12.3 has wheels for those only)." >&2
  echo "       Set PYTHON=/path/to/python3.11 and re-run." >&2
  exit 2
fi

if [ -f "$STAMP" ] && [ "$STAMP" -nt setup.py ] && [ "$STAMP" -nt scripts/setup_env.sh ]; then
  exit 0
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)

# torch: keep an installed one, else the pinned CPU-friendly release (an unpinned torch pulls CUDA wheels).
if ! "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
  echo "[setup] installing torch==2.13.0"
  "${PIP[@]}" "torch==2.13.0"
fi

# fairseq: ve-fairseq 0.12.3, without its torchaudio requirement (which would pull another torch; translation
# never imports it). Its other requirements come first and ve-fairseq itself comes last, with --no-deps: pip
# checks the requirements of installed packages after every install that could affect them, and would report
# the missing torchaudio as an ERROR; an install with --no-deps is not checked.
need_fairseq=0
"$VENV/bin/python" -c 'import fairseq' 2>/dev/null || need_fairseq=1
if [ "$need_fairseq" -eq 1 ]; then
  echo "[setup] installing the runtime dependencies of ve-fairseq==0.12.3"
  "${PIP[@]}" cffi cython "hydra-core>=1.3.2" omegaconf "numpy>=1.21.3" regex "sacrebleu>=2.3,<2.7" tqdm bitarray \
    packaging scikit-learn
fi

echo "[setup] installing pe_plugin (editable) with its extras"
# pe_plugin's own requirements (setup.py) hold neither torch nor fairseq, so this pulls nothing heavy
"${PIP[@]}" -e ".[dev,plots]"

if [ "$need_fairseq" -eq 1 ]; then
  echo "[setup] installing ve-fairseq==0.12.3 (--no-deps)"
  "${PIP[@]}" --no-deps "ve-fairseq==0.12.3"
fi
touch "$STAMP"
echo "[setup] ready: $VENV (Python $pyver)"
