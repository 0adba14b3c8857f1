"""flame.amp: mixed precision, with PyTorch's names: `autocast` (also flame.autocast) and
`GradScaler` (loss scaling for float16)."""

from flame.amp.grad_scaler import GradScaler
from flame.frontend.autocast import autocast, get_autocast_dtype, is_autocast_enabled

__all__ = ["GradScaler", "autocast", "get_autocast_dtype", "is_autocast_enabled"]
