"""Fused GPU kernels (Triton), imported on demand: the plugin runs without Triton."""
