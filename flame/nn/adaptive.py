"""nn.AdaptiveLogSoftmaxWithLoss (PyTorch's name, arguments, parameter names and results): a head over the
frequent classes and one cluster token per tail, each tail a two-layer projection of reduced width.

PyTorch's forward gathers the rows of each cluster (nonzero: shapes that depend on the values). Here every
cluster's log-probabilities are computed for every row and each row reads its target's entry of the full
distribution (log_prob), so the shapes are fixed and the layer traces inside @flame.compile; the values are
PyTorch's (a tail class's log-probability is its cluster's head entry plus its log-softmax within the
tail) and so are the gradients (a row's unused tails receive zero gradient)."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Sequence
from typing import Any

from flame.errors import IndexValueError, ShapeError
from flame.frontend import functional as F
from flame.frontend.context import user_location
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import cat
from flame.nn.layers import Linear
from flame.nn.module import Module, ModuleList, Sequential

__all__ = ["AdaptiveLogSoftmaxWithLoss"]

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


class _InputError(ShapeError, RuntimeError):
    """A target or input of the wrong shape (PyTorch raises RuntimeError)."""


class _TargetError(IndexValueError, RuntimeError):
    """A target outside [0, n_classes) (PyTorch raises RuntimeError)."""


class AdaptiveLogSoftmaxWithLoss(Module):
    """Efficient softmax approximation (Grave et al., 2016): classes [0, cutoffs[0]) in the head, each
    further range [cutoffs[i], cutoffs[i+1]) in tail i, reached through the head's cluster entry."""

    def __init__(self, in_features: int, n_classes: int, cutoffs: Sequence[int], div_value: float = 4.0,
                 head_bias: bool = False, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise ValueError("cutoffs should be a sequence of length larger than 0")
        if (cutoffs != sorted(cutoffs) or min(cutoffs) <= 0 or max(cutoffs) > n_classes - 1
                or len(set(cutoffs)) != len(cutoffs) or any(int(c) != c for c in cutoffs)):
            raise ValueError("cutoffs should be a sequence of unique, positive integers sorted in an increasing "
                             "order, where each value is between 1 and n_classes-1")
        self.in_features, self.n_classes = in_features, n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value, self.head_bias = div_value, head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias, device=device, dtype=dtype)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hsz = int(in_features // (div_value ** (i + 1)))
            osz = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(Sequential(Linear(in_features, hsz, bias=False, device=device, dtype=dtype),
                                        Linear(hsz, osz, bias=False, device=device, dtype=dtype)))

    def reset_parameters(self) -> None:
        self.head.reset_parameters()
        for i2h, h2o in self.tail:
            i2h.reset_parameters()
            h2o.reset_parameters()

    def forward(self, input_: Tensor, target_: Tensor) -> _ASMoutput:
        """(output, loss): each row's log-probability of its target, and their negated mean."""
        targ_dim = target_.ndim
        if targ_dim == 1:
            if input_.shape[0] != target_.shape[0]:
                raise _InputError("Input and target should have the same size in the batch dimension."
                                 f"\n  at {user_location()}")
            if input_.ndim != 2:
                raise _InputError(f"1D target tensor expects 2D input tensors, but found inputs with size "
                                 f"{list(input_.shape)}\n  at {user_location()}")
        elif targ_dim == 0:
            if input_.ndim != 1:
                raise _InputError(f"0D target tensor expects 1D input tensors, but found inputs with size "
                                 f"{list(input_.shape)}\n  at {user_location()}")
        else:
            raise _InputError(f"0D or 1D target tensor expected, multi-target not supported\n  at {user_location()}")
        batched = targ_dim > 0
        x = input_ if batched else input_.unsqueeze(0)
        target = target_ if batched else target_.unsqueeze(0)
        self._check_targets(target)
        output = self.log_prob(x).gather(1, target.unsqueeze(1)).squeeze(1)
        loss = (-output).mean()
        return _ASMoutput(output if batched else output.squeeze(0), loss)

    def _check_targets(self, target: Tensor) -> None:
        """PyTorch's error for a target outside [0, n_classes) (eager: it needs the values)."""
        if target._value is not None or not target.numel():
            return
        t = target.numpy()
        if t.min() < 0 or t.max() >= self.n_classes:
            raise _TargetError(f"Target values should be in [0, {self.n_classes - 1}], but values in range "
                                  f"[{int(t.min())}, {int(t.max())}] were found. \n  at {user_location()}")

    def _get_full_log_prob(self, input: Tensor, head_output: Tensor) -> Tensor:  # noqa: A002
        """The log of the full distribution: the head's shortlist, then each tail's log-softmax plus its
        cluster's head entry."""
        head_logprob = F.log_softmax(head_output, dim=1)
        parts = [head_logprob[:, : self.shortlist_size]]
        for i, tail in enumerate(self.tail):
            cluster_logprob = F.log_softmax(tail(input), dim=1)
            parts.append(cluster_logprob + head_logprob[:, self.shortlist_size + i].unsqueeze(1))
        return cat(parts, 1)

    def log_prob(self, input: Tensor) -> Tensor:  # noqa: A002
        """Log-probabilities of all n_classes, [N, n_classes]."""
        return self._get_full_log_prob(input, self.head(input))

    def predict(self, input: Tensor) -> Tensor:  # noqa: A002
        """The most probable class of each row (log_prob(input).argmax(1); a shortlist class that wins the
        head also wins the full distribution, whose tail entries are at most their cluster's)."""
        return self.log_prob(input).argmax(1)
