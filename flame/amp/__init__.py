"""flame.amp: mixed precision, with PyTorch's names: `autocast` (also flame.autocast) and
`GradScaler` (loss scaling for float16), `custom_fwd` / `custom_bwd` (autograd Functions under autocast)."""

from flame.amp.custom_amp import custom_bwd, custom_fwd
from flame.amp.grad_scaler import GradScaler
from flame.frontend.autocast import Float8Recipe, autocast, get_autocast_dtype, get_fp8_recipe, is_autocast_enabled
from flame.frontend.fp8 import float8_state

__all__ = ["Float8Recipe", "GradScaler", "autocast", "custom_bwd", "custom_fwd", "float8_state", "get_autocast_dtype",
           "get_fp8_recipe", "is_autocast_enabled"]
