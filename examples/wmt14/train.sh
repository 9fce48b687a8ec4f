#!/usr/bin/env bash
# Train one method of pe_tools/recipes/wmt14/methods.toml on prepared WMT14 data (examples/wmt14/prepare.sh).
#
#   examples/wmt14/train.sh posnet_embed                          # en-de, base, seed 1 -> runs/posnet_embed.en-de.base.seed1
#   examples/wmt14/train.sh sape --pair en-fr --size big --seed 2
#   examples/wmt14/train.sh rpe --gpus 8                          # world size 8, --update-freq 1
#   examples/wmt14/train.sh t5 --dry-run                          # print the fairseq command only
#   examples/wmt14/train.sh at5 -- --max-update 1000              # flags after -- go to fairseq-train
#
# Re-running the same command resumes from the run's checkpoint_last.pt.
# PYTHON picks the interpreter (default: python), e.g. PYTHON=.venv/bin/python.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
exec "${PYTHON:-python}" "$ROOT/scripts/launch.py" train "$@"
