"""The registry of positional encodings: the only list of methods.

Architecture names, the ``--pe`` choices, recipe entries and parametrized tests all derive from
``PE_REGISTRY``. Adding a method takes one module below, its import here, and one defining test.
"""
from typing import Dict, Type

from .base import Dims, PositionalEncoding, Positions

PE_REGISTRY: Dict[str, Type[PositionalEncoding]] = {}


def register_pe(cls: Type[PositionalEncoding]) -> Type[PositionalEncoding]:
    if not cls.name or cls.name in PE_REGISTRY:
        raise ValueError(f"positional encoding name {cls.name!r} is empty or registered twice")
    PE_REGISTRY[cls.name] = cls
    return cls


def get_pe_class(name: str) -> Type[PositionalEncoding]:
    try:
        return PE_REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown positional encoding {name!r}; valid names: {', '.join(sorted(PE_REGISTRY))}"
        ) from None


def config_from_args(cls: Type[PositionalEncoding], args):
    """The encoding's config dataclass filled from parsed args (missing flags take the dataclass default)."""
    if cls.config_cls is None:
        return None
    from dataclasses import fields

    return cls.config_cls(**{f.name: getattr(args, f.name) for f in fields(cls.config_cls) if hasattr(args, f.name)})


# Importing the modules fills the registry (order = order of the method table in the README).
from . import none, sinusoidal, learned  # noqa: E402,F401
