"""A run directory and what is known of it: its records, read and written by run_dir.py alone, and its identity
(identity.py)."""
