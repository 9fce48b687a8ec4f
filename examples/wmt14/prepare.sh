#!/usr/bin/env bash
# Prepare WMT14 En-De / En-Fr (or any line-aligned parallel corpus) for fairseq:
# download (resumable, verified) -> Moses normalise/tokenise -> joint BPE -> clean-corpus-n -> fairseq-preprocess.
#
#   examples/wmt14/prepare.sh en-de                       # -> data-bin/wmt14_en_de (the fairseq data)
#   examples/wmt14/prepare.sh en-fr --raw-dir ~/wmt14     # archives downloaded elsewhere; nothing downloaded
#   examples/wmt14/prepare.sh raw --src en --tgt de --train P --valid P --test P --out DIR [--bpe-merges N]
#
# All options: examples/wmt14/prepare.sh en-de --help. Re-running skips finished steps.
# PYTHON picks the interpreter (default: python), e.g. PYTHON=.venv/bin/python.
set -euo pipefail
ROOT="$(cd -P "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
exec "${PYTHON:-python}" "$ROOT/scripts/prepare_data.py" "$@"
