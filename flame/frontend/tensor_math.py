"""Tensor methods of arithmetic and statistics beyond the core of tensor_core.py, with PyTorch's names and
semantics, each composed from IR ops: products (matmul, mm, bmm, dot, outer, addmm, baddbmm,
tensordot, kron, cross), elementwise math (log1p with Kahan's correction, and what is built on it:
trunc, frac, log2, log10, tan, xlogy, logit), reductions and statistics (logsumexp, prod, nansum, nanmean,
kthvalue, median, cov, corrcoef, diagonal, diag, trace), and the fused updates of optimizer and EMA code (lerp,
addcmul, addcdiv and their in-place forms). methods.py binds them onto Tensor; ops.py makes the function forms."""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from flame.errors import ArgumentError, ArgumentTypeError, DTypeError, ShapeError
from flame.frontend import covariance, functional, more_math, opmath, pointwise_formulas, special_math, torch_formulas
from flame.frontend.autocast import policy
from flame.frontend.context import user_location
from flame.frontend.creation import eye
from flame.frontend.default_dtype import as_floating, floating
from flame.frontend.dispatch import apply
from flame.frontend.gemm_add import bias_vector, matmul_add, rounds_once, scaled_add
from flame.frontend.nextafter import nextafter
from flame.frontend.prod_backward import with_prod_backward
from flame.frontend.promotion import alpha_check, coefficient, result_type, same_dtype
from flame.frontend.tensor import Tensor, dim_index, int_arg, reduce_axes
from flame.frontend.tensor_core import full, matmul, pad, where
from flame.frontend.tensor_ops import _tensor
from flame.frontend.torch_saves import of_every_element, saves
from flame.ir.dtypes import bf16, boolean, dtype_of, f16, i64, u8

KthvalueResult = namedtuple("kthvalue", ["values", "indices"])
MedianResult = namedtuple("median", ["values", "indices"])


def _floating(op: str, *operands) -> None:
    """torch's ops that only have floating kernels (frac, lerp) raise for integer and bool tensors."""
    for x in operands:
        if isinstance(x, Tensor) and not x.dtype.is_float:
            raise DTypeError(f'{op}: "{op}" is not implemented for {x.dtype} tensors (as in PyTorch: convert with '
                             f".float())\n  at {user_location()}")


def _batches(op: str, a, b) -> None:
    """a and b are [b, n, m] and [b, m, p] batches of one size (torch.bmm's operands)."""
    _ranks(op, (a, 3), (b, 3))
    if a.shape[0] != b.shape[0]:
        raise ShapeError(f"{op}: batch sizes differ: {list(a.shape)} and {list(b.shape)}\n  at {user_location()}")


