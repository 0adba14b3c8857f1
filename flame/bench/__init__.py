"""flame's fusion benchmark suite (`flame bench`): each case runs on flame and, where installed, on
PyTorch eager, torch.compile and JAX jit, in one process on one device, and reports medians,
achieved bandwidth or flop rate against measured ceilings, kernels per call, compile time and
memory. The cases live in one table (flame.bench.table); benchmarks/README.md explains the columns.
"""

from flame.bench.run import main, run_suite, select

__all__ = ["main", "run_suite", "select"]
