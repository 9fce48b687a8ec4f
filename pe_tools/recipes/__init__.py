"""The recipes as data: pe_tools/recipes/RECIPE/methods.toml (what launch.py trains: [common], [size.*],
[method.*]) and corpora.toml (what pe-prepare downloads: [archive.*], [pair.*], [prepare]). They ship as package
data and are found with importlib.resources, so an installed pe_tools needs no checkout."""
from importlib.resources import files
from pathlib import Path
from typing import List

KINDS = ("methods", "corpora")


def recipes_dir() -> Path:
    return Path(str(files(__name__)))


def recipe_names(kind: str = "methods") -> List[str]:
    """The recipes that have a ``KIND.toml`` table, sorted."""
    return sorted(p.parent.name for p in recipes_dir().glob(f"*/{kind}.toml"))


def table_path(recipe: str, kind: str = "methods") -> Path:
    """pe_tools/recipes/RECIPE/KIND.toml (it may not exist: the caller reports that)."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: one of {', '.join(KINDS)}")
    return recipes_dir() / recipe / f"{kind}.toml"
