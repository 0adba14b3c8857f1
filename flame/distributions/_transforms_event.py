"""The transforms of flame.distributions that act on whole events, as torch.distributions.transforms':
onto the simplex (softmax, stick-breaking), onto lower Cholesky factors (of any positive-definite matrix or
of a correlation matrix) and positive-definite matrices, reshaping events, and transforms applied slice by
slice (cat, stack) or over more event dims (IndependentTransform)."""

from __future__ import annotations

import math

import numpy as np

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions._linalg import cholesky
from flame.distributions._transform_base import Transform, _Parameterless
from flame.distributions.utils import finfo_eps, finfo_tiny, lazy_property, sum_rightmost
from flame.frontend.activations import logsigmoid, softplus

__all__ = [
    "CatTransform",
    "CorrCholeskyTransform",
    "IndependentTransform",
    "LowerCholeskyTransform",
    "PositiveDefiniteTransform",
    "ReshapeTransform",
    "SoftmaxTransform",
    "StackTransform",
    "StickBreakingTransform",
]


def _at_least_one_dim(shape):
    if len(shape) < 1:
        raise ValueError("Too few dimensions on input")
    return tuple(shape)


class SoftmaxTransform(_Parameterless):
    """y = softmax(x) over the last dim (not bijective: its inverse is log y, one of the preimages)."""

    domain = constraints.real_vector
    codomain = constraints.simplex

    def _call(self, x):
        probs = (x - x.max(-1, True)[0]).exp()
        return probs / probs.sum(-1, True)

    def _inverse(self, y):
        return y.log()

    def forward_shape(self, shape):
        """shape (at least one dim)."""
        return _at_least_one_dim(shape)

    def inverse_shape(self, shape):
        """shape (at least one dim)."""
        return _at_least_one_dim(shape)


def _clipped_sigmoid(x):
    """sigmoid(x) clamped to [tiny, 1 - eps] of x's dtype, as torch's."""
    return x.sigmoid().clamp(min=finfo_tiny(x.dtype), max=1.0 - finfo_eps(x.dtype))


def _stick_offset(x):
    """log(K - k) for k = 0 .. K-1 along x's last dim of size K: the shift that maps x = 0 to the centre
    of the simplex."""
    k = x.shape[-1]
    return ops.arange(k, 0, -1, dtype=x.dtype).log()


class StickBreakingTransform(_Parameterless):
    """R^K onto the simplex of K + 1 entries by breaking a stick: each entry a sigmoid's share of what the
    previous ones left."""

    domain = constraints.real_vector
    codomain = constraints.simplex
    bijective = True

    def _call(self, x):
        z = _clipped_sigmoid(x - _stick_offset(x))
        z_cumprod = (1 - z).cumprod(-1)
        lead = [(0, 0)] * (x.ndim - 1)
        return ops.pad(z, [*lead, (0, 1)], value=1.0) * ops.pad(z_cumprod, [*lead, (1, 0)], value=1.0)

    def _inverse(self, y):
        y_crop = y[..., :-1]
        offset = ops.arange(y_crop.shape[-1], 0, -1, dtype=y.dtype)
        sf = (1 - y_crop.cumsum(-1)).clamp(min=finfo_tiny(y.dtype))
        return y_crop.log() - sf.log() + offset.log()

    def log_abs_det_jacobian(self, x, y):
        """sum over k of log sigmoid'(x_k - offset_k) plus log of the stick left, written as torch's."""
        x = x - _stick_offset(x)
        return (-x + logsigmoid(x) + y[..., :-1].log()).sum(-1)

    def forward_shape(self, shape):
        """One more entry in the last dim."""
        shape = _at_least_one_dim(shape)
        return shape[:-1] + (shape[-1] + 1,)

    def inverse_shape(self, shape):
        """One entry fewer in the last dim."""
        shape = _at_least_one_dim(shape)
        return shape[:-1] + (shape[-1] - 1,)


class LowerCholeskyTransform(_Parameterless):
    """Square matrices onto lower-triangular ones of positive diagonal: the strict lower triangle kept,
    the diagonal exponentiated."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.lower_cholesky

    def _call(self, x):
        return x.tril(-1) + x.diagonal(dim1=-2, dim2=-1).exp().diag_embed()

    def _inverse(self, y):
        return y.tril(-1) + y.diagonal(dim1=-2, dim2=-1).log().diag_embed()


class PositiveDefiniteTransform(_Parameterless):
    """Square matrices onto positive-definite ones: L L^T of LowerCholeskyTransform's L."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.positive_definite

    def _call(self, x):
        lower = LowerCholeskyTransform()(x)
        return lower @ lower.mT

    def _inverse(self, y):
        return LowerCholeskyTransform().inv(cholesky(y))


