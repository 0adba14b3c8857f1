"""Whether the GPU must compute the same bits at every run: torch.use_deterministic_algorithms and
torch.backends.cudnn.deterministic, as flame's process settings (flame.use_deterministic_algorithms and
flame.backends.cudnn.deterministic set them).

Two things on the GPU add in an order that changes from run to run: flame's kernels that accumulate
floating-point values with atomics (a scatter_add's, which an index_add's gradient is, a segment_sum's,
which an embedding's is, and the generated flash-attention backward's dQ), and cuDNN engines carrying
the NONDETERMINISTIC numerical note (some convolution gradients; the attention backward unless asked for
its deterministic algorithm). With `mode()` "error" a plan holding such a kernel is refused when it is made (a
DeterminismError naming the op and the user's line, as torch raises for an op without a deterministic
implementation); with "warn" it warns instead. With `cudnn()` cuDNN is asked for deterministic engines
(the convolutions deselect nondeterministic ones, the attention backward takes cuDNN's deterministic
algorithm). The NumPy reference executor is deterministic whatever these say. A compiled step reads the
settings when it is compiled (they are part of its key: setting them later compiles again)."""

from __future__ import annotations

_MODE = [""]  # "" (off), "error" or "warn"
_CUDNN = [False]


def set_mode(enabled: bool, warn_only: bool = False) -> None:
    """torch.use_deterministic_algorithms(enabled, warn_only=warn_only)."""
    _MODE[0] = ("warn" if warn_only else "error") if enabled else ""


def mode() -> str:
    """"" (off), "error" or "warn": what a plan holding a nondeterministic kernel gets (module doc)."""
    return _MODE[0]


def set_cudnn(enabled: bool) -> None:
    _CUDNN[0] = bool(enabled)


def cudnn_set() -> bool:
    """What flame.backends.cudnn.deterministic was set to (read back as torch's)."""
    return _CUDNN[0]


def cudnn() -> bool:
    """cuDNN is asked for deterministic engines: flame.backends.cudnn.deterministic, or any mode()."""
    return _CUDNN[0] or bool(_MODE[0])
