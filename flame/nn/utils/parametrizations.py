"""flame.nn.utils.parametrizations: weight_norm, spectral_norm and orthogonal as parametrizations
(flame.nn.utils.parametrize), as torch.nn.utils.parametrizations.

    conv = parametrizations.weight_norm(nn.Conv1d(80, 512, 7))   # HiFi-GAN, WaveNet
    # state_dict: parametrizations.weight.original0 (g), parametrizations.weight.original1 (v)
    disc = parametrizations.spectral_norm(nn.Conv2d(64, 128, 4))  # GAN discriminators
    # state_dict: parametrizations.weight.original, parametrizations.weight.0._u / ._v
    rnn = parametrizations.orthogonal(nn.Linear(256, 256))   # orthogonal recurrent weights
    # state_dict: parametrizations.weight.original, parametrizations.weight.0.base

Spectral norm's power iteration moves `_u` and `_v` in place in training mode only, as torch's; inside
@flame.compile they are `state` inputs whose new values the step writes back (as BatchNorm's running
statistics)."""

from __future__ import annotations

import numpy as np

from flame.errors import DimError
from flame.frontend.activations import normalize
from flame.frontend.context import no_grad
from flame.frontend.creation import eye, randn, zeros
from flame.frontend.more_math import vdot
from flame.frontend.ops import vector_norm
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import cat
from flame.nn.conv import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from flame.nn.module import Module
from flame.nn.utils import _orthogonal_maps as maps
from flame.nn.utils import parametrize

__all__ = ["orthogonal", "spectral_norm", "weight_norm"]
_ORTHOGONAL_MAPS = ("matrix_exp", "cayley", "householder")


def norm_except_dim(v: Tensor, pow: float = 2, dim: int = 0) -> Tensor:  # noqa: A002
    """The `pow`-norm of v over every dimension but `dim`, kept as size-1 dimensions (torch's
    norm_except_dim); dim=-1 is the norm of the whole tensor, a 0-d tensor, as torch's; another dim
    outside v's dimensions raises torch's IndexError."""
    if dim == -1:
        return vector_norm(v, pow)
    n = max(v.ndim, 1)
    if not -n <= dim < n:
        raise DimError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    d = dim % n if v.ndim else 0
    others = tuple(a for a in range(v.ndim) if a != d)
    if not others:
        return v.abs()
    return vector_norm(v, pow, others, keepdim=True)


def _weight_norm(v: Tensor, g: Tensor, dim: int) -> Tensor:
    """v * (g / ||v||) with the norm over every dimension but dim (torch._weight_norm)."""
    return v * (g / norm_except_dim(v, 2, dim))


