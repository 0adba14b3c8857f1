"""Executors: the NumPy reference (always available) and the CUDA one (when a GPU is usable)."""
