"""Analysis of what a positional encoding learned: attention-map indicators (``indicators``), identical-word
probing (``probing``) and word-swap probes of translation (``swap``). Not imported by ``--user-dir``; the
command-line tools are ``scripts/probe.py`` and ``scripts/swap_probe.py``."""
