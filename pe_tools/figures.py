"""Figures: matplotlib (an optional dependency, imported on first use) on the Agg backend, and a figure as PNG
bytes."""
import io
from typing import Any


# ------------------------------------------------------------------------------------------------ figures
def pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no display), with matplotlib's logger at WARNING (fairseq
    may leave the root logger at DEBUG). Imported on first use: matplotlib is an optional dependency."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png_bytes(fig, **savefig: Any) -> bytes:
    """``fig`` as PNG bytes (``savefig``: matplotlib's savefig keywords, e.g. dpi); the figure is closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", **savefig)
    pyplot().close(fig)
    return buf.getvalue()
