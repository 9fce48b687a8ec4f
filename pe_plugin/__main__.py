"""List the encodings and their architectures, or one architecture's flags with the values it sets.

    python -m pe_plugin                                       # every encoding: level, paper, architectures
    python -m pe_plugin transformer_posnet_embed_wmt_en_de    # its flags: the encoding's, then the model's

A name that is not registered (``transformer_posnet_tiny``) is answered with the closest registered names.

``fairseq-train --user-dir pe_plugin --arch ARCH --help`` cannot show these: fairseq prints its help before it
adds the architecture's flags. Values are those ``--arch ARCH`` sets when no flag is given; every flag can be
passed to fairseq-train, fairseq-generate and fairseq-interactive.
"""
import argparse
import os
import re
import sys
import tempfile
from typing import List, Optional, Tuple


def describe(pe_cls) -> str:
    """The first sentence of the encoding module's docstring."""
    text = " ".join((sys.modules[pe_cls.__module__].__doc__ or pe_cls.name).strip().split("\n\n")[0].split())
    return re.split(r"(?<=\.)\s(?=[A-Z])", text, maxsplit=1)[0]  # not at "et al. 2017"


def architecture_flags(arch: str) -> Tuple[List[tuple], List[tuple]]:
    """(encoding flags, model flags) of ``arch``, each a list of (flag, value, help); value None: not set."""
    from dataclasses import asdict

    from fairseq import options
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.models.transformer import DEFAULT_MAX_SOURCE_POSITIONS, DEFAULT_MAX_TARGET_POSITIONS

    from .encodings import PE_REGISTRY, config_fields, config_from_args

    group = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    ARCH_MODEL_REGISTRY["pe_transformer"].add_args(group)
    with tempfile.TemporaryDirectory() as data:  # the translation task wants a data path; nothing is read
        args = options.parse_args_and_arch(options.get_training_parser(), [data, "--arch", arch])
    pe_cls = PE_REGISTRY[args.pe]
    # what the model is built with where the architecture sets nothing: the encoding's config defaults, and
    # fairseq's maximum lengths (TransformerModel.build_model)
    values = {"max_source_positions": DEFAULT_MAX_SOURCE_POSITIONS,
              "max_target_positions": DEFAULT_MAX_TARGET_POSITIONS}
    values.update(asdict(config_from_args(pe_cls, args)) if pe_cls.config_cls else {})
    values.update({k: v for k, v in vars(args).items() if v is not None})
    own = {"pe", *config_fields(pe_cls)}
    any_encoding = {name for cls in PE_REGISTRY.values() for name in config_fields(cls)}
    encoding, model = [], []
    for action in group._actions:
        row = (action.option_strings[0], values.get(action.dest), action.help or "")
        if action.dest in own:
            encoding.append(row)
        elif action.dest not in any_encoding:
            model.append(row)
    return encoding, model


def _rows(rows) -> str:
    width = max(len(f"{flag} {value}") for flag, value, _ in rows)
    return "\n".join(f"  {f'{flag} {value}':{width}}  {text}" for flag, value, text in rows)


def closest_architectures(name: str, n: int = 3) -> List[str]:
    """The registered pe_plugin architectures nearest to ``name`` (difflib's ratio), best first."""
    import difflib

    from .models.architectures import architecture_names

    return difflib.get_close_matches(name, architecture_names(), n=n, cutoff=0.6)


def unknown_architecture(name: str) -> str:
    """One line for an architecture name pe_plugin does not register: the closest names, or what it is instead."""
    from .models.architectures import architecture_names

    close = closest_architectures(name)
    if close:
        return (f"{name!r} is not a pe_plugin architecture; did you mean {', '.join(close)}? "
                f"(`python -m pe_plugin` lists all {len(architecture_names())})")
    return (f"{name!r} is not a pe_plugin architecture: the names are transformer_<pe>_<size> "
            f"(`python -m pe_plugin` lists all {len(architecture_names())})")


def main(argv: Optional[List[str]] = None) -> int:
    from .encodings import PE_REGISTRY
    from .models.architectures import architecture_names
    from .naming import CLASS_OF_SUFFIX, arch_name

    parser = argparse.ArgumentParser(prog="python -m pe_plugin", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("arch", nargs="?", metavar="ARCH",
                        help="an architecture, e.g. transformer_posnet_embed_wmt_en_de (default: list them all)")
    a = parser.parse_args(argv)
    if a.arch is not None and a.arch not in architecture_names():
        parser.error(unknown_architecture(a.arch))
    if a.arch is None:
        for name, cls in PE_REGISTRY.items():
            print(f"{name:13s} {cls.level:9s} {describe(cls)}")
            print(f"{'':23s} " + ", ".join(arch_name(name, suffix) for suffix in CLASS_OF_SUFFIX))
        return 0
    encoding, model = architecture_flags(a.arch)
    pe = dict((flag, value) for flag, value, _ in encoding)["--pe"]
    print(f"{a.arch}: {describe(PE_REGISTRY[pe])}\n\nencoding flags:\n{_rows(encoding)}\n\nmodel flags:\n{_rows(model)}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `python -m pe_plugin ARCH | head` (docs/design.md): the reader stopped, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        sys.exit(0)
