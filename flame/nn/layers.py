"""The layers of flame.nn: Linear, normalisations, Embedding, Dropout, activations and losses, each a
thin Module over a composite in flame.frontend.functional (so the compiler sees primitives)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from flame.errors import AssertedArgumentError, UnsupportedError
from flame.frontend import activations_inplace as FI
from flame.frontend import functional as F
from flame.frontend import losses
from flame.frontend.context import current_trace, no_grad, user_location
from flame.frontend.creation import Generator, ones, zeros
from flame.frontend.default_dtype import float_dtype
from flame.frontend.guards import is_plain
from flame.frontend.tensor import Tensor
from flame.nn import init
from flame.nn.lazy import LazyModuleMixin
from flame.nn.loss_base import _Loss, _WeightedLoss
from flame.nn.module import Module
from flame.nn.parameter import Parameter, is_lazy

__all__ = ["BCELoss", "BCEWithLogitsLoss", "CrossEntropyLoss", "L1Loss", "NLLLoss", "SmoothL1Loss",
           "Dropout", "Embedding", "Flatten", "GELU", "Identity", "LayerNorm", "LazyLinear",
           "LeakyReLU", "Linear", "LogSoftmax", "MSELoss", "RMSNorm", "ReLU", "SiLU", "Sigmoid", "Softmax",
           "Tanh"]


def _shape(normalized_shape: Any) -> tuple[int, ...]:
    return (int(normalized_shape),) if isinstance(normalized_shape, int) else tuple(normalized_shape)


def _register_affine(module: Module, shape: tuple[int, ...], dtype: Any, affine: bool, bias: bool) -> None:
    """A norm layer's affine parameters: weight (ones) and bias (zeros) of shape in dtype, each None where
    affine (for the bias: affine and bias) is off."""
    module.register_parameter("weight", Parameter(ones(*shape, dtype=dtype)) if affine else None)
    module.register_parameter("bias", Parameter(zeros(*shape, dtype=dtype)) if affine and bias else None)


def _reset_affine(module: Module) -> None:
    """A norm layer's weight back to ones and its bias to zeros (those it has), as torch's."""
    if module.weight is not None:
        init.ones_(module.weight)
    if module.bias is not None:
        init.zeros_(module.bias)


def _reset_kaiming(module: Module, fan_in: int, generator: Generator | None) -> None:
    """torch's initialisation of a Linear or convolution: weight by kaiming_uniform(a=sqrt(5)), then the
    bias (where there is one) by U(-1/sqrt(fan_in), 1/sqrt(fan_in)), U(0, 0) for fan_in 0."""
    init.kaiming_uniform_(module.weight, a=math.sqrt(5), generator=generator)
    if module.bias is not None:
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        init.uniform_(module.bias, -bound, bound, generator)


class Linear(Module):
    """y = x @ weight.T + bias, weight [out_features, in_features]. Initialised as PyTorch does:
    weight by kaiming_uniform(a=sqrt(5)) and bias by U(-1/sqrt(in), 1/sqrt(in))."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: Any = None, dtype: Any = None,
                 *, generator: Generator | None = None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        dt = float_dtype(dtype)
        self.weight = Parameter(zeros(out_features, in_features, dtype=dt))
        self.register_parameter("bias", Parameter(zeros(out_features, dtype=dt)) if bias else None)
        self.reset_parameters(generator)
        self._place(device)

    def reset_parameters(self, generator: Generator | None = None) -> None:
        _reset_kaiming(self, self.in_features, generator)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"



