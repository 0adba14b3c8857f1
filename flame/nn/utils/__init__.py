"""flame.nn.utils: gradient tools (gradients.py), parameters as one vector (convert_parameters.py), padded
and packed sequences (`flame.nn.utils.rnn`), LoRA adapters (`flame.nn.utils.lora`), parametrizations
(`flame.nn.utils.parametrize`, `flame.nn.utils.parametrizations`: weight_norm, spectral_norm), the
forward-pre-hook weight_norm / spectral_norm (norm_hooks.py), pruning by masks (`flame.nn.utils.prune`),
BatchNorm folding (`flame.nn.utils.fusion`), convolution weights' memory format and skip_init
(memory_format.py) and `flame.nn.utils.stateless.functional_call`."""

from flame.nn.utils import fusion, lora, parametrizations, parametrize, prune, rnn, stateless  # noqa: F401
from flame.nn.utils.convert_parameters import parameters_to_vector, vector_to_parameters
from flame.nn.utils.fusion import fuse_conv_bn_eval, fuse_conv_bn_weights, fuse_linear_bn_eval, fuse_linear_bn_weights
from flame.nn.utils.gradients import (
    add_grad_noise_,
    clip_grad_norm,
    clip_grad_norm_,
    clip_grad_value_,
    clip_grads_with_norm_,
    get_total_norm,
    grad_stats,
)
from flame.nn.utils.memory_format import (
    convert_conv2d_weight_memory_format,
    convert_conv3d_weight_memory_format,
    skip_init,
)
from flame.nn.utils.norm_hooks import remove_spectral_norm, remove_weight_norm, spectral_norm, weight_norm

__all__ = [
    "add_grad_noise_",
    "clip_grad_norm",
    "clip_grad_norm_",
    "clip_grad_value_",
    "clip_grads_with_norm_",
    "convert_conv2d_weight_memory_format",
    "convert_conv3d_weight_memory_format",
    "fuse_conv_bn_eval",
    "fuse_conv_bn_weights",
    "fuse_linear_bn_eval",
    "fuse_linear_bn_weights",
    "fusion",
    "get_total_norm",
    "grad_stats",
    "lora",
    "parameters_to_vector",
    "parametrizations",
    "parametrize",
    "prune",
    "remove_spectral_norm",
    "remove_weight_norm",
    "rnn",
    "skip_init",
    "spectral_norm",
    "stateless",
    "vector_to_parameters",
    "weight_norm",
]
