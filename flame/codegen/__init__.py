"""CUDA code generation: IR op -> CUDA C++ source (render.py, templates/, snippets.py) -> cubin
(nvrtc.py, with an on-disk cache). No GPU is needed to generate or compile."""

from flame.codegen.kernel import Kernel
from flame.codegen.render import lower_op

__all__ = ["Kernel", "lower_op"]
