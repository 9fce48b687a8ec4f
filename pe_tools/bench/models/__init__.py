"""pe-bench models: forward time, training-step time and peak training memory of every registered encoding and of
stock fairseq's transformer (row ``stock``), as ratios to SAPE (the paper's Figure 2 and Table 3). Each
(size, length, encoding) is built as the ``--recipe``'s methods table builds it and measured on a padded batch of
``--max-tokens`` in a fresh interpreter, round-robin over ``--rounds``; the fastest times and the median memory
are kept. docs/benchmarks.md §Model benchmark describes the method, the memory figures and the outputs.

    pe-bench models                        # tiny and base sizes, every encoding and stock, L=30, 4096 tokens
    pe-bench models --sizes base big --lengths 20 50 100 200 --rounds 5 --out-dir runs/bench
    pe-bench models --device cuda --fp16 --sizes base --lengths 20 50 100 200 --out-dir runs/gpu
    pe-bench models --sizes tiny --pe sape posnet_embed --device cpu --threads 1

Modules: cli (arguments, the rounds, settings), build (the models, the optimizer, the padded batches), measure
(times and memory in one process, and the summary over rounds), report (tables, chart, JSON and CSV files).
"""
from .cli import HELP, NAME, add_args, run  # noqa: F401  (what pe_tools.bench.cli discovers)
