"""The registry of positional encodings: the only list of methods.

Architecture names, the ``--pe`` choices, recipe entries and parametrized tests all derive from
``PE_REGISTRY``. Adding a method takes one module in this package (it is imported automatically and
registers itself with ``@register_pe``), its entry in each recipe table and one defining test (docs/extending.md).
"""
from dataclasses import fields
from typing import Dict, List, Type

from ..encoding_parts.base import Dims, PositionalEncoding, Positions

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


def config_fields(cls: Type[PositionalEncoding]) -> List[str]:
    """Names of the encoding's flags (its config dataclass fields; fairseq's private ``_name`` excluded)."""
    if cls.config_cls is None:
        return []
    return [f.name for f in fields(cls.config_cls) if not f.name.startswith("_")]


def config_from_args(cls: Type[PositionalEncoding], args):
    """The encoding's config dataclass filled from parsed args (missing flags take the dataclass default)."""
    if cls.config_cls is None:
        return None
    return cls.config_cls(**{name: getattr(args, name) for name in config_fields(cls) if hasattr(args, name)})


def _import_all() -> None:
    """Import every module of this package: each is one encoding and registers it. Registry order = ``order``."""
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    ordered = sorted(PE_REGISTRY.values(), key=lambda c: (c.order, c.name))
    PE_REGISTRY.clear()
    PE_REGISTRY.update((c.name, c) for c in ordered)


_import_all()