class LazyLinear(LazyModuleMixin, Linear):
    """Linear whose in_features is the last dim of its first input (torch.nn.LazyLinear): weight and
    bias are placeholders until then, initialised as Linear's at that call; the module then is a Linear."""

    cls_to_become = Linear

    def __init__(self, out_features: int, bias: bool = True, device: Any = None, dtype: Any = None):
        super().__init__(0, out_features, False, device, dtype)
        self._lazy_weight_and_bias(bias, float_dtype(dtype))

    def reset_parameters(self, generator: Generator | None = None) -> None:
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_parameters(generator)

    def initialize_parameters(self, input: Tensor, *args, **kwargs) -> None:  # noqa: A002
        if self.has_uninitialized_params():
            self.in_features = input.shape[-1]
            self.weight.materialize((self.out_features, self.in_features))
            if self.bias is not None:
                self.bias.materialize((self.out_features,))
            self.reset_parameters()

    def _sizes_from_parameters(self) -> None:
        if not is_lazy(self.weight):
            self.in_features = self.weight.shape[1]


class LayerNorm(Module):
    """Normalise over the trailing normalized_shape dims; weight ones, bias zeros."""

    def __init__(self, normalized_shape: Any, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device: Any = None, dtype: Any = None):
        super().__init__()
        self.normalized_shape, self.eps = _shape(normalized_shape), eps
        self.elementwise_affine = elementwise_affine
        _register_affine(self, self.normalized_shape, float_dtype(dtype), elementwise_affine, bias)
        self._place(device)

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def reset_parameters(self) -> None:
        """weight ones, bias zeros, as torch's."""
        _reset_affine(self)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) * weight. eps=None means the machine epsilon of the dtype PyTorch computes
    in (f32 for f16/bf16 inputs), as in PyTorch."""

    def __init__(self, normalized_shape: Any, eps: float | None = None, elementwise_affine: bool = True,
                 device: Any = None, dtype: Any = None):
        super().__init__()
        self.normalized_shape, self.eps = _shape(normalized_shape), eps
        self.elementwise_affine = elementwise_affine
        w = Parameter(ones(*self.normalized_shape, dtype=float_dtype(dtype))) if elementwise_affine else None
        self.register_parameter("weight", w)
        self._place(device)

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)  # eps=None: F.rms_norm's default

    def reset_parameters(self) -> None:
        """weight ones, as torch's."""
        if self.weight is not None:
            init.ones_(self.weight)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class Embedding(Module):
    """A lookup table [num_embeddings, embedding_dim] initialised N(0, 1) (or holding _weight's values, as
    torch's; _freeze: the weight requires no grad). With padding_idx, that row starts at zero (unless
    _weight is given) and gets no gradient; its lookups give whatever the row holds, as torch's (a row
    initialised again, or loaded, is not zero)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight: Tensor | None = None, _freeze: bool = False, device: Any = None,
                 dtype: Any = None, *, generator: Generator | None = None):
        super().__init__()
        if sparse:
            raise UnsupportedError(
                f"Embedding: sparse gradients are not supported; use sparse=False (a dense gradient)"
                f"\n  at {user_location()}"
            )
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type, self.scale_grad_by_freq = max_norm, norm_type, scale_grad_by_freq
        self.sparse = sparse
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:  # torch asserts: % would pick another row
                raise AssertedArgumentError(f"Padding_idx must be within num_embeddings (padding_idx={padding_idx}, "
                                            f"num_embeddings={num_embeddings})")
            padding_idx = padding_idx % num_embeddings
        self.padding_idx = padding_idx
        dt = float_dtype(dtype)
        weight = given_weight(self, _weight, (num_embeddings, embedding_dim), _freeze)
        if weight is None:
            weight = Parameter(zeros(num_embeddings, embedding_dim, dtype=dt))
            init.normal_(weight, generator=generator)
        self.weight = weight
        if padding_idx is not None and _weight is None:
            with no_grad():
                self.weight.copy_(self.weight * self._padding_rows())
        self._place(device)

    def _padding_rows(self) -> Tensor:
        """[num_embeddings, 1]: 0 at padding_idx, 1 elsewhere; made again when padding_idx is set anew (the
        row that gets no gradient is the one padding_idx names at the call, as torch's)."""
        row = self.padding_idx % self.num_embeddings
        if self._buffers.get("_row_mask") is None or self.__dict__.get("_row_mask_of") != row:
            mask = np.ones((self.num_embeddings, 1), dtype=self.weight.dtype.np_dtype)
            mask[row] = 0
            self.register_buffer("_row_mask", Tensor(mask), persistent=False)
            object.__setattr__(self, "_row_mask_of", row)
        return self._row_mask

    def reset_parameters(self, generator: Generator | None = None) -> None:
        """The table drawn again from N(0, 1), its padding_idx row zero, as torch's."""
        init.normal_(self.weight, generator=generator)
        if self.padding_idx is not None:
            with no_grad():
                self.weight.copy_(self.weight * self._padding_rows())

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True, padding_idx: int | None = None,
                        max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        sparse: bool = False) -> Embedding:
        """An Embedding holding the 2-D `embeddings` as its table (requiring no grad with freeze), as torch's."""
        if embeddings.ndim != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        return cls(rows, cols, _weight=embeddings, _freeze=freeze, padding_idx=padding_idx, max_norm=max_norm,
                   norm_type=norm_type, scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)

    def forward(self, idx: Tensor) -> Tensor:
        if self.max_norm is not None:
            F.embedding_renorm_(self.weight, idx, self.max_norm, self.norm_type)
        w = self.weight if self.padding_idx is None else F.rows_without_grad(self.weight, self._padding_rows())
        return F.embedding(idx, w, scale_grad_by_freq=self.scale_grad_by_freq)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq:
            s += ", scale_grad_by_freq=True"
        return s


