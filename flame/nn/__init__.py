"""flame.nn: PyTorch-shaped modules."""

from flame.nn import functional, init, utils  # noqa: F401
from flame.nn.conv import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveAvgPool3d,
    AvgPool1d,
    AvgPool2d,
    AvgPool3d,
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
    GroupNorm,
    MaxPool1d,
    MaxPool2d,
    MaxPool3d,
    Upsample,
)
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

__all__ = ["AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
           "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
           "ConvTranspose2d", "ConvTranspose3d", "GroupNorm", "MaxPool1d", "MaxPool2d", "MaxPool3d", "Upsample",
           "GELU", "CrossEntropyLoss", "Dropout", "Embedding", "Flatten", "Identity", "IncompatibleKeys",
           "LayerNorm", "LeakyReLU", "Linear", "LogSoftmax", "MSELoss", "Module", "ModuleList", "Parameter",
           "RMSNorm", "ReLU", "Sequential", "SiLU", "Sigmoid", "Softmax", "Tanh", "functional", "init", "utils"]
