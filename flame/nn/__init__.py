"""flame.nn: PyTorch-shaped modules."""

from flame.nn import functional, init, parallel, utils  # noqa: F401
from flame.nn.layers import (
    GELU,
    CrossEntropyLoss,
    Dropout,
    Embedding,
    Flatten,
    Identity,
    LayerNorm,
    LeakyReLU,
    Linear,
    LogSoftmax,
    MSELoss,
    ReLU,
    RMSNorm,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)
from flame.nn.module import IncompatibleKeys, Module, ModuleList, Sequential
from flame.nn.parameter import Parameter

__all__ = ["GELU", "CrossEntropyLoss", "Dropout", "Embedding", "Flatten", "Identity", "IncompatibleKeys",
           "LayerNorm", "LeakyReLU", "Linear", "LogSoftmax", "MSELoss", "Module", "ModuleList", "Parameter",
           "RMSNorm", "ReLU", "Sequential", "SiLU", "Sigmoid", "Softmax", "Tanh", "functional", "init", "parallel",
           "utils"]
