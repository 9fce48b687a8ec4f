#!/usr/bin/env bash
# Gather every wheel the project needs, except torch, for one Python version into a folder, for a node without
# network access that has its own torch (docs/benchmarks.md §Offline install):
#   scripts/gather_wheels.sh PYVER OUTDIR          e.g. scripts/gather_wheels.sh 3.12 wheels-py312
# OUTDIR then holds: the project's own wheel (pe_plugin, pe_tools), ve-fairseq 0.12.3 and its runtime
# requirements less torch and torchaudio, antlr4-python3-runtime 4.9.3 built here (it is published as an sdist
# only), matplotlib (pe-bench charts), and requirements.txt. On the node, next to its torch:
#   python -m pip install --no-index --find-links OUTDIR -r OUTDIR/requirements.txt
#   python -m pip install --no-index --find-links OUTDIR --no-deps ve-fairseq==0.12.3
# Linux x86_64 wheels (manylinux); this machine needs the network to PyPI, the node none.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 PYVER OUTDIR   (PYVER 3.11 or 3.12: ve-fairseq 0.12.3 has wheels for those only)" >&2
  exit 2
fi
pyver=$1 out=$2
case "$pyver" in 3.11|3.12) ;; *) echo "error: PYVER must be 3.11 or 3.12 (got $pyver)" >&2; exit 2 ;; esac
repo=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
mkdir -p "$out"
out=$(cd "$out" && pwd)
pip=("$PY" -m pip --disable-pip-version-check)
tag=${pyver/./}
target=(--python-version "$pyver" --implementation cp --abi "cp$tag" --only-binary=:all:
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64
        --platform linux_x86_64)

# 1. the wheels built here: antlr4 (pure Python, sdist only on PyPI) and the project's own
"${pip[@]}" wheel -q --no-deps -w "$out" "antlr4-python3-runtime==4.9.3"
"${pip[@]}" wheel -q --no-deps -w "$out" "$repo"

# 2. fairseq's runtime requirements (ve-fairseq's own, less torch and torchaudio, as scripts/setup_env.sh installs
#    them), the project's (setup.py install_requires) and matplotlib, resolved for PYVER; antlr4 found in OUTDIR
cat > "$out/requirements.txt" <<'EOF'
pe_plugin
cffi
cython
hydra-core>=1.3.2
omegaconf
numpy>=1.21.3
regex
sacrebleu>=2.3
tqdm
bitarray
packaging
scikit-learn
matplotlib
EOF
"${pip[@]}" download -q -d "$out" --find-links "$out" "${target[@]}" -r "$out/requirements.txt"

# 3. ve-fairseq itself without its requirements (they name torch and torchaudio)
"${pip[@]}" download -q -d "$out" --no-deps "${target[@]}" "ve-fairseq==0.12.3"

if ls "$out" | grep -qiE '^(torch|torchaudio|nvidia)[-_]'; then
  echo "error: a torch, torchaudio or nvidia wheel was gathered into $out" >&2
  exit 1
fi
echo "gathered $(ls "$out"/*.whl | wc -l) wheels for Python $pyver into $out"
