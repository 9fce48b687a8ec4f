"""Development tools of the checkout: the mutation check and the map of which tests execute which module, the GPU
queue of the recorded 6,000-update runs (``gpu_queue``) and the collector of the recorded Multi30k analysis
(``collect_analysis``). They assume a checkout (tests/, scripts/, examples/, git) and are not installed:
setup.py's find_packages takes pe_plugin and pe_tools only (tests/test_mutation.py and tests/test_install.py check
it). Run them from the checkout's root: ``python scripts/mutation_check.py``, ``python -m devtools.gpu_queue``."""
