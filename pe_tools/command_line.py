"""Command-line helpers every tool shares: an error message and its exit status, and an argparse type for counts
with a floor. Standard library only."""
import argparse
import sys


# -------------------------------------------------------------------------------------------- command line
def fail(msg: str) -> int:
    """Print ``error: MSG`` to stderr; return 2, a command's exit status for input it refuses."""
    print(f"error: {msg}", file=sys.stderr)
    return 2


def int_at_least(low: int):
    """An argparse ``type``: an integer >= ``low``, else an error naming the valid range."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low} (got {value})")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse
