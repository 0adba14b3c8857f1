"""flame.cuda.amp: torch.cuda.amp's names, which training scripts written before torch.amp still use
(`scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))`,
`with torch.cuda.amp.autocast(dtype=torch.bfloat16):`): the same GradScaler and autocast as flame.amp,
for device "cuda", with torch.cuda.amp's signatures (no device argument). `flame.cuda.amp.GradScaler`
and `from flame.cuda.amp import GradScaler, autocast` both reach them."""

from __future__ import annotations

import warnings
from typing import Any

from flame.amp import custom_amp
from flame.amp.grad_scaler import GradScaler as _GradScaler
from flame.frontend.autocast import autocast as _autocast
from flame.ir.dtypes import f16

__all__ = ["GradScaler", "autocast", "custom_bwd", "custom_fwd"]


class GradScaler(_GradScaler):
    """torch.cuda.amp.GradScaler: flame.amp.GradScaler("cuda", ...)."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ):
        super().__init__(
            "cuda",
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled,
        )


class autocast(_autocast):  # noqa: N801 - PyTorch's name
    """torch.cuda.amp.autocast: flame.autocast("cuda", ...), float16 unless dtype says otherwise."""

    def __init__(self, enabled: bool = True, dtype: Any = f16, cache_enabled: bool = True):
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


def custom_fwd(fwd=None, *, cast_inputs=None):
    """torch.cuda.amp.custom_fwd: flame.amp.custom_fwd(device_type="cuda"), with torch's FutureWarning."""
    warnings.warn("`flame.cuda.amp.custom_fwd(args...)` is deprecated. Please use `flame.amp.custom_fwd(args..., "
                  "device_type='cuda')` instead.", FutureWarning, stacklevel=2)
    return custom_amp.custom_fwd(fwd, device_type="cuda", cast_inputs=cast_inputs)


def custom_bwd(bwd):
    """torch.cuda.amp.custom_bwd: flame.amp.custom_bwd(device_type="cuda"), with torch's FutureWarning."""
    warnings.warn("`flame.cuda.amp.custom_bwd(args...)` is deprecated. Please use `flame.amp.custom_bwd(args..., "
                  "device_type='cuda')` instead.", FutureWarning, stacklevel=2)
    return custom_amp.custom_bwd(bwd, device_type="cuda")
