"""Scoring translations (pe-evaluate): metrics, inputs, significance, ngram (Figure 4), length buckets, report,
cli. Needs sacrebleu and sacremoses only: never torch, fairseq or pe_plugin (tests/test_install.py checks)."""
