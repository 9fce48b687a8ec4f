"""The recipes as data: pe_tools/recipes/RECIPE/methods.toml (what pe-train trains: [common], [size.*],
[method.*]) and corpora.toml (what pe-prepare downloads: [archive.*], [pair.*], [prepare]). They ship as package
data and are found with importlib.resources, so an installed pe_tools needs no checkout."""
from importlib.resources import files
from pathlib import Path
from typing import List

from ..file_io import load_toml

KINDS = ("methods", "corpora")


def recipes_dir() -> Path:
    return Path(str(files(__name__)))


def recipe_names(kind: str = "methods") -> List[str]:
    """The recipes that have a ``KIND.toml`` table, sorted."""
    return sorted(p.parent.name for p in recipes_dir().glob(f"*/{kind}.toml"))


def table_path(recipe: str, kind: str = "methods") -> Path:
    """pe_tools/recipes/RECIPE/KIND.toml (it may not exist: the caller reports that), or RECIPE itself when it is
    the path of a .toml file (a table of the user's own, e.g. pe-train --recipe my/methods.toml)."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: one of {', '.join(KINDS)}")
    if recipe.endswith(".toml"):
        return Path(recipe)
    return recipes_dir() / recipe / f"{kind}.toml"


def is_recipe(recipe: str) -> bool:
    """A shipped recipe's name, or the path of a methods table file."""
    return recipe in recipe_names() or (recipe.endswith(".toml") and Path(recipe).is_file())


def load_table(recipe: str, kind: str = "methods") -> dict:
    """The ``KIND.toml`` table of ``recipe``; raises file_io.TomlError naming the file if it is missing or invalid."""
    return load_toml(table_path(recipe, kind), "recipe table" if kind == "methods" else "corpora table")


def table_pairs(table: dict) -> List[str]:
    """The language pairs (SRC-TGT) a methods table trains: those its sizes give an architecture for, in table
    order (a size ``like`` another has that one's)."""
    return list(dict.fromkeys(pair for size in table["size"].values() for pair in size.get("arch", {})))


def all_pairs() -> List[str]:
    """The language pairs of every recipe's methods table, sorted (what ``--pair`` accepts)."""
    return sorted({pair for recipe in recipe_names("methods") for pair in table_pairs(load_table(recipe))})