def given_weight(module: Module, weight: Tensor | None, shape: tuple[int, ...], freeze: bool = False):
    """The `_weight` torch's Embedding and EmbeddingBag take: a Parameter holding its values (requiring no
    grad with freeze), checked against the table's shape; None when it is not given."""
    if weight is None:
        return None
    if tuple(weight.shape) != tuple(shape):
        raise ValueError(f"{type(module).__name__}: _weight must have the shape {list(shape)}, got "
                         f"{list(weight.shape)}")
    return Parameter(weight.detach(), requires_grad=not freeze)


class _DropoutNd(Module):
    """What the dropout layers share (torch's _DropoutNd): p checked, and forward applies `fn` with p,
    the training mode, inplace and the generator."""

    fn = staticmethod(FI.dropout)

    def __init__(self, p: float = 0.5, inplace: bool = False, *, generator: Generator | None = None):
        super().__init__()
        F.check_dropout_p(p)
        self.p, self.inplace, self.generator = p, inplace, generator

    def forward(self, x: Tensor) -> Tensor:
        return type(self).fn(x, self.p, self.training, self.inplace, generator=self.generator)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout(_DropoutNd):
    """Zero elements with probability p in training mode (scaling the rest by 1/(1-p)); identity in eval.
    With inplace=True the input holds the result, as torch's."""


class _Elementwise(Module):
    """An activation with no parameters: forward applies `fn` with the module's keyword arguments; with
    inplace=True (the activations torch gives that argument) the input holds the result, as torch's."""

    fn = staticmethod(F.relu)
    # the function's form taking `inplace` (flame.frontend.activations_inplace), where its in-place node is
    # torch's other one (elu_'s saves the result): forward calls it with inplace=True
    in_place_form = None

    def __init__(self, inplace: bool = False, **kwargs: Any):
        super().__init__()
        self.kwargs, self.inplace = kwargs, inplace

    def __getattr__(self, name: str) -> Any:  # the keyword arguments read as torch's attributes (m.dim)
        kwargs = self.__dict__.get("kwargs")
        if kwargs is not None and name in kwargs:
            return kwargs[name]
        return super().__getattr__(name)

    def __setattr__(self, name: str, value: Any) -> None:  # and set as them: the next call uses the new value
        kwargs = self.__dict__.get("kwargs")
        if kwargs is not None and name in kwargs:
            kwargs[name] = value
        else:
            super().__setattr__(name, value)

    def forward(self, x: Tensor) -> Tensor:
        fn, kwargs = type(self).fn, self.kwargs
        trace = current_trace.get()
        if trace is not None:  # each keyword argument is a guard of the trace, as a plain attribute is
            for name, value in kwargs.items():
                if is_plain(value):
                    trace.read_attribute(self, name, value)
        if self.inplace and type(self).in_place_form is not None:
            return type(self).in_place_form(x, inplace=True, **kwargs)
        if self.inplace:
            return FI.into(x, True, lambda t: fn(t, **kwargs), type(self).__name__)
        return fn(x, **kwargs)

    def extra_repr(self) -> str:
        return ", ".join([*(f"{k}={v!r}" for k, v in self.kwargs.items()), *(["inplace=True"] if self.inplace else [])])