class _WeightNorm(Module):
    """The weight-norm parametrization: weight = g * v / ||v|| (norm over every dimension but dim)."""

    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return _weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight: Tensor) -> tuple[Tensor, Tensor]:
        """(g, v) = (||weight||, weight)."""
        return norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module: Module, name: str = "weight", dim: int = 0) -> Module:
    """Weight normalisation (Salimans & Kingma) of `module.<name>` as a parametrization, as torch's:
    the magnitude g is `parametrizations.<name>.original0` and the direction v `original1`; dim=None
    normalises the whole tensor. A state_dict of torch's deprecated weight_norm (`<name>_g`, `<name>_v`)
    loads into it. Returns module."""
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)

    def _weight_norm_compat_hook(
        state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        g_key, v_key = f"{prefix}{name}_g", f"{prefix}{name}_v"
        if g_key in state_dict and v_key in state_dict:
            state_dict[f"{prefix}parametrizations.{name}.original0"] = state_dict.pop(g_key)
            state_dict[f"{prefix}parametrizations.{name}.original1"] = state_dict.pop(v_key)

    module._register_load_state_dict_pre_hook(_weight_norm_compat_hook)
    return module


def weight_as_matrix(weight: Tensor, dim: int) -> Tensor:
    """weight with dimension `dim` first and the others flattened: [size(dim), rest]."""
    if dim != 0:
        weight = weight.permute(dim, *(d for d in range(weight.ndim) if d != dim))
    return weight.reshape(weight.shape[0], -1)


class _SpectralNorm(Module):
    """The spectral-norm parametrization: weight / sigma, sigma the largest singular value of the
    weight as a matrix (dim first), estimated by power iteration on the buffers `_u` and `_v`."""

    def __init__(self, weight: Tensor, n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12) -> None:
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [-{ndim}, {ndim - 1}] but got {dim})")
        if n_power_iterations <= 0:
            raise ValueError(
                f"Expected n_power_iterations to be positive, but got n_power_iterations={n_power_iterations}"
            )
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            with no_grad():
                weight_mat = weight_as_matrix(weight.detach(), self.dim)
                h, w = weight_mat.shape
                self.register_buffer("_u", normalize(randn(h, dtype=weight.dtype), dim=0, eps=self.eps))
                self.register_buffer("_v", normalize(randn(w, dtype=weight.dtype), dim=0, eps=self.eps))
                self._power_method(weight_mat, 15)

    def _power_method(self, weight_mat: Tensor, n_power_iterations: int) -> None:
        """u <- normalize(W v), v <- normalize(W^T u), n times, in place and without gradient."""
        with no_grad():
            weight_mat = weight_mat.detach()
            for _ in range(n_power_iterations):
                self._u.copy_(normalize(weight_mat @ self._v, dim=0, eps=self.eps))
                self._v.copy_(normalize(weight_mat.t() @ self._u, dim=0, eps=self.eps))

    def forward(self, weight: Tensor) -> Tensor:
        if weight.ndim == 1:
            return normalize(weight, dim=0, eps=self.eps)
        weight_mat = weight_as_matrix(weight, self.dim)
        if self.training:
            self._power_method(weight_mat, self.n_power_iterations)
        u, v = self._u.clone(), self._v.clone()
        sigma = vdot(u, weight_mat @ v)
        return weight / sigma

    def right_inverse(self, value: Tensor) -> Tensor:
        """The original is the weight itself (sigma is recomputed at each read)."""
        return value


def _default_dim(module: Module, dim: int | None) -> int:
    if dim is not None:
        return dim
    return 1 if isinstance(module, (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d)) else 0


