"""pe-bench models: forward time, training-step time and training memory of every registered encoding and of stock
fairseq's transformer, as ratios to SAPE (the paper's Figure 2 and Table 3; docs/benchmarks.md §Model benchmark).

Modules: cli (arguments, the rounds, settings), build (the models, the optimizer, the padded batches), measure
(one measurement, and the summary of its rounds), report (tables and chart).
"""
from .cli import HELP, NAME, add_args, run  # noqa: F401  (what pe_tools.bench.cli discovers)