def _ranks(op: str, *pairs) -> None:
    """Each (tensor, rank) pair's tensor has that rank, else a ShapeError naming the op and the user's line."""
    for x, rank in pairs:
        if not isinstance(x, Tensor) or x.ndim != rank:
            got = list(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ShapeError(f"{op}: expects {rank}-D tensors, got {got}\n  at {user_location()}")



@opmath.composite
def _log1p(x: Tensor) -> Tensor:
    """log(1 + x) by Kahan's correction: log(w) * x / (w - 1) with w = 1 + x rounded, which cancels w's
    rounding error."""
    w = x + 1
    exact, inf = w == 1, w == float("inf")  # 1 + x rounds to 1: log1p(x) = x to within rounding
    safe = where(exact | inf, 2.0, w)  # keeps the unused branch finite (no 0/0 in either direction)
    return where(exact | inf, x, safe.log() * (x / (safe - 1)))


@opmath.composite
def _logit(x: Tensor, eps: float | None) -> Tensor:
    p = x.clamp(eps, 1 - eps) if eps is not None else x
    return (p / (1 - p)).log()


class TensorMath:
    """The mixin Tensor inherits (no state of its own)."""

    __slots__ = ()

    # ---- products --------------------------------------------------------------------------------
    def matmul(self, other):
        return matmul(self, other)

    def mm(self, mat2):
        """The product of two matrices (2-D only, as torch.mm; matmul broadcasts)."""
        _ranks("mm", (self, 2), (mat2, 2))
        return matmul(self, mat2)

    def bmm(self, mat2):
        """Batched product of [b, n, m] and [b, m, p] (equal batches, as torch.bmm)."""
        _batches("bmm", self, mat2)
        return matmul(self, mat2)

    def dot(self, tensor):
        """The inner product of two 1-D tensors of one length, as torch.dot."""
        _ranks("dot", (self, 1), (tensor, 1))
        return _promoted(matmul, self, tensor)

    def outer(self, vec2):
        """[n] x [m] -> [n, m]: self[i] * vec2[j], as torch.outer."""
        _ranks("outer", (self, 1), (vec2, 1))
        return self.unsqueeze(1) * vec2.unsqueeze(0)

    def mv(self, vec):
        """[n, m] @ [m] -> [n], as torch.mv (2-D and 1-D only)."""
        _ranks("mv", (self, 2), (vec, 1))
        return _promoted(matmul, self, vec)

    def inner(self, other):
        """The sum over the last dims of self and other (a product for a 0-d one), as torch.inner:
        [..., n] and [..., n] -> self's leading dims then other's."""
        if not self.ndim or not other.ndim:
            return self * other
        if self.shape[-1] != other.shape[-1]:
            raise ShapeError(f"inner: last dims differ: {list(self.shape)} and {list(other.shape)}\n"
                             f"  at {user_location()}")
        return self.tensordot(other, ([-1], [-1]))

    def addr(self, vec1, vec2, *, beta=1, alpha=1):
        """beta * self + alpha * outer(vec1, vec2), as torch.addr (beta = 0: self is not read; a float beta or
        alpha with integer tensors raises, as torch's alpha_check)."""
        dt = result_type(self, vec1, vec2)
        alpha_check("addr", "beta", beta, dt)
        alpha_check("addr", "alpha", alpha, dt)
        prod = vec1.outer(vec2)
        prod = prod * alpha if alpha != 1 else prod
        return prod if beta == 0 else (self * beta if beta != 1 else self) + prod

    def addbmm(self, batch1, batch2, *, beta=1, alpha=1):
        """beta * self + alpha * the sum over the batch of batch1[i] @ batch2[i], as torch.addbmm."""
        self, batch1, batch2 = _lowered(self, batch1, batch2)  # autocast: all three in the low dtype, as torch's
        _batches("addbmm", batch1, batch2)
        beta, alpha = _coefficients("addbmm", beta, alpha, self, batch1, batch2)
        prod = self.__class__.bmm(batch1, batch2)
        prod = prod.sum(0, dtype=prod.dtype)  # in the batches' dtype (an int32 sum stays int32), as torch's
        prod = prod * alpha if alpha != 1 else prod
        return prod if beta == 0 else (self * beta if beta != 1 else self) + prod

    def isclose(self, other, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False):
        """Whether self and other are close elementwise, as torch.isclose (more_math.isclose)."""
        return more_math.isclose(self, other, rtol, atol, equal_nan)

    def allclose(self, other, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
        """isclose(...).all() as a Python bool (torch.allclose)."""
        return bool(self.isclose(other, rtol, atol, equal_nan).all())

    def equal(self, other) -> bool:
        """True if self and other have one shape and equal elements (NaN is not equal), as torch.equal."""
        return tuple(self.shape) == tuple(other.shape) and bool((self == other).all())

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        """beta * self + alpha * (mat1 @ mat2), as torch.addmm (self broadcast to the product; with
        beta = 0 self is not read, so its NaN and inf do not propagate)."""
        _ranks("addmm", (mat1, 2), (mat2, 2))
        self, mat1, mat2 = _lowered(self, mat1, mat2)  # autocast: all three in the low dtype, as torch's
        beta, alpha = _coefficients("addmm", beta, alpha, self, mat1, mat2)
        if beta == 1 and alpha == 1 and bias_vector(self, mat2.shape[-1]):
            return matmul_add(mat1, mat2, self)  # a bias vector: added before the one rounding, as torch's
        if rounds_once(mat1, mat2, self, (mat1.shape[0], mat2.shape[1])):
            return scaled_add(mat1, mat2, self, alpha, beta)  # f16/bf16: rounded once, as torch's
        if beta == 1 and alpha == 1:
            return matmul_add(mat1, mat2, self)
        prod = matmul(mat1, mat2)
        prod = prod * alpha if alpha != 1 else prod
        if beta == 0:
            return prod
        return (self * beta if beta != 1 else self) + prod

    def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
        """beta * self + alpha * (batch1 @ batch2) over a batch, as torch.baddbmm."""
        self, batch1, batch2 = _lowered(self, batch1, batch2)  # autocast: all three in the low dtype
        _batches("baddbmm", batch1, batch2)
        beta, alpha = _coefficients("baddbmm", beta, alpha, self, batch1, batch2)
        if beta == 1 and alpha == 1 and bias_vector(self, batch2.shape[-1]):
            return matmul_add(batch1, batch2, self)  # a bias vector: added before the one rounding, as torch's
        if rounds_once(batch1, batch2, self, (batch1.shape[0], batch1.shape[1], batch2.shape[2])):
            return scaled_add(batch1, batch2, self, alpha, beta)  # f16/bf16: rounded once, as torch's
        if beta == 1 and alpha == 1:
            return matmul_add(batch1, batch2, self)
        prod = self.__class__.bmm(batch1, batch2)
        prod = prod * alpha if alpha != 1 else prod
        if beta == 0:
            return prod
        return (self * beta if beta != 1 else self) + prod

    def tensordot(self, other, dims=2):
        """The sum over dims pairs of self's and other's axes (an int: self's last and other's first
        dims), as torch.tensordot."""
        if isinstance(dims, int):
            a_axes, b_axes = list(range(self.ndim - dims, self.ndim)), list(range(dims))
        else:
            a_axes, b_axes = [list(d) if not isinstance(d, int) else [d] for d in dims]
        a_axes = [dim_index("tensordot", d, self.ndim) for d in a_axes]
        b_axes = [dim_index("tensordot", d, other.ndim) for d in b_axes]
        if [self.shape[i] for i in a_axes] != [other.shape[j] for j in b_axes]:
            raise ShapeError(f"tensordot: contracted dims differ: {[self.shape[i] for i in a_axes]} and "
                             f"{[other.shape[j] for j in b_axes]}\n  at {user_location()}")
        a_free = [i for i in range(self.ndim) if i not in a_axes]
        b_free = [j for j in range(other.ndim) if j not in b_axes]
        k = math.prod(self.shape[i] for i in a_axes)
        a = self.permute(*a_free, *a_axes).reshape(-1, k)
        b = other.permute(*b_axes, *b_free).reshape(k, -1)
        out = _promoted(matmul, a, b, cpu="lower")
        return out.reshape(*[self.shape[i] for i in a_free], *[other.shape[j] for j in b_free])

    def kron(self, other):
        """The Kronecker product, as torch.kron (ranks padded with leading 1s)."""
        rank = max(self.ndim, other.ndim)
        a = self.reshape(*([1] * (rank - self.ndim)), *self.shape)
        b = other.reshape(*([1] * (rank - other.ndim)), *other.shape)
        inter = [v for pair in zip(a.shape, [1] * rank) for v in pair]
        outer = [v for pair in zip([1] * rank, b.shape) for v in pair]
        prod = a.reshape(*inter) * b.reshape(*outer)
        return prod.reshape(*[x * y for x, y in zip(a.shape, b.shape)])

    @policy("promote", cpu="")  # autocast: on PyTorch's CUDA promote list (the widest input), none of its CPU lists
    @saves(pointwise_formulas.cross_saved, vjp=pointwise_formulas.cross)
    def cross(self, other, dim: int | None = None):
        """The cross product of 3-vectors along dim (the first dim of size 3 when None, as torch.cross)."""
        if dim is None:
            dim = next((i for i, n in enumerate(self.shape) if n == 3), None)
            if dim is None:
                raise ShapeError(f"cross: no dimension of size 3 in {list(self.shape)}\n  at {user_location()}")
        axis = dim_index("cross", dim, self.ndim)
        if isinstance(other, Tensor) and other.dtype != self.dtype:  # torch's kernel promotes neither
            raise DTypeError(f"cross: expected scalar type {self.dtype} but found {other.dtype} (as in PyTorch: "
                             f"convert one with .to)\n  at {user_location()}")
        if self.shape[axis] != 3 or other.shape[axis] != 3:
            raise ShapeError(f"cross: dimension {dim} must have size 3, got {list(self.shape)} and "
                             f"{list(other.shape)}\n  at {user_location()}")
        return self.roll(-1, axis) * other.roll(-2, axis) - self.roll(-2, axis) * other.roll(-1, axis)

    # ---- elementwise math ------------------------------------------------------------------------
    @policy("f32", cpu="")  # autocast: on PyTorch's CUDA float32 list; on none of its CPU lists
    @saves("self", vjp=pointwise_formulas.log1p)
    def log1p(self):
        """log(1 + self), accurate for small self, as torch.log1p (f16 / bf16: in f32, rounded once); the
        gradient PyTorch's grad / (self + 1), two ops of self's dtype (inf at -1)."""
        x = as_floating(self)
        value = _log1p(x)
        if not opmath.wants_gradient(x):
            return value
        return apply("straight_through", (x + 1).log(), value)  # log's gradient: g / (x + 1)

    @policy("f32", cpu="")  # autocast: on PyTorch's CUDA float32 list; on none of its CPU lists
    def expm1(self):
        """exp(self) - 1, accurate for small self, as torch.expm1 (f16 / bf16: in f32, rounded once); the
        gradient PyTorch's grad * (result + 1), two ops of self's dtype (the expm1 op's VJP)."""
        return self._float_unary("expm1")

    # ---- special functions (flame/ir/ops/special.py; integers promote to the default dtype, as torch's)
    def lgamma(self):
        """log |Gamma(self)|, as torch.lgamma (inf at 0 and the negative integers)."""
        return apply("lgamma", as_floating(self))

    def digamma(self):
        """The logarithmic derivative of Gamma, as torch.digamma (-inf at +0, inf at -0, NaN at the
        negative integers)."""
        return apply("digamma", as_floating(self))

    def polygamma(self, n: int):
        """The n-th derivative of digamma (n = 0: digamma itself), as torch.polygamma(n, self)."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise ArgumentTypeError(f"polygamma(): argument 'n' must be int, not {type(n).__name__}\n"
                                    f"  at {user_location()}")
        if n < 0:
            raise ArgumentError(f"polygamma(n, x) does not support negative n (got n = {n})\n  at {user_location()}")
        x = as_floating(self)
        return apply("digamma", x) if n == 0 else apply("polygamma", x, n=int(n))

    def erfinv(self):
        """The inverse error function, as torch.erfinv (+-inf at +-1, NaN beyond [-1, 1])."""
        return apply("erfinv", as_floating(self))

    def i0(self):
        return special_math.i0(self)

    def mvlgamma(self, p: int):
        return special_math.multigammaln(self, p)

    # ---- inverse trig and hyperbolic functions, erfc (IR ops; integers promote to the default dtype) ---
    @policy("f32", cpu="")  # autocast: on PyTorch's CUDA float32 list; on none of its CPU lists
    def asin(self):
        """The arcsine in [-pi/2, pi/2], NaN outside [-1, 1], as torch.asin."""
        return self._float_unary("asin")

    @policy("f32", cpu="")  # autocast: on PyTorch's CUDA float32 list; on none of its CPU lists
    def acos(self):
        """The arccosine in [0, pi], NaN outside [-1, 1], as torch.acos."""
        return self._float_unary("acos")

    def atan(self):
        """The arctangent in (-pi/2, pi/2), as torch.atan."""
        return self._float_unary("atan")

    def asinh(self):
        return self._float_unary("asinh")

    def acosh(self):
        """The inverse hyperbolic cosine, NaN below 1, as torch.acosh."""
        return self._float_unary("acosh")

    def atanh(self):
        """The inverse hyperbolic tangent, +-inf at +-1 and NaN beyond, as torch.atanh."""
        return self._float_unary("atanh")

    def erfc(self):
        """1 - erf(self), accurate where erf rounds to 1, as torch.erfc."""
        return self._float_unary("erfc")

    @policy("promote", cpu="")  # autocast: on PyTorch's CUDA promote list (the widest input), none of its CPU lists
    def atan2(self, other):
        """The angle of the point (other, self) in [-pi, pi], elementwise with broadcasting, as
        torch.atan2 (the promoted dtype; integers and bools give the default floating dtype)."""
        if not isinstance(other, Tensor):
            raise ArgumentTypeError(f"atan2(): argument 'other' must be Tensor, not {type(other).__name__}\n"
                                    f"  at {user_location()}")
        dt = result_type(self, other)
        dt = floating(dt)
        return apply("atan2", self.to(dt), other.to(dt))

    arcsin, arccos, arctan, arcsinh, arccosh, arctanh, arctan2 = asin, acos, atan, asinh, acosh, atanh, atan2

    def trunc(self):
        """Rounded toward zero, as torch.trunc (integers as they are, in a new tensor; bool raises)."""
        if self.dtype == boolean:
            raise DTypeError(f'trunc: "trunc" is not implemented for bool tensors (as in PyTorch)\n  at '
                             f"{user_location()}")
        if not self.dtype.is_float:
            return self.clone()
        return where(self < 0, self.ceil(), self.floor())

    fix = trunc

    def frac(self):
        """self - trunc(self): the fractional part with self's sign, as torch.frac (floating tensors)."""
        _floating("frac", self)
        return self - self.trunc()

    @policy("f32", cpu="")  # autocast: on PyTorch's CUDA float32 list; on none of its CPU lists
    def log2(self):
        return self.log() * (1.0 / math.log(2.0))

    @policy("f32", cpu="")  # autocast: on PyTorch's CUDA float32 list; on none of its CPU lists
    def log10(self):
        return self.log() * (1.0 / math.log(10.0))

    @policy("f32", cpu="")  # autocast: on PyTorch's CUDA float32 list; on none of its CPU lists
    def sinh(self):
        return self._float_unary("sinh")

    @policy("f32", cpu="")  # autocast: on PyTorch's CUDA float32 list; on none of its CPU lists
    def cosh(self):
        return self._float_unary("cosh")

    @policy("f32", cpu="")  # autocast: on PyTorch's CUDA float32 list; on none of its CPU lists
    def tan(self):
        return self._float_unary("tan")

    @policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
    @saves("self", "other", vjp=torch_formulas.xlogy)
    def xlogy(self, other):
        """self * log(other), 0 where self is 0 (unless other is NaN), as torch.xlogy."""
        dt = result_type(self, other)  # both in the promoted dtype (integers: the default float), as torch's
        x, other = as_floating(self.to(dt)), as_floating(_tensor(other).to(dt))
        value = where((x == 0) & ~other.isnan(), 0.0, x * other.log())  # 0 even for other = 0
        if not (opmath.float_gradient(x) or opmath.float_gradient(other)):
            return value
        # PyTorch's xlogy_backward (the gradient of a form whose value is not used): log(other) to self, 0
        # where self is 0 and other <= 0; self / other to other. Autodiff of the where above would give
        # self NaN there (0 times log's infinite gradient).
        d_self = where((x == 0) & (other <= 0), 0.0, other.log()).detach()
        form = x * d_self + other * (x / other).detach()
        return apply("straight_through", form, value.detach())

    @policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
    @saves("self", vjp=pointwise_formulas.logit)
    def logit(self, eps: float | None = None):
        """log(p / (1 - p)), p clamped to [eps, 1 - eps] when eps is given, as torch.logit (f16 / bf16: in
        f32, rounded once, as its CUDA kernel). The gradient is PyTorch's logit_backward: the cotangent
        over x * (1 - x) inside [eps, 1 - eps] (±inf at 0 and 1), outside it 0, or NaN without eps."""
        x = as_floating(self)
        value = _logit(x, eps)
        if not opmath.wants_gradient(x):
            return value
        w = opmath.wide(x)
        if eps is None:  # NaN outside [0, 1], as torch's
            return opmath.with_derivative(x, value, where((w < 0.0) | (w > 1.0), float("nan"), 1 / (w * (1 - w))))
        return opmath.with_derivative_inside(x, value, (w >= eps) & (w <= 1 - eps), 1 / (w * (1 - w)))

    # ---- reductions and statistics ---------------------------------------------------------------
    def logsumexp(self, dim, keepdim: bool = False):
        """log(sum(exp(self))) over dim (an int or a tuple), computed stably, as torch.logsumexp."""
        axes = reduce_axes(dim, self.ndim, "logsumexp")
        if len(axes) == 1:
            return functional.logsumexp(self, axes[0], keepdim)
        rest = [a for a in range(self.ndim) if a not in axes]
        n = math.prod(self.shape[a] for a in axes)  # (not -1: a zero-size tensor leaves it ambiguous)
        moved = self.permute(*rest, *axes).reshape(*[self.shape[a] for a in rest], n)
        out = functional.logsumexp(moved, -1)
        return out.reshape(*[1 if a in axes else self.shape[a] for a in range(self.ndim)]) if keepdim else out

    @policy("f32")  # autocast: on PyTorch's float32 list (not with an explicit dtype)
    @saves("self", "result", vjp=torch_formulas.prod)
    def prod(self, dim: int | None = None, keepdim: bool = False, dtype=None):
        """The product over dim (every element when None), as torch.prod: the last running product of
        cumprod; its gradient PyTorch's prod_backward (prod_backward.with_prod_backward)."""
        x = self.to(dtype) if dtype is not None else (self if self.dtype.is_float else self.to(i64))  # ints: int64
        # the product of nothing is 1, plus the (zero) sum of nothing: a result x's gradient flows to, as torch's
        if dim is None:
            flat = x.reshape(-1)
            if not flat.shape[0]:
                return full((), 1, x.dtype) + flat.sum().to(x.dtype)
            return with_prod_backward(flat, 0, False, flat.cumprod(0, dtype=x.dtype)[-1], whole=True)
        axis = dim_index("prod", dim, x.ndim)
        if x.ndim == 0:
            return x.clone()  # a new tensor, as torch's: a write into it must not reach the input
        if not x.shape[axis]:
            out = full(tuple(1 if a == axis else n for a, n in enumerate(x.shape)), 1, x.dtype)
            out = out + x.sum(axis, keepdim=True).to(x.dtype)
            return out if keepdim else out.squeeze(axis)
        out = x.cumprod(axis, dtype=x.dtype).narrow(axis, x.shape[axis] - 1, 1)  # an int dtype asked stays
        return with_prod_backward(x, axis, keepdim, out if keepdim else out.squeeze(axis))

    @policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
    def nansum(self, dim=None, keepdim: bool = False, *, dtype=None):
        """The sum with NaNs counted as zero, as torch.nansum (integers: the sum, in int64; `dtype`: the
        sum's dtype, the NaNs zeroed before the cast)."""
        x = where(self.isnan(), 0.0, self) if self.dtype.is_float else self
        return x.sum(dim, keepdim, dtype=dtype)

    @policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
    def nanmean(self, dim=None, keepdim: bool = False, *, dtype=None):
        """The mean of the elements that are not NaN, as torch.nanmean (floating tensors only; `dtype`, a
        floating dtype, the one it is computed and returned in)."""
        if not self.dtype.is_float:
            raise DTypeError(f"nanmean(): expected input to have floating point dtype but got {self.dtype} (as in "
                             f"PyTorch: x.float().nanmean())\n  at {user_location()}")
        if dtype is not None and not dtype_of(dtype).is_float:
            raise DTypeError(
                f"nanmean(): could not infer output dtype. Optional dtype must be either a floating point "
                f"dtype, got {dtype_of(dtype)}\n  at {user_location()}"
            )
        x = self if dtype is None else self.to(dtype)
        count = (~x.isnan()).to(x.dtype).sum(dim, keepdim)
        return x.nansum(dim, keepdim) / count

    def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False):
        """(values, indices) of the k-th smallest element along dim (k from 1), as torch.kthvalue."""
        axis, k = dim_index("kthvalue", dim, self.ndim), int_arg(k)
        x = self if self.ndim else self.reshape(1)
        n = x.shape[axis]
        if not isinstance(k, (int, np.integer)) or not 1 <= k <= n:
            raise ShapeError(
                f"kthvalue: k={k!r} is out of range for dimension {dim} of size {n} (expected 1 <= k <= "
                f"{n})\n  at {user_location()}"
            )
        idx = x.argsort(axis).narrow(axis, int(k) - 1, 1)
        values, indices = x.gather(axis, idx), idx
        if not keepdim or self.ndim == 0:
            values, indices = values.squeeze(axis), indices.squeeze(axis)
        return KthvalueResult(values, indices)

    @policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
    @saves(of_every_element, vjp=pointwise_formulas.median_of_every_element)
    def median(self, dim: int | None = None, keepdim: bool = False):
        """The lower median (the ((n + 1) // 2)-th smallest): of every element when dim is None, else
        (values, indices) along dim, as torch.median."""
        if self.dtype == boolean:
            raise DTypeError(
                f'median: "median" is not implemented for bool tensors (as in PyTorch)\n  at {user_location()}'
            )
        if dim is None:
            flat = self.reshape(-1)
            if not flat.shape[0] and self.dtype.is_float:
                return full((), float("nan"), self.dtype)  # torch: the median of nothing is NaN
            v = flat.kthvalue((flat.shape[0] + 1) // 2, 0).values
            if not self.dtype.is_float:
                return v
            # torch: the gradient shared evenly by the elements equal to the median (by the NaNs at a NaN)
            return opmath.evenly_distributed(flat, where(flat.isnan().any(), float("nan"), v.detach()))
        axis = dim_index("median", dim, self.ndim)
        n = self.shape[axis] if self.ndim else 1
        r = self.kthvalue((n + 1) // 2, axis, keepdim)
        if not self.dtype.is_float or not self.ndim:
            return MedianResult(r.values, r.indices)
        nan = self.isnan()  # torch: a line holding a NaN has the median NaN, at its first NaN (its gradient there)
        has = nan.any(axis, keepdim)
        first = nan.to(u8).argmax(axis, True)
        at_nan = self.gather(axis, first)
        first, at_nan = (first, at_nan) if keepdim else (first.squeeze(axis), at_nan.squeeze(axis))
        return MedianResult(where(has, at_nan, r.values), where(has, first, r.indices))

    @saves(of_every_element, vjp=pointwise_formulas.median_of_every_element)
    def nanmedian(self, dim: int | None = None, keepdim: bool = False):
        """median ignoring NaN, as torch.nanmedian: the lower median of the values that are not NaN (NaN
        where a line holds nothing else); of every element when dim is None, else (values, indices)
        along dim. Without dim the gradient is shared evenly by the elements equal to it, as torch's."""
        if self.dtype == boolean or not self.dtype.is_float:
            return self.median(dim, keepdim)
        if dim is None:
            flat = self.reshape(-1)
            if not flat.shape[0]:
                return full((), float("nan"), self.dtype)  # torch: the median of nothing is NaN
            # the gradient shared evenly by the elements equal to it (NaN with NaN), its value as it is (±inf too)
            return opmath.evenly_distributed(flat, flat.nanmedian(0).values.detach())
        axis = dim_index("nanmedian", dim, self.ndim)
        if not self.ndim:
            return MedianResult(self.clone(), full((), 0, i64))  # a new tensor, as torch's
        ranked = self.sort(axis)  # NaN last
        k = ((~self.isnan()).sum(axis, keepdim=True) - 1).clamp(min=0) // 2
        values, indices = ranked.values.gather(axis, k), ranked.indices.gather(axis, k)
        if not keepdim:
            values, indices = values.squeeze(axis), indices.squeeze(axis)
        return MedianResult(values, indices)

    def cov(self, *, correction: int = 1, fweights=None, aweights=None):
        """The covariance of the rows (variables) over the columns (observations), as torch.cov
        (covariance.cov: with frequency and analytic weights)."""
        return covariance.cov(self, correction=correction, fweights=fweights, aweights=aweights)

    def corrcoef(self):
        """Pearson's correlation coefficients of the rows, clipped to [-1, 1], as torch.corrcoef."""
        c = self.cov()
        if c.ndim == 0:
            return c / c
        d = c.diagonal().sqrt()
        return (c / d.unsqueeze(1) / d.unsqueeze(0)).clamp(-1.0, 1.0)

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1):
        """The diagonal of the (dim1, dim2) planes (above it for offset > 0, below for offset < 0) as
        the last dim, as torch.diagonal: a view, with torch's stride() and storage_offset()."""
        a, b = dim_index("diagonal", dim1, self.ndim), dim_index("diagonal", dim2, self.ndim)
        offset = int_arg(offset)
        if not isinstance(offset, (int, np.integer)) or isinstance(offset, (bool, np.bool_)):
            raise ArgumentTypeError(f"diagonal(): argument 'offset' must be int, not {type(offset).__name__}\n"
                                    f"  at {user_location()}")
        if a == b:
            raise ShapeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}\n  at {user_location()}")
        return apply("diagonal", self, offset=int(offset), axis1=a, axis2=b)

    def diag(self, diagonal: int = 0):
        """A 1-D tensor's matrix with it on a diagonal, or a matrix's diagonal, as torch.diag."""
        if self.ndim == 2:
            return self.diagonal(diagonal)
        if self.ndim != 1:
            raise ShapeError(f"diag: expects a 1-D or 2-D tensor, got {list(self.shape)}\n  at {user_location()}")
        n, k = self.shape[0], abs(diagonal)
        # selected, not multiplied by the identity: a NaN or inf on the diagonal leaves zeros (+0) beside it
        square = where(eye(n, dtype=boolean), self.unsqueeze(0), full((), 0, self.dtype))
        if not k:
            return square
        return pad(square, ((0, k), (k, 0)) if diagonal > 0 else ((k, 0), (0, k)))

    @policy("", cpu="f32")  # autocast: on PyTorch's CPU float32 list, none of its CUDA lists
    def trace(self):
        """The sum of a matrix's diagonal, as torch.trace (not of a bool matrix, as torch's)."""
        _ranks("trace", (self, 2))
        if self.dtype == boolean:
            raise DTypeError(f'trace: "trace" not implemented for \'Bool\' (as in PyTorch)\n  at {user_location()}')
        return self.diagonal().sum()

    # ---- interpolation and fused products (optimizer and EMA code) -------------------------------
    @saves(pointwise_formulas.lerp_saved, vjp=pointwise_formulas.lerp)
    def lerp(self, end, weight):
        """self + weight * (end - self), as torch.lerp, in PyTorch's two-sided form (from end when
        weight >= 0.5), so weight 1 gives end exactly (floating tensors)."""
        _floating("lerp", self, end, weight)
        for name, t in (("end", end), ("weight", weight)):  # torch: no promotion (a 0-d weight is a number)
            if isinstance(t, Tensor) and t.dtype != self.dtype and (name == "end" or t.ndim):
                raise DTypeError(f"lerp: expected dtype {self.dtype} for `{name}` but got dtype {t.dtype}, as in "
                                 f"PyTorch (convert it with .to({self.dtype.name!r}))\n  at {user_location()}")

        def two_sided(x, y, w):
            diff = y - x
            if isinstance(w, Tensor):
                return where(w.abs() < 0.5, x + w * diff, y - diff * (1 - w))
            return x + w * diff if abs(w) < 0.5 else y - diff * (1 - w)

        out = opmath.fused(two_sided, self, end, weight)  # f16/bf16: in f32, rounded once, as torch's kernel
        diff = end - self
        # torch's gradients, each one product: grad * (1 - weight), grad * weight and grad * (end - self)
        # (the forms above would give an infinite grad's inf - inf = NaN); the values stay the ones above.
        # Always built (flame.grad differentiates tensors that do not require grad, so their flags cannot
        # tell): where no gradient reads it, it is dead code
        w = weight.detach() if isinstance(weight, Tensor) else weight
        lin = self * (1 - w) + end * w
        if isinstance(weight, Tensor):
            lin = lin + weight * diff.detach()
        return apply("straight_through", lin, out)

    @policy("promote", cpu="")  # autocast: on PyTorch's CUDA promote list (the widest input), none of its CPU lists
    @saves(pointwise_formulas.addcmul_saved, vjp=pointwise_formulas.addcmul)
    def addcmul(self, tensor1, tensor2, *, value=1):
        """self + value * tensor1 * tensor2, as torch.addcmul (f16/bf16: in f32, rounded once, as torch's kernel)."""
        # in the tensors' dtype, as torch's Scalar (an integer result stays integer); a 0-d tensor: its value
        value = coefficient("addcmul", "value", value, result_type(self, tensor1, tensor2))
        one = opmath.is_one(value)
        out = opmath.fused(lambda x, a, b: x + (a * b if one else value * a * b), self, tensor1, tensor2)
        if out.dtype not in (f16, bf16):
            return out
        # torch's gradients: tensor1's grad * (tensor2 * value), tensor2's grad * (tensor1 * value)
        grads = self + tensor1 * (tensor2 * value).detach() + (tensor1 * value).detach() * tensor2
        return apply("straight_through", grads, out)

    def addcmul_(self, tensor1, tensor2, *, value=1):
        return self._inplace(lambda x: x.addcmul(tensor1, tensor2, value=value), tensor1, tensor2, what="addcmul_")

    @policy("promote", cpu="")  # autocast: on PyTorch's CUDA promote list (the widest input), none of its CPU lists
    @saves(pointwise_formulas.addcdiv_saved, vjp=pointwise_formulas.addcdiv)
    def addcdiv(self, tensor1, tensor2, *, value=1):
        """self + value * tensor1 / tensor2, as torch.addcdiv (which refuses two integer operands; f16/bf16: in
        f32, rounded once, as torch's kernel)."""
        if not any(isinstance(t, Tensor) and t.dtype.is_float for t in (tensor1, tensor2)):
            raise DTypeError("addcdiv: integer division with addcdiv is no longer supported (as in PyTorch); "
                             f"divide floating tensors\n  at {user_location()}")
        value = value.detach() if isinstance(value, Tensor) else value  # a 0-d tensor: its value, as torch
        one = opmath.is_one(value)
        out = opmath.fused(lambda x, a, b: x + (a / b if one else a / b * value), self, tensor1, tensor2)
        if out.dtype not in (f16, bf16):
            return out
        # torch's gradients: tensor1's grad * (value / tensor2), tensor2's -grad * (value * tensor1 / tensor2^2)
        v = value.to(out.dtype) if isinstance(value, Tensor) else full((), float(value), out.dtype)  # in their dtype
        grads = self + tensor1 * (v / tensor2).detach() + tensor2 * (-(value * tensor1 / (tensor2 * tensor2))).detach()
        return apply("straight_through", grads, out)

    def addcdiv_(self, tensor1, tensor2, *, value=1):
        return self._inplace(lambda x: x.addcdiv(tensor1, tensor2, value=value), tensor1, tensor2, what="addcdiv_")

    # ---- the method forms of flame.frontend.more_math ---------------------------------------------------
    def nan_to_num(self, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None):
        return more_math.nan_to_num(self, nan, posinf, neginf)

    def logaddexp(self, other):
        return more_math.logaddexp(self, other)

    def quantile(self, q, dim: int | None = None, keepdim: bool = False, *, interpolation: str = "linear"):
        """The q-th quantiles along dim, as torch.quantile (more_math.quantile)."""
        return more_math.quantile(self, q, dim, keepdim, interpolation=interpolation)

    def nanquantile(self, q, dim: int | None = None, keepdim: bool = False, *, interpolation: str = "linear"):
        """quantile over the values that are not NaN, as torch.nanquantile."""
        return more_math.nanquantile(self, q, dim, keepdim, interpolation=interpolation)

    def msort(self):
        """self sorted along dim 0, as torch.msort."""
        return more_math.msort(self)

    def dist(self, other, p: float = 2.0):
        """The p-norm of self - other, as torch.Tensor.dist."""
        return more_math.dist(self, other, p)

    def logaddexp2(self, other):
        return more_math.logaddexp2(self, other)

    def hypot(self, other):
        return more_math.hypot(self, other)

    def nextafter(self, other):
        return nextafter(self, other)

    def copysign(self, other):
        return more_math.copysign(self, other)

    def signbit(self):
        return more_math.signbit(self)

    def heaviside(self, values):
        return more_math.heaviside(self, values)

    def sinc(self):
        return more_math.sinc(self)

    def renorm(self, p, dim: int, maxnorm):
        return more_math.renorm(self, p, dim, maxnorm)

    def fmax(self, other):
        return more_math.fmax(self, other)

    def fmin(self, other):
        return more_math.fmin(self, other)

    def float_power(self, exponent):
        return more_math.float_power(self, exponent)

    def exp2(self):
        return more_math.exp2(self)

    def deg2rad(self):
        return more_math.deg2rad(self)

    def rad2deg(self):
        return more_math.rad2deg(self)

    def positive(self):
        """self itself (+x), as torch's; a bool tensor raises, as torch's."""
        if self.dtype == boolean:
            raise DTypeError(f"The `+` operator, on a bool tensor is not supported (as in PyTorch)\n  at "
                             f"{user_location()}")
        return self

    def __pos__(self):
        return self.positive()

    def negative(self):
        return -self

    def absolute(self):
        return self.abs()

    @saves("self", "result", vjp=pointwise_formulas.sgn)  # (torch's SgnBackward0 saves both; sign's nothing)
    def sgn(self):
        return self.sign()

    def diff(self, n: int = 1, dim: int = -1, prepend=None, append=None):
        return more_math.diff(self, n, dim, prepend, append)

    def rot90(self, k: int = 1, dims=(0, 1)):
        return more_math.rot90(self, k, dims)

    def diag_embed(self, offset: int = 0, dim1: int = -2, dim2: int = -1):
        return more_math.diag_embed(self, offset, dim1, dim2)

    def masked_scatter(self, mask, source):
        return more_math.masked_scatter(self, mask, source)

    def masked_scatter_(self, mask, source):
        return self._inplace(lambda x: x.masked_scatter(mask, source), source, what="masked_scatter_")

    def aminmax(self, *, dim: int | None = None, keepdim: bool = False):
        return more_math.aminmax(self, dim=dim, keepdim=keepdim)

    def mode(self, dim: int = -1, keepdim: bool = False):
        return more_math.mode(self, dim, keepdim)

    def addmv(self, mat, vec, *, beta: float = 1.0, alpha: float = 1.0):
        return more_math.addmv(self, mat, vec, beta=beta, alpha=alpha)

    def vdot(self, other):
        return more_math.vdot(self, other)


def _coefficients(op: str, beta, alpha, *tensors):
    """beta and alpha of a GEMM with an added input (addmm and kin) in the tensors' dtype, as torch's
    Scalars: for integer tensors truncated to integers, so the result stays integer. The tensors (input,
    then the two factors) must share that dtype: torch's GEMMs promote none of them."""
    same_dtype(op, input=tensors[0], mat1=tensors[1], mat2=tensors[2])
    dt = result_type(*tensors)
    return coefficient(op, "beta", beta, dt), coefficient(op, "alpha", alpha, dt)


def _lowered(*tensors):
    """Inside an enabled autocast region, the floating tensors in its low dtype (PyTorch's
    lower-precision lists: addmm, baddbmm, addbmm); else as they are."""
    from flame.frontend.autocast import cast_inputs

    return cast_inputs("lower", tensors)


def _promoted(fn, *tensors, cpu: str = ""):
    """fn(*tensors) as PyTorch's CUDA autocast runs an op of its "promote" list (dot, mv, tensordot): the
    inputs in their widest floating dtype, and no lowering inside. Its CPU lists hold none of them: there
    the inputs stay as they are (mixed dtypes raise as outside a region), and with cpu="lower" (tensordot,
    whose CPU kernel is a matmul, on the CPU lower-precision list) inputs of one dtype run in the low one."""
    from flame.frontend.autocast import autocast, cast_inputs, cpu_lists, is_autocast_enabled

    if not is_autocast_enabled():
        return fn(*tensors)
    if not cpu_lists():
        tensors = cast_inputs("promote", tensors)
    elif cpu == "lower" and len({t.dtype for t in tensors}) == 1:
        tensors = cast_inputs("lower", tensors)
    with autocast(enabled=False):
        return fn(*tensors)