def spectral_norm(
    module: Module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12, dim: int | None = None
) -> Module:
    """Spectral normalisation (Miyato et al.) of `module.<name>` as a parametrization, as torch's: the
    weight divided by its largest singular value, estimated by `n_power_iterations` steps of power
    iteration per read in training mode (buffers `parametrizations.<name>.0._u` / `._v`; eval() reads
    use them as they are). dim defaults to 1 for ConvTranspose, else 0. Returns module."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    sn = _SpectralNorm(weight, n_power_iterations, _default_dim(module, dim), eps)
    parametrize.register_parametrization(module, name, sn)
    return module


class _Orthogonal(Module):
    """The orthogonal parametrization, as torch's: the original x [..., n, k] (tall; a wide one is
    transposed) maps to q with orthonormal columns through exp(a) or the Cayley map of the skew-symmetric
    a = L - L^T (L: x's lower triangle, padded to n x n), or through the product of the Householder
    reflections in x's strict lower triangle (signed by x's diagonal, truncated to an integer). With
    use_trivialization the result is base @ q, base an orthogonal n x n buffer that right_inverse sets."""

    def __init__(self, weight: Tensor, orthogonal_map: str, *, use_trivialization: bool = True) -> None:
        super().__init__()
        self.shape = tuple(weight.shape)
        self.orthogonal_map = orthogonal_map
        self.use_trivialization = use_trivialization
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, x: Tensor) -> Tensor:
        n, k = x.shape[-2:]
        transposed = n < k
        if transposed:
            x, n, k = x.mT, k, n
        if self.orthogonal_map == "householder":
            a = x.tril(-1)
            tau = 2.0 / (1.0 + (a * a).sum(-2))
            q = maps.householder_product(a, tau)
            q = q * x.diagonal(dim1=-2, dim2=-1).int().unsqueeze(-2)  # no gradient to the signs
        else:
            x = x.tril()
            if n != k:
                x = cat([x, zeros(n, n - k, dtype=x.dtype).expand(*x.shape[:-2], n, n - k)], -1)
            a = x - x.mT
            if self.orthogonal_map == "matrix_exp":
                q = maps.matrix_exp(a)
            else:  # the Cayley map (I - a/2)^-1 (I + a/2)
                ident = eye(n, dtype=a.dtype)
                q = maps.solve(ident - 0.5 * a, ident + 0.5 * a)
            if n != k:
                q = q[..., :k]
        if self.use_trivialization:
            q = self.base @ q
        return q.mT if transposed else q

    def right_inverse(self, value: Tensor) -> Tensor:
        """The original whose forward gives value (orthogonalised first where it is not), as torch's: with
        use_trivialization, base becomes value (completed to n x n with random columns when it is not
        square) and the original is -I; without it (householder only), the QR factorisation of value."""
        if tuple(value.shape) != self.shape:
            raise ValueError(f"Expected a matrix or batch of matrices of shape {list(self.shape)}. "
                             f"Got a tensor of shape {list(value.shape)}.")
        dt = value.dtype
        q = np.asarray(value.detach().numpy())
        n, k = q.shape[-2:]
        transpose = n < k
        if transpose:
            q, n, k = np.swapaxes(q, -1, -2), k, n
        if not self.use_trivialization:
            if self.orthogonal_map != "householder":
                raise NotImplementedError("It is not possible to assign to the matrix exponential or the Cayley "
                                          "parametrizations when use_trivialization=False.")
            a, tau = maps.geqrf(q)
            idx = np.arange(k)
            a[..., idx, idx] = np.sign(a[..., idx, idx]) * np.where(tau == 0.0, -1.0, 1.0)
            return Tensor(np.ascontiguousarray(np.swapaxes(a, -1, -2) if transpose else a).astype(q.dtype), dtype=dt)
        if n == k:
            base = q.copy() if maps.is_orthogonal(q) else maps.make_orthogonal(q)
        else:
            with no_grad():
                extra = np.asarray(randn(*q.shape[:-2], n, n - k, dtype=dt).numpy())
            base = maps.make_orthogonal(np.concatenate([q, extra], -1))
        self.register_buffer("base", Tensor(base.astype(q.dtype), dtype=dt))
        neg_id = np.zeros(value.shape, dtype=q.dtype)
        idx = np.arange(min(value.shape[-2:]))
        neg_id[..., idx, idx] = -1.0
        return Tensor(neg_id, dtype=dt)


def orthogonal(module: Module, name: str = "weight", orthogonal_map: str | None = None, *,
               use_trivialization: bool = True) -> Module:
    """An orthogonal parametrization of the matrix (or batch of matrices) `module.<name>`, as torch's:
    its columns (rows, for a wide matrix) stay orthonormal through training. orthogonal_map:
    "matrix_exp" (the default for square matrices), "cayley" or "householder" (the default otherwise).
    The weight's current value is kept (orthogonalised by QR first when it is not orthogonal). Returns
    module."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if weight.ndim < 2:
        raise ValueError(f"Expected a matrix or batch of matrices. Got a tensor of {weight.ndim} dimensions.")
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] else "householder"
    if orthogonal_map not in _ORTHOGONAL_MAPS:
        raise ValueError(f'orthogonal_map has to be one of "matrix_exp", "cayley", "householder". '
                         f"Got: {orthogonal_map}")
    orth = _Orthogonal(weight, orthogonal_map, use_trivialization=use_trivialization)
    parametrize.register_parametrization(module, name, orth, unsafe=True)
    return module