class ReLU(_Elementwise):
    fn = staticmethod(F.relu)

    def __init__(self, inplace: bool = False):
        super().__init__(inplace)


class GELU(_Elementwise):
    fn = staticmethod(F.gelu)

    def __init__(self, approximate: str = "none"):
        super().__init__(approximate=approximate)


class SiLU(_Elementwise):
    fn = staticmethod(F.silu)

    def __init__(self, inplace: bool = False):
        super().__init__(inplace)


class Tanh(_Elementwise):
    fn = staticmethod(F.tanh)


class Sigmoid(_Elementwise):
    fn = staticmethod(F.sigmoid)


class LeakyReLU(_Elementwise):
    fn = staticmethod(F.leaky_relu)
    in_place_form = staticmethod(FI.leaky_relu)

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__(inplace, negative_slope=negative_slope)


class Softmax(_Elementwise):
    fn = staticmethod(F.softmax)

    def __init__(self, dim: int | None = None):
        super().__init__(dim=dim)


class LogSoftmax(_Elementwise):
    fn = staticmethod(F.log_softmax)

    def __init__(self, dim: int | None = None):
        super().__init__(dim=dim)


class Identity(Module):
    """Returns its input; like PyTorch's, it takes and ignores any constructor arguments, so it can stand in
    for a layer built with arguments."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return x


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class MSELoss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        losses._no_legacy("MSELoss", size_average, reduce)
        self.reduction = reduction

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.mse_loss(input, target, reduction=self.reduction)


class CrossEntropyLoss(_WeightedLoss):
    """torch.nn.CrossEntropyLoss (its arguments, in its order): F.cross_entropy as a module."""

    def __init__(self, weight: Tensor | None = None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__()
        losses._no_legacy("CrossEntropyLoss", size_average, reduce)
        self.register_buffer("weight", weight)  # in state_dict, as torch's
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, label_smoothing

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return losses.cross_entropy(input, target, self.weight, ignore_index=self.ignore_index,
                                    reduction=self.reduction, label_smoothing=self.label_smoothing)


class L1Loss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        losses._no_legacy("L1Loss", size_average, reduce)
        self.reduction = reduction

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return losses.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
        super().__init__()
        losses._no_legacy("SmoothL1Loss", size_average, reduce)
        self.reduction, self.beta = reduction, beta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return losses.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class NLLLoss(_WeightedLoss):
    def __init__(self, weight: Tensor | None = None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean"):
        super().__init__()
        losses._no_legacy("NLLLoss", size_average, reduce)
        self.register_buffer("weight", weight)
        self.ignore_index, self.reduction = ignore_index, reduction

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return losses.nll_loss(input, target, self.weight, ignore_index=self.ignore_index, reduction=self.reduction)


class BCELoss(_WeightedLoss):
    def __init__(self, weight: Tensor | None = None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        losses._no_legacy("BCELoss", size_average, reduce)
        self.register_buffer("weight", weight)
        self.reduction = reduction

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return losses.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    def __init__(self, weight: Tensor | None = None, size_average=None, reduce=None, reduction: str = "mean",
                 pos_weight: Tensor | None = None):
        super().__init__()
        losses._no_legacy("BCEWithLogitsLoss", size_average, reduce)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)
        self.reduction = reduction

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return losses.binary_cross_entropy_with_logits(input, target, self.weight, reduction=self.reduction,
                                                       pos_weight=self.pos_weight)
