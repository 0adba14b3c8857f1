"""The forward-pre-hook forms of weight and spectral normalisation, as torch.nn.utils.weight_norm /
remove_weight_norm (deprecated in torch and here, with a FutureWarning, in favour of
flame.nn.utils.parametrizations.weight_norm) and torch.nn.utils.spectral_norm / remove_spectral_norm.

weight_norm replaces the parameter `<name>` by `<name>_g` (magnitude) and `<name>_v` (direction);
spectral_norm by `<name>_orig` and the buffers `<name>_u`, `<name>_v` (state_dict keys as torch's). A
forward pre-hook sets the plain attribute `module.<name>` from them before each forward, as torch's;
inside @flame.compile that attribute holds the traced weight after the call (reading its values then
raises: call the module eagerly, or use flame.nn.utils.parametrizations, whose weight is computed at
each read)."""

from __future__ import annotations

import warnings

from flame.frontend.activations import normalize
from flame.frontend.context import no_grad
from flame.frontend.creation import randn
from flame.frontend.hooks import forget
from flame.frontend.more_math import vdot
from flame.frontend.tensor import Tensor
from flame.nn.module import Module
from flame.nn.parameter import Parameter
from flame.nn.utils.parametrizations import _default_dim, _weight_norm, norm_except_dim, weight_as_matrix

__all__ = ["SpectralNorm", "WeightNorm", "remove_spectral_norm", "remove_weight_norm", "spectral_norm", "weight_norm"]


def _pre_hooks(module: Module) -> dict:
    return module.__dict__.get("_forward_pre_hooks", {})


