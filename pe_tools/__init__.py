"""pe_tools: the command-line tools around pe_plugin (data preparation, recipes, scoring, averaging, probing,
benchmarks, the demo).

A second top-level package of the same distribution, because importing ``pe_plugin`` imports fairseq and torch
and registers fairseq models (``fairseq-train --user-dir pe_plugin`` imports it): tools that only read and write
text must not pay for that. ``pe_tools``, its shared helpers (``file_io``, ``command_line``, ``fairseq_plugin``,
``machine``, ``figures``), ``pe_tools.naming``, ``pe_tools.data`` and ``pe_tools.scoring`` never import torch,
fairseq or pe_plugin (tests/test_install.py checks it); the modules that train, load or time models
(``average``, ``probe``, ``swap_probe``, ``bench``, ``demo``, ``length_experiment``) may.
"""
