"""A run directory and what is known of it: its identity (identity.py)."""
