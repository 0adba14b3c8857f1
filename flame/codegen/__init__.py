"""CUDA code generation: a FusionGroup (a single op is a group of one) -> CUDA C++ source (lower.py,
templates/, snippets.py, with the shared emit helpers in kernel.py) -> cubin (nvrtc.py, with an
on-disk cache). No GPU is needed to generate or compile."""

from flame.codegen.kernel import Config, Kernel
from flame.codegen.lower import kernel_inputs, lower, single

__all__ = ["Config", "Kernel", "kernel_inputs", "lower", "single"]
