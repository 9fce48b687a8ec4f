"""Scoring tests written for the survivors of the mutation check (scripts/mutation_check.py, docs/testing.md,
examples/mutation/summary.md): each checks a behaviour of pe_tools/scoring that a recorded mutant changed while the
other tests passed, against an independent reference."""
