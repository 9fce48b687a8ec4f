"""Encodings with a position limit, and what they do with positions beyond it (``--pe-beyond-max``;
docs/encodings.md §Positions beyond L_max).

LAPE has one learned embedding per position and PosNet one learned kernel per position: L_max rows, where
L_max is the side's --max-source/target-positions (PosNet: capped by --posnet-max-positions, default 256; for
a PosNet module shared by both sides, the larger side's). A sequence of more than L_max tokens has positions
they have no row for. The model flag ``--pe-beyond-max`` says what happens then:

  error (default)  the encoding raises a ValueError that names the side, the length, L_max and the fixes.
                   fairseq-train and fairseq-generate never get that far: the model reports L_max through
                   ``max_positions()``, so fairseq-train skips longer training pairs (with a warning) and
                   fairseq-generate stops before it decodes anything, naming the first sentence that does not
                   fit ("Size of sample #ID is invalid"). Its own suggestion there,
                   --skip-invalid-size-inputs-valid-test, drops such sentences from the output; do not use it
                   for a test set. ``scripts/launch.py generate`` checks the test set against the checkpoint
                   before decoding and names every sentence beyond L_max.
  clamp            positions p >= L_max use row L_max - 1 (LAPE: the last position embedding; PosNet: the last
                   kernel phi_{L_max-1}), and each module logs one warning the first time. The model then
                   reports no length limit (``max_positions()`` 100,000), so fairseq-generate decodes every
                   sentence and a hypothesis may itself run past L_max (its later tokens reuse the last row).
                   This is for decoding a test set that holds a few sentences longer than L_max: learned rows
                   cannot extrapolate, so those sentences get an approximate position signal, and a report
                   should say how many there were (``scripts/launch.py generate`` counts them). At training
                   time it would also switch off fairseq's length filter and train long pairs on clamped rows.

Checkpoints keep the flag they were trained with (``error`` unless set); fairseq-generate changes it with
``--model-overrides "{'pe_beyond_max': 'clamp'}"``. Encodings without a limit (SAPE, the relative ones) are not
affected, except that under ``clamp`` the model no longer caps inputs at --max-source/target-positions either.
"""
import logging

import torch

from .base import as_positions

logger = logging.getLogger("pe_plugin")

BEYOND_MAX_CHOICES = ("error", "clamp")
UNLIMITED = int(1e5)  # what the model reports as its maximum length under ``clamp`` (fairseq's own "no limit")


def overrides_hint() -> str:
    return "--pe-beyond-max clamp (fairseq-generate: --model-overrides \"{'pe_beyond_max': 'clamp'}\")"


class BoundedPositions:
    """Mixin for a ``PositionalEncoding`` whose ``max_positions`` is a hard limit (L_max rows).

    The model sets ``beyond_max`` from ``--pe-beyond-max``. ``check_length`` is called with the positions of
    every call: within L_max it does nothing; beyond, it raises (``error``) or warns once (``clamp``), and the
    encoding then reads row L_max - 1 for those positions (``clamp_positions``, or PosNet's kernel product).
    It reads no value from the device unless the padded length itself exceeds L_max (``Positions.bound``, a
    host fact): only then does it look for the largest position, once per call."""

    beyond_max: str = "error"

    def check_length(self, pos) -> None:
        pos = as_positions(pos)
        limit = self.max_positions
        if pos.bound <= limit:  # no position can reach L_max: nothing to read
            return
        if self.beyond_max == "clamp" and getattr(self, "_warned_beyond_max", False):
            return  # clamped already, and said so once
        top = int(pos.q.max()) if pos.q.numel() else -1
        if top < limit:
            return
        flag = self.limit_flag()
        if self.beyond_max == "clamp":
            if not getattr(self, "_warned_beyond_max", False):
                self._warned_beyond_max = True
                logger.warning(
                    "pe '%s' (%s): a sequence of length %d exceeds its %d positions; positions >= %d use row %d "
                    "(--pe-beyond-max clamp). Rows are learned per position and cannot extrapolate, so such "
                    "sequences get an approximate position signal (warned once per module)",
                    self.name, self.dims.side, top + 1, limit, limit, limit - 1,
                )
            return
        raise ValueError(
            f"{self.dims.side} sequence of length {top + 1} exceeds the {limit} positions that pe '{self.name}' "
            f"supports (L_max, from {flag} at training); retrain with a larger {flag}, shorten the input, or "
            f"decode with the positions beyond L_max clamped to the last one: {overrides_hint()}"
        )

    def limit_flag(self) -> str:
        """The training flag that set L_max (named in the error's fix)."""
        return f"--max-{'source' if self.dims.side == 'encoder' else 'target'}-positions"

    def clamp_positions(self, pos: torch.Tensor) -> torch.Tensor:
        """Positions with those >= L_max replaced by L_max - 1 (call ``check_length`` first)."""
        return pos.clamp_max(self.max_positions - 1)