class ReshapeTransform(Transform):
    """The rightmost in_shape dims reshaped to out_shape (a unit Jacobian)."""

    bijective = True

    def __init__(self, in_shape, out_shape, cache_size: int = 0) -> None:
        self.in_shape, self.out_shape = tuple(in_shape), tuple(out_shape)
        if math.prod(self.in_shape) != math.prod(self.out_shape):
            raise ValueError("in_shape, out_shape have different numbers of elements")
        super().__init__(cache_size=cache_size)

    def with_cache(self, cache_size: int = 1):
        """This transform with the given cache_size."""
        if self._cache_size == cache_size:
            return self
        return ReshapeTransform(self.in_shape, self.out_shape, cache_size=cache_size)

    @property
    def domain(self):
        """Real values over len(in_shape) event dims."""
        return constraints.independent(constraints.real, len(self.in_shape))

    @property
    def codomain(self):
        """Real values over len(out_shape) event dims."""
        return constraints.independent(constraints.real, len(self.out_shape))

    def _call(self, x):
        return x.reshape(*x.shape[: x.ndim - len(self.in_shape)], *self.out_shape)

    def _inverse(self, y):
        return y.reshape(*y.shape[: y.ndim - len(self.out_shape)], *self.in_shape)

    def log_abs_det_jacobian(self, x, y):
        """Zeros over x's batch dims."""
        return ops.zeros_like(x).reshape(*x.shape[: x.ndim - len(self.in_shape)], -1).sum(-1)

    def forward_shape(self, shape):
        """shape with its rightmost in_shape replaced by out_shape."""
        return self._reshaped(tuple(shape), self.in_shape, self.out_shape)

    def inverse_shape(self, shape):
        """shape with its rightmost out_shape replaced by in_shape."""
        return self._reshaped(tuple(shape), self.out_shape, self.in_shape)

    @staticmethod
    def _reshaped(shape, old, new):
        if len(shape) < len(old):
            raise ValueError("Too few dimensions on input")
        cut = len(shape) - len(old)
        if shape[cut:] != old:
            raise ValueError(f"Shape mismatch: expected {shape[cut:]} but got {old}")
        return shape[:cut] + new


class IndependentTransform(Transform):
    """base_transform with reinterpreted_batch_ndims more rightmost dims taken as one event: the same map,
    its log |dy/dx| summed over those dims."""

    def __init__(self, base_transform: Transform, reinterpreted_batch_ndims: int, cache_size: int = 0) -> None:
        super().__init__(cache_size=cache_size)
        self.base_transform = base_transform.with_cache(cache_size)
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims

    def with_cache(self, cache_size: int = 1):
        """This transform with the given cache_size."""
        if self._cache_size == cache_size:
            return self
        return IndependentTransform(self.base_transform, self.reinterpreted_batch_ndims, cache_size=cache_size)

    @property
    def domain(self):
        """The base's domain over reinterpreted_batch_ndims more dims."""
        return constraints.independent(self.base_transform.domain, self.reinterpreted_batch_ndims)

    @property
    def codomain(self):
        """The base's codomain over reinterpreted_batch_ndims more dims."""
        return constraints.independent(self.base_transform.codomain, self.reinterpreted_batch_ndims)

    @property
    def bijective(self):
        """Whether the base transform is a bijection."""
        return self.base_transform.bijective

    @property
    def sign(self):
        """The base transform's sign."""
        return self.base_transform.sign

    def _call(self, x):
        if x.ndim < self.domain.event_dim:
            raise ValueError("Too few dimensions on input")
        return self.base_transform(x)

    def _inverse(self, y):
        if y.ndim < self.codomain.event_dim:
            raise ValueError("Too few dimensions on input")
        return self.base_transform.inv(y)

    def log_abs_det_jacobian(self, x, y):
        """The base's, summed over the reinterpreted dims."""
        return sum_rightmost(self.base_transform.log_abs_det_jacobian(x, y), self.reinterpreted_batch_ndims)

    def forward_shape(self, shape):
        """The base's forward_shape."""
        return self.base_transform.forward_shape(shape)

    def inverse_shape(self, shape):
        """The base's inverse_shape."""
        return self.base_transform.inverse_shape(shape)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.base_transform!r}, {self.reinterpreted_batch_ndims})"


def _check_dim(name: str, label: str, t, dim: int, size: int, what: str) -> None:
    """torch's AssertionErrors of CatTransform and StackTransform for a bad dim or size (name is how the
    range message calls t, label how the size message does)."""
    if not -t.ndim <= dim < t.ndim:
        raise AssertionError(f"dim {dim} out of range for {name} with {t.ndim} dimensions")
    if t.shape[dim] != size:
        raise AssertionError(f"{label}.size({dim}) = {t.shape[dim]} must equal {what} {size}")


