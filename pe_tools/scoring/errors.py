"""The one error type of the scoring tools (its own module, so that every reader of inputs can raise it without
importing the others)."""


class InputError(Exception):
    """Invalid input; reported as one line, and nothing is written."""
