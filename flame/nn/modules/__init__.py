"""flame.nn.modules, torch.nn.modules's layout: the module classes by the submodule torch defines them in
(`nn.modules.batchnorm._BatchNorm`, `nn.modules.conv._ConvNd`, `nn.modules.loss._Loss`,
`nn.modules.module.register_module_forward_hook`), so that `isinstance(m, nn.modules.batchnorm._BatchNorm)`
and `from torch.nn.modules.loss import _Loss` read the same with flame. Each submodule is an alias
namespace of flame.nn's classes; importing it by name works as torch's does."""

from __future__ import annotations

import sys
import types

from flame import nn as _nn
from flame.nn import activations as _activations
from flame.nn import batchnorm as _batchnorm
from flame.nn import conv as _conv
from flame.nn import loss_base as _loss_base
from flame.nn import module as _module

_LAYOUT = {  # torch.nn.modules.<submodule>: the names it defines that flame has
    "module": ["Module", "register_module_forward_hook", "register_module_forward_pre_hook",
               "register_module_full_backward_hook", "register_module_full_backward_pre_hook"],
    "container": ["Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"],
    "linear": ["Identity", "Linear", "Bilinear", "LazyLinear"],
    "conv": ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "LazyConv1d",
             "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d"],
    "batchnorm": ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LazyBatchNorm1d", "LazyBatchNorm2d",
                  "LazyBatchNorm3d", "SyncBatchNorm"],
    "instancenorm": ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LazyInstanceNorm1d",
                     "LazyInstanceNorm2d", "LazyInstanceNorm3d"],
    "normalization": ["LayerNorm", "GroupNorm", "RMSNorm", "LocalResponseNorm"],
    "dropout": ["Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"],
    "pooling": ["MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "MaxUnpool1d",
                "MaxUnpool2d", "MaxUnpool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d",
                "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "LPPool1d", "LPPool2d", "LPPool3d",
                "FractionalMaxPool2d", "FractionalMaxPool3d"],
    "activation": ["ReLU", "ReLU6", "LeakyReLU", "PReLU", "RReLU", "ELU", "CELU", "SELU", "GELU", "SiLU", "Mish",
                   "Sigmoid", "Tanh", "Hardtanh", "Hardsigmoid", "Hardswish", "Hardshrink", "Softshrink",
                   "Tanhshrink", "Softplus", "Softsign", "LogSigmoid", "Threshold", "GLU", "Softmax", "Softmin",
                   "Softmax2d", "LogSoftmax", "MultiheadAttention"],
    "loss": ["L1Loss", "MSELoss", "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "SmoothL1Loss",
             "HuberLoss", "KLDivLoss", "MarginRankingLoss", "HingeEmbeddingLoss", "SoftMarginLoss",
             "MultiLabelSoftMarginLoss", "CosineEmbeddingLoss", "TripletMarginLoss", "TripletMarginWithDistanceLoss",
             "MultiMarginLoss", "MultiLabelMarginLoss", "PoissonNLLLoss", "GaussianNLLLoss", "CTCLoss",
             "LinearCrossEntropyLoss"],
    "sparse": ["Embedding", "EmbeddingBag"],
    "rnn": ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"],
    "transformer": ["Transformer", "TransformerEncoder", "TransformerDecoder", "TransformerEncoderLayer",
                    "TransformerDecoderLayer"],
    "padding": ["ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d",
                "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
                "ReplicationPad3d", "CircularPad1d", "CircularPad2d", "CircularPad3d"],
    "upsampling": ["Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d"],
    "flatten": ["Flatten", "Unflatten"],
    "pixelshuffle": ["PixelShuffle", "PixelUnshuffle"],
    "channelshuffle": ["ChannelShuffle"],
    "distance": ["PairwiseDistance", "CosineSimilarity"],
    "fold": ["Fold", "Unfold"],
    "adaptive": ["AdaptiveLogSoftmaxWithLoss"],
}

_PRIVATE = {  # torch's private bases that user code names, by the flame class that plays the part
    "conv": {"_ConvNd": _conv._ConvNd, "_ConvTransposeNd": _conv._ConvTranspose},
    "batchnorm": {"_NormBase": _batchnorm._NormBase, "_BatchNorm": _batchnorm._BatchNorm},
    "instancenorm": {"_InstanceNorm": _activations._InstanceNorm},
    "pooling": {"_MaxPoolNd": _conv._MaxPool, "_AvgPoolNd": _conv._AvgPool, "_MaxUnpoolNd": _conv._MaxUnpool,
                "_LPPoolNd": _conv._LPPool},
    "loss": {"_Loss": _loss_base._Loss, "_WeightedLoss": _loss_base._WeightedLoss},
}


def _namespace(name: str) -> types.ModuleType:
    mod = types.ModuleType(f"{__name__}.{name}", f"torch.nn.modules.{name}'s names, flame's classes")
    for attr in _LAYOUT[name]:
        if hasattr(_nn, attr):
            setattr(mod, attr, getattr(_nn, attr))
    for attr, value in _PRIVATE.get(name, {}).items():
        setattr(mod, attr, value)
    mod.__all__ = [a for a in _LAYOUT[name] if hasattr(mod, a)]
    return mod


for _name in _LAYOUT:
    _mod = _namespace(_name)
    sys.modules[_mod.__name__] = _mod
    globals()[_name] = _mod
    for _attr in _mod.__all__:
        globals()[_attr] = getattr(_mod, _attr)

Module = _module.Module
__all__ = sorted({a for names in _LAYOUT.values() for a in names if a in globals()})