class CatTransform(Transform):
    """tseq applied to consecutive slices of lengths (1 each by default) along dim, as torch.cat joins
    them."""

    def __init__(self, tseq, dim: int = 0, lengths=None, cache_size: int = 0) -> None:
        if not all(isinstance(t, Transform) for t in tseq):
            raise AssertionError("All elements of tseq must be Transform instances")
        if cache_size:
            tseq = [t.with_cache(cache_size) for t in tseq]
        super().__init__(cache_size=cache_size)
        self.transforms = list(tseq)
        self.lengths = [1] * len(self.transforms) if lengths is None else list(lengths)
        if len(self.lengths) != len(self.transforms):
            raise AssertionError(f"lengths ({len(self.lengths)}) must match transforms ({len(self.transforms)})")
        self.dim = dim

    def with_cache(self, cache_size: int = 1):
        """This transform with the given cache_size."""
        if self._cache_size == cache_size:
            return self
        return CatTransform(self.transforms, self.dim, self.lengths, cache_size)

    @lazy_property
    def event_dim(self) -> int:
        """The largest event_dim of the transforms."""
        return max(t.event_dim for t in self.transforms)

    @lazy_property
    def length(self) -> int:
        """The size along dim: the lengths summed."""
        return sum(self.lengths)

    def _map(self, z, name, fn):
        _check_dim("tensor", name, z, self.dim, self.length, "length")
        out, start = [], 0
        for t, length in zip(self.transforms, self.lengths):
            out.append(fn(t, z.narrow(self.dim, start, length)))
            start = start + length
        return ops.cat(out, self.dim)

    def _call(self, x):
        return self._map(x, "x", lambda t, v: t(v))

    def _inverse(self, y):
        return self._map(y, "y", lambda t, v: t.inv(v))

    def log_abs_det_jacobian(self, x, y):
        """Each slice's log |dy/dx|, joined along dim (summed where dim is inside the event)."""
        _check_dim("x", "x", x, self.dim, self.length, "length")
        _check_dim("y", "y", y, self.dim, self.length, "length")
        terms, start = [], 0
        for t, length in zip(self.transforms, self.lengths):
            term = t.log_abs_det_jacobian(x.narrow(self.dim, start, length), y.narrow(self.dim, start, length))
            if t.event_dim < self.event_dim:
                term = sum_rightmost(term, self.event_dim - t.event_dim)
            terms.append(term)
            start = start + length
        dim = (self.dim - x.ndim if self.dim >= 0 else self.dim) + self.event_dim
        return ops.cat(terms, dim) if dim < 0 else sum(terms)

    @property
    def bijective(self):
        """Whether every transform is a bijection."""
        return all(t.bijective for t in self.transforms)

    @property
    def domain(self):
        """The transforms' domains, slice by slice."""
        return constraints.cat([t.domain for t in self.transforms], self.dim, self.lengths)

    @property
    def codomain(self):
        """The transforms' codomains, slice by slice."""
        return constraints.cat([t.codomain for t in self.transforms], self.dim, self.lengths)


class StackTransform(Transform):
    """tseq applied to the slices along dim, one each, as torch.stack joins them."""

    def __init__(self, tseq, dim: int = 0, cache_size: int = 0) -> None:
        if not all(isinstance(t, Transform) for t in tseq):
            raise AssertionError("All elements of tseq must be Transform instances")
        if cache_size:
            tseq = [t.with_cache(cache_size) for t in tseq]
        super().__init__(cache_size=cache_size)
        self.transforms, self.dim = list(tseq), dim

    def with_cache(self, cache_size: int = 1):
        """This transform with the given cache_size."""
        if self._cache_size == cache_size:
            return self
        return StackTransform(self.transforms, self.dim, cache_size)

    def _slices(self, z, name, label):
        _check_dim(name, label, z, self.dim, len(self.transforms), "len(transforms)")
        return [z.select(self.dim, i) for i in range(z.shape[self.dim])]

    def _call(self, x):
        return ops.stack([t(v) for v, t in zip(self._slices(x, "tensor", "x"), self.transforms)], self.dim)

    def _inverse(self, y):
        return ops.stack([t.inv(v) for v, t in zip(self._slices(y, "tensor", "y"), self.transforms)], self.dim)

    def log_abs_det_jacobian(self, x, y):
        """Each slice's log |dy/dx|, stacked along dim."""
        xs, ys = self._slices(x, "x", "x"), self._slices(y, "y", "y")
        return ops.stack([t.log_abs_det_jacobian(a, b) for a, b, t in zip(xs, ys, self.transforms)], self.dim)

    @property
    def bijective(self):
        """Whether every transform is a bijection."""
        return all(t.bijective for t in self.transforms)

    @property
    def domain(self):
        """The transforms' domains, slice by slice."""
        return constraints.stack([t.domain for t in self.transforms], self.dim)

    @property
    def codomain(self):
        """The transforms' codomains, slice by slice."""
        return constraints.stack([t.codomain for t in self.transforms], self.dim)