class WeightNorm:
    """The forward pre-hook of weight_norm: module.<name> = g * v / ||v|| before each forward."""

    def __init__(self, name: str, dim: int | None) -> None:
        self.name = name
        self.dim = -1 if dim is None else dim

    def compute_weight(self, module: Module) -> Tensor:
        """g * v / ||v||, the norm over every dimension but dim (the whole tensor for dim=-1)."""
        return _weight_norm(getattr(module, self.name + "_v"), getattr(module, self.name + "_g"), self.dim)

    @staticmethod
    def apply(module: Module, name: str, dim: int | None) -> WeightNorm:
        """Register the hook and the parameters <name>_g, <name>_v in place of <name>."""
        warnings.warn(
            "`flame.nn.utils.weight_norm` is deprecated in favor of `flame.nn.utils.parametrizations.weight_norm`.",
            FutureWarning,
            stacklevel=3,
        )
        for hook in _pre_hooks(module).values():
            if isinstance(hook, WeightNorm) and hook.name == name:
                raise RuntimeError(f"Cannot register two weight_norm hooks on the same parameter {name}")
        fn = WeightNorm(name, dim)
        weight = module._parameters.get(name)
        if weight is None:  # torch reads getattr(module, name)
            raise AttributeError(f"'{type(module).__name__}' object has no attribute '{name}'")
        del module._parameters[name]
        with no_grad():
            g = norm_except_dim(weight.detach(), 2, fn.dim)
        module.register_parameter(name + "_g", Parameter(g))
        module.register_parameter(name + "_v", Parameter(weight.detach()))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module: Module) -> None:
        """<name> becomes a parameter again, holding g * v / ||v||."""
        weight = self.compute_weight(module)
        module.__dict__.pop(self.name, None)
        del module._parameters[self.name + "_g"]
        del module._parameters[self.name + "_v"]
        setattr(module, self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Weight normalisation by a forward pre-hook, as torch's deprecated torch.nn.utils.weight_norm
    (a FutureWarning says so): parameters `<name>_g` (the norm of `<name>` over every dimension but
    dim; dim=None: the whole tensor) and `<name>_v`. Returns module."""
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module: Module, name: str = "weight") -> Module:
    """Undo weight_norm: `<name>` is a parameter again, with the normalised value. Returns module."""
    return _remove(module, WeightNorm, name, "weight_norm")


class SpectralNorm:
    """The forward pre-hook of spectral_norm: module.<name> = <name>_orig / sigma before each forward,
    sigma estimated by power iteration on the buffers <name>_u, <name>_v (moved in training mode)."""

    def __init__(self, name: str = "weight", n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12) -> None:
        if n_power_iterations <= 0:
            raise ValueError(
                f"Expected n_power_iterations to be positive, but got n_power_iterations={n_power_iterations}"
            )
        self.name, self.dim, self.n_power_iterations, self.eps = name, dim, n_power_iterations, eps

    def compute_weight(self, module: Module, do_power_iteration: bool) -> Tensor:
        """weight / sigma with sigma = u . (W v); with do_power_iteration, v <- normalize(W^T u) and
        u <- normalize(W v) first, n_power_iterations times, in place and without gradient."""
        weight = getattr(module, self.name + "_orig")
        u, v = getattr(module, self.name + "_u"), getattr(module, self.name + "_v")
        weight_mat = weight_as_matrix(weight, self.dim)
        if do_power_iteration:
            with no_grad():
                w = weight_mat.detach()
                for _ in range(self.n_power_iterations):
                    v.copy_(normalize(w.t() @ u, dim=0, eps=self.eps))
                    u.copy_(normalize(w @ v, dim=0, eps=self.eps))
                u, v = u.clone(), v.clone()
        sigma = vdot(u, weight_mat @ v)
        return weight / sigma

    @staticmethod
    def apply(module: Module, name: str, n_power_iterations: int, dim: int, eps: float) -> SpectralNorm:
        """Register the hook, the parameter <name>_orig and the buffers <name>_u, <name>_v."""
        for hook in _pre_hooks(module).values():
            if isinstance(hook, SpectralNorm) and hook.name == name:
                raise RuntimeError(f"Cannot register two spectral_norm hooks on the same parameter {name}")
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        if name not in module._parameters:  # torch reads module._parameters[name]
            raise KeyError(name)
        weight = module._parameters[name]
        if weight is None:
            raise ValueError(f"`SpectralNorm` cannot be applied as parameter `{name}` is None")
        with no_grad():
            h, w = weight_as_matrix(weight.detach(), dim).shape
            u = normalize(randn(h, dtype=weight.dtype), dim=0, eps=eps)
            v = normalize(randn(w, dtype=weight.dtype), dim=0, eps=eps)
        delattr(module, name)
        module.register_parameter(name + "_orig", weight)
        setattr(module, name, weight.detach())
        module.register_buffer(name + "_u", u)
        module.register_buffer(name + "_v", v)
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module: Module) -> None:
        """<name> becomes a parameter again, holding weight / sigma (no power iteration)."""
        with no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        module.__dict__.pop(self.name, None)
        for suffix in ("_u", "_v", "_orig"):
            delattr(module, self.name + suffix)
        module.register_parameter(self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module, do_power_iteration=module.training))


def spectral_norm(
    module: Module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12, dim: int | None = None
) -> Module:
    """Spectral normalisation by a forward pre-hook, as torch.nn.utils.spectral_norm: parameter
    `<name>_orig`, buffers `<name>_u`, `<name>_v`; dim defaults to 1 for ConvTranspose, else 0.
    Returns module."""
    SpectralNorm.apply(module, name, n_power_iterations, _default_dim(module, dim), eps)
    return module


def remove_spectral_norm(module: Module, name: str = "weight") -> Module:
    """Undo spectral_norm: `<name>` is a parameter again, holding weight / sigma. Returns module."""
    return _remove(module, SpectralNorm, name, "spectral_norm")


def _remove(module: Module, kind: type, name: str, what: str) -> Module:
    """Take module's pre-hook of class `kind` for parameter `name` off (its `remove` restores the
    parameter); ValueError as torch's when there is none."""
    hooks = _pre_hooks(module)
    for k, hook in hooks.items():
        if isinstance(hook, kind) and hook.name == name:
            hook.remove(module)
            del hooks[k]
            forget(k)  # compiled steps that ran the hook trace again
            return module
    raise ValueError(f"{what} of '{name}' not found in {module}")
