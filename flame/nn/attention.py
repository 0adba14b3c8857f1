"""torch.nn.attention's backend choice for scaled_dot_product_attention: `sdpa_kernel(backends)` and
`SDPBackend`. Inside the block, attention ops are planned with flame's nearest lowering
(runtime/backend.attention_lowering, FLAME_ATTENTION's choices):

- MATH alone: "decomposed" (the unfused graph: matmul, softmax, matmul);
- FLASH_ATTENTION or EFFICIENT_ATTENTION (without CUDNN_ATTENTION): "flash", flame's generated
  flash-attention kernel wherever its template covers the op, else as "auto";
- CUDNN_ATTENTION (without the two above): "cudnn", cuDNN where it runs the op, else the unfused graph;
- CUDNN_ATTENTION with FLASH_ATTENTION or EFFICIENT_ATTENTION: "auto".

Where a chosen backend cannot run an op, flame runs the unfused graph instead of raising torch's "No
available kernel" (the unfused graph is always available). A compiled step that calls
scaled_dot_product_attention is traced again when it is called under another choice (the choice is one
of its guards); eager calls are planned per choice. The choice changes the CUDA target's plans only; the
reference executor computes every backend's attention alike."""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator

from flame.runtime.backend import choose_attention_lowering

__all__ = ["SDPBackend", "sdpa_kernel"]


class SDPBackend(enum.Enum):
    """torch's backends of scaled_dot_product_attention (the same names and values)."""

    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


def _lowering(chosen: set[SDPBackend]) -> str:
    fused = chosen & {SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION}
    if SDPBackend.CUDNN_ATTENTION in chosen:
        return "auto" if fused else "cudnn"
    if fused:
        return "flash"
    return "decomposed"


@contextlib.contextmanager
def sdpa_kernel(backends: SDPBackend | list[SDPBackend], set_priority: bool = False) -> Iterator[None]:
    """Plan scaled_dot_product_attention inside the block with the backends given (module docstring);
    set_priority is accepted as torch's (flame's lowering has one order). An empty list, or one of
    ERROR / OVERRIDEABLE alone, is refused as no backend flame has."""
    chosen = {backends} if isinstance(backends, SDPBackend) else set(backends)
    if not chosen or not all(isinstance(b, SDPBackend) for b in chosen):
        raise TypeError(f"sdpa_kernel: backends must be an SDPBackend or a list of them, got {backends!r}")
    usable = chosen - {SDPBackend.ERROR, SDPBackend.OVERRIDEABLE}
    if not usable:
        raise ValueError(f"sdpa_kernel: none of {sorted(b.name for b in chosen)} is a backend flame has "
                         f"(MATH, FLASH_ATTENTION, EFFICIENT_ATTENTION, CUDNN_ATTENTION)")
    with choose_attention_lowering(_lowering(usable)):
        yield
