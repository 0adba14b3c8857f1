"""flame.nn.utils: gradient tools (gradients.py) and LoRA adapters (`flame.nn.utils.lora`)."""

from flame.nn.utils import lora  # noqa: F401
from flame.nn.utils.gradients import add_grad_noise_, clip_grad_norm_, clip_grad_value_, grad_stats

__all__ = ["add_grad_noise_", "clip_grad_norm_", "clip_grad_value_", "grad_stats", "lora"]
