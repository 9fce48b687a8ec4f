"""Line styles for plots with many systems: matplotlib's default cycle has 10 colours, so the 11th system
would share the 1st one's colour (a Multi30k report has 17). Colour and marker together stay distinct for 40."""
from typing import Dict

MARKERS = ("o", "s", "^", "D")


def system_style(i: int) -> Dict[str, str]:
    """The colour and marker of the i-th system (0-based) of a plot."""
    return {"color": f"C{i % 10}", "marker": MARKERS[i // 10 % len(MARKERS)]}
