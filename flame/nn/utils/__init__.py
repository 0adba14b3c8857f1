"""flame.nn.utils: gradient tools (gradients.py), parameters as one vector (convert_parameters.py), padded
and packed sequences (`flame.nn.utils.rnn`), LoRA adapters (`flame.nn.utils.lora`), parametrizations
(`flame.nn.utils.parametrize`, `flame.nn.utils.parametrizations`: weight_norm, spectral_norm)."""

from flame.nn.utils import lora, parametrizations, parametrize, rnn  # noqa: F401
from flame.nn.utils.convert_parameters import parameters_to_vector, vector_to_parameters
from flame.nn.utils.gradients import (
    add_grad_noise_,
    clip_grad_norm_,
    clip_grad_value_,
    clip_grads_with_norm_,
    get_total_norm,
    grad_stats,
)

__all__ = [
    "add_grad_noise_",
    "clip_grad_norm_",
    "clip_grad_value_",
    "clip_grads_with_norm_",
    "get_total_norm",
    "grad_stats",
    "lora",
    "parameters_to_vector",
    "parametrizations",
    "parametrize",
    "rnn",
    "vector_to_parameters",
]
