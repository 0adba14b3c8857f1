"""flame.nn: PyTorch-shaped modules."""

from flame.nn import functional, init, parallel, utils  # noqa: F401
from flame.nn.layers import (
    GELU,
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    Dropout,
    Embedding,
    Flatten,
    Identity,
    L1Loss,
    LayerNorm,
    LeakyReLU,
    Linear,
    LogSoftmax,
    MSELoss,
    NLLLoss,
    ReLU,
    RMSNorm,
    Sigmoid,
    SiLU,
    SmoothL1Loss,
    Softmax,
    Tanh,
)
from flame.nn.module import (
    IncompatibleKeys,
    Module,
    ModuleDict,
    ModuleList,
    ParameterDict,
    ParameterList,
    Sequential,
)
from flame.nn.parameter import Parameter

__all__ = ["GELU", "BCELoss", "BCEWithLogitsLoss", "CrossEntropyLoss", "L1Loss", "ModuleDict", "NLLLoss",
           "ParameterDict", "ParameterList", "SmoothL1Loss", "Dropout", "Embedding", "Flatten", "Identity",
           "IncompatibleKeys", "LayerNorm", "LeakyReLU", "Linear", "LogSoftmax", "MSELoss", "Module", "ModuleList",
           "Parameter", "RMSNorm", "ReLU", "Sequential", "SiLU", "Sigmoid", "Softmax", "Tanh", "functional", "init",
           "parallel", "utils"]
