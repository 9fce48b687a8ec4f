"""pe_tools/tables.py, the one writer of markdown tables: cells, alignment and the check of ``align``."""
import pytest

from pe_tools.tables import markdown_table


def test_cells_rule_and_default_alignment():
    """A str as given, an int with thousands separators, a float to 3 significant digits, None an empty cell; by
    default a column is right-aligned where the first row's cell is a number."""
    text = markdown_table(["name", "n", "x"], [["a", 12345, 0.123456], ["b", None, 2.0]])
    assert text == "| name | n | x |\n| --- | ---: | ---: |\n| a | 12,345 | 0.123 |\n| b | | 2 |"
    assert markdown_table(["a", "b"], [[1, "x"]], compact_rule=True).splitlines()[1] == "|---:|---|"


@pytest.mark.parametrize("align", ["l", "lrr", "lx", "rc", "", "LR"])
def test_align_is_one_of_l_or_r_for_each_column(align):
    """``align`` of another length than the headers, or holding a letter other than l and r, is refused naming
    it, whichever of the two is wrong."""
    with pytest.raises(ValueError, match=rf"align {align!r}: one of l or r for each of the 2 columns"):
        markdown_table(["a", "b"], [["x", 1]], align)
