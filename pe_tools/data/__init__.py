"""Preparing parallel text for fairseq (pe-prepare): files, download, corpora, text steps, pipeline, cli. Never
imports torch, fairseq or pe_plugin (fairseq-preprocess runs as a subprocess; tests/test_install.py checks)."""
