"""The one writer of markdown tables: every tool's tables (pe-bench's, pe-evaluate's, the demo's, the length
experiment's, the mutation check's summary) go through ``markdown_table``. Standard library only."""
from typing import Optional, Sequence


def _cell(v) -> Optional[str]:
    """A cell's text: a str as given, an int with thousands separators, a float to 3 significant digits; None stays
    None (an empty cell, written ``| |``)."""
    if v is None or isinstance(v, str):
        return v
    return f"{v:,}" if isinstance(v, int) else f"{v:.3g}"


def _line(cells) -> str:
    """``| a | b |``; a None cell is written ``| |`` (an empty string ``|  |``)."""
    return "|" + "|".join(" " if c is None else f" {c} " for c in cells) + "|"


def markdown_table(headers: Sequence, rows: Sequence[Sequence], align: Optional[str] = None,
                   compact_rule: bool = False) -> str:
    """A GitHub markdown table, without a final newline: the header line, the rule, one line per row.

    ``align``: one letter a column, ``l`` (left) or ``r`` (right); by default right where the first row's cell is
    not a str (a number). ``compact_rule``: the rule without spaces (``|---|---:|``, the result pages' tables)
    instead of ``| --- | ---: |`` (pe-bench's)."""
    if align is None:
        align = "".join("r" if rows and not isinstance(rows[0][i], str) else "l" for i in range(len(headers)))
    if len(align) != len(headers) or set(align) - {"l", "r"}:
        raise ValueError(f"align {align!r}: one of l or r for each of the {len(headers)} columns")
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = [_line(map(_cell, headers)), "|" + "|".join(rule) + "|" if compact_rule else _line(rule)]
    lines += [_line(map(_cell, row)) for row in rows]
    return "\n".join(lines)
