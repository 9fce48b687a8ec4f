"""Development tools of the checkout (the mutation check and the map of which tests execute which module). They
assume a checkout (tests/, git) and are not installed: setup.py's find_packages takes pe_plugin and pe_tools only
(tests/test_mutation.py checks it). Run them from the checkout's root: ``python scripts/mutation_check.py``."""