def _tril_index(n: int, diag: int) -> np.ndarray:
    """The flat indices (row-major) of an n x n matrix's entries on or below diagonal diag."""
    arange = np.arange(n)
    return np.flatnonzero(arange[None, :] < arange[:, None] + (diag + 1))


def tril_matrix_to_vec(mat, diag: int = 0):
    """The entries of mat [..., n, n] on or below diagonal diag, row by row (torch's)."""
    n = mat.shape[-1]
    if diag < -n or diag >= n:
        raise ValueError(f"diag ({diag}) provided is outside [{-n}, {n - 1}].")
    index = ops.tensor(_tril_index(n, diag))
    return mat.reshape(*mat.shape[:-2], n * n).index_select(-1, index)


def vec_to_tril_matrix(vec, diag: int = 0):
    """The n x n matrix whose entries on or below diagonal diag are vec's, row by row, zeros elsewhere."""
    m = vec.shape[-1]
    n_float = (-(1 + 2 * diag) + ((1 + 2 * diag) ** 2 + 8 * m + 4 * abs(diag) * (diag + 1)) ** 0.5) / 2
    if round(n_float) - n_float > finfo_eps(vec.dtype):
        raise ValueError(
            f"The size of last dimension is {m} which cannot be expressed as the lower triangular part of a "
            "square D x D matrix."
        )
    n = round(n_float)
    source = np.full(n * n, m)  # where each matrix entry reads: a vec entry, or the zero appended at m
    source[_tril_index(n, diag)] = np.arange(m)
    padded = ops.pad(vec, [(0, 0)] * (vec.ndim - 1) + [(0, 1)])
    return padded.index_select(-1, ops.tensor(source)).reshape(*vec.shape[:-1], n, n)


class CorrCholeskyTransform(Transform):
    """A vector of D (D - 1) / 2 reals onto the lower Cholesky factor of a D x D correlation matrix:
    tanh into (-1, 1), then stick-breaking over each row (rows of unit norm, positive diagonal). Two
    instances compare equal only when they are the same object, as torch's."""

    domain = constraints.real_vector
    codomain = constraints.corr_cholesky
    bijective = True

    def _call(self, x):
        x = x.tanh()
        eps = finfo_eps(x.dtype)
        r = vec_to_tril_matrix(x.clamp(min=-1 + eps, max=1 - eps), diag=-1)
        z1m_cumprod_sqrt = (1 - r**2).sqrt().cumprod(-1)
        r = r + ops.eye(r.shape[-1], dtype=r.dtype)
        lead = [(0, 0)] * (r.ndim - 1)
        return r * ops.pad(z1m_cumprod_sqrt[..., :-1], [*lead, (1, 0)], value=1.0)

    def _inverse(self, y):
        y_cumsum = 1 - (y * y).cumsum(-1)
        lead = [(0, 0)] * (y.ndim - 1)
        y_cumsum_shifted = ops.pad(y_cumsum[..., :-1], [*lead, (1, 0)], value=1.0)
        t = tril_matrix_to_vec(y, diag=-1) / tril_matrix_to_vec(y_cumsum_shifted, diag=-1).sqrt()
        return (t.log1p() - (-t).log1p()) / 2

    def log_abs_det_jacobian(self, x, y):
        """The stick-breaking's and the tanh's log |Jacobian| (of x against y's strict lower triangle)."""
        y1m_cumsum = 1 - (y * y).cumsum(-1)
        stick_breaking_logdet = 0.5 * tril_matrix_to_vec(y1m_cumsum, diag=-2).log().sum(-1)
        tanh_logdet = -2 * (x + softplus(-2 * x) - math.log(2.0)).sum(-1)
        return stick_breaking_logdet + tanh_logdet

    def forward_shape(self, shape):
        """(..., N) to (..., D, D) with N = D (D - 1) / 2."""
        shape = _at_least_one_dim(shape)
        n = shape[-1]
        d = round((0.25 + 2 * n) ** 0.5 + 0.5)
        if d * (d - 1) // 2 != n:
            raise ValueError("Input is not a flattened lower-diagonal number")
        return shape[:-1] + (d, d)

    def inverse_shape(self, shape):
        """(..., D, D) to (..., D (D - 1) / 2)."""
        if len(shape) < 2:
            raise ValueError("Too few dimensions on input")
        if shape[-2] != shape[-1]:
            raise ValueError("Input is not square")
        d = shape[-1]
        return tuple(shape[:-2]) + (d * (d - 1) // 2,)
