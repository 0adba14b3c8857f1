"""torch.backends.cuda: `matmul.allow_tf32` is flame's runtime.matmul.allow_tf32 (flame/backends/__init__.py)."""

from __future__ import annotations

from flame.runtime import device as _device


class _Matmul:
    """torch.backends.cuda.matmul's switches."""

    _precision = "highest"

    def __init__(self):
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True

    @property
    def allow_tf32(self) -> bool:
        from flame.runtime import matmul

        return matmul.allow_tf32

    @allow_tf32.setter
    def allow_tf32(self, value: bool) -> None:
        from flame.runtime import matmul

        matmul.allow_tf32 = bool(value)


matmul = _Matmul()


def is_built() -> bool:
    """Whether this flame can run on a GPU here (CuPy and a device: flame.cuda.is_available)."""
    return _device.cuda_available()
