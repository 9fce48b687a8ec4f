#!/usr/bin/env bash
# Decode the test set with one training run (examples/wmt14/train.sh): average its last 5 update
# checkpoints, beam 4, lenpen 0.6, max length 1 x source + 50, BPE removed, Moses-detokenised.
#
#   examples/wmt14/generate.sh runs/posnet_embed.en-de.base.seed1
#   -> runs/posnet_embed.en-de.base.seed1/gen/{hyp,ref}.detok.de, hyp.detok.de.meta.json
#
# Options: --data DIR, --subset test, --checkpoints N, --no-detok, --pe-beyond-max {clamp,error} (sentences
# longer than LAPE's or PosNet's positions: translated with the last position reused, default, or an error).
# PYTHON picks the interpreter (default: python), e.g. PYTHON=.venv/bin/python.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
exec "${PYTHON:-python}" "$ROOT/scripts/launch.py" generate "$@"
