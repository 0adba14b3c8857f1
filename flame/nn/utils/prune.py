"""flame.nn.utils.prune: pruning by masks, as torch.nn.utils.prune.

    prune.l1_unstructured(linear, "weight", amount=0.3)   # the 30% smallest |w| masked out
    linear.weight_orig, linear.weight_mask               # a parameter and a buffer (state_dict keys as torch's)
    prune.remove(linear, "weight")                       # weight is a parameter again, holding orig * mask

Pruning replaces the parameter `<name>` by the parameter `<name>_orig` and the buffer `<name>_mask` (of
`<name>`'s dtype, 1 where kept), and registers the pruning method as a forward pre-hook that sets the
plain attribute `module.<name> = <name>_mask * <name>_orig` before each forward, so the gradient of
`<name>_orig` is the masked one, eagerly and inside @flame.compile (where the hook is traced and the
attribute holds the traced weight after the call, as with the hook form of weight_norm). Pruning a
tensor again combines the methods in a PruningContainer: the new method sees the entries (unstructured)
or the channels (structured) the mask still keeps.

Masks are computed eagerly on the host when a method is applied, which entries to prune chosen as
torch's: `amount` an int (that many) or a float in [0, 1] (round(amount * size)); L1Unstructured and
LnStructured rank by magnitude / norm as torch.topk does, and where scores tie flame takes the lowest
index first (torch's topk leaves the order of ties unspecified). The random methods draw from flame's
generator (flame.manual_seed), so their masks equal torch's in the count of pruned entries, not in which.
A method's `compute_mask(t, default_mask)` takes and returns flame tensors; a subclass may write it with
flame ops or NumPy."""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from collections.abc import Iterable

import numpy as np

from flame.frontend.context import no_grad
from flame.frontend.creation import rand, rand_like
from flame.frontend.creation import tensor as _tensor
from flame.frontend.hooks import forget
from flame.frontend.tensor import Tensor
from flame.nn.module import Module

__all__ = [
    "BasePruningMethod",
    "CustomFromMask",
    "Identity",
    "L1Unstructured",
    "LnStructured",
    "PruningContainer",
    "RandomStructured",
    "RandomUnstructured",
    "custom_from_mask",
    "global_unstructured",
    "identity",
    "is_pruned",
    "l1_unstructured",
    "ln_structured",
    "random_structured",
    "random_unstructured",
    "remove",
]


def _np(x) -> np.ndarray:
    """x's values as a NumPy array (a tensor detached first)."""
    return x.detach().numpy() if isinstance(x, Tensor) else np.asarray(x)


def _like(values: np.ndarray, like: Tensor) -> Tensor:
    """values as a concrete tensor of like's dtype and device (a mask)."""
    return _tensor(np.ascontiguousarray(values), like.dtype, device=like.device)


def _pre_hooks(module: Module) -> dict:
    return module.__dict__.get("_forward_pre_hooks", {})


def _current(module: Module, name: str, method: BasePruningMethod | None) -> Tensor:
    """module.<name> as torch reads it when pruning: the pruned tensor when pruned already (recomputed
    when the attribute holds a traced value from a compiled step)."""
    value = getattr(module, name)
    if method is not None and isinstance(value, Tensor) and value.is_traced:
        with no_grad():
            value = method.apply_mask(module)
    return value


class BasePruningMethod(ABC):
    """A pruning method: compute_mask(t, default_mask) says which entries of t to keep; as a forward
    pre-hook it sets module.<name> = <name>_mask * <name>_orig (torch.nn.utils.prune.BasePruningMethod)."""

    _tensor_name: str

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self._tensor_name, self.apply_mask(module))

    @abstractmethod
    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        """The new mask of t (1 kept, 0 pruned), default_mask's entries that are 0 staying 0."""

    def apply_mask(self, module: Module) -> Tensor:
        """<name>_mask * <name>_orig of module: the pruned tensor, its gradient reaching <name>_orig."""
        if self._tensor_name is None:
            raise AssertionError(f"Module {module} has to be pruned")
        mask = getattr(module, self._tensor_name + "_mask")
        orig = getattr(module, self._tensor_name + "_orig")
        return (mask if mask.dtype == orig.dtype else mask.to(dtype=orig.dtype)) * orig

    @classmethod
    def apply(cls, module: Module, name: str, *args, importance_scores=None, **kwargs) -> BasePruningMethod:
        """Prune module.<name> with cls(*args, **kwargs), combined with the pruning already there in a
        PruningContainer; importance_scores (default: the tensor itself) rank the entries."""
        method, old = _composite_method(cls, module, name, *args, **kwargs)
        orig = _current(module, name, old)
        if importance_scores is not None:
            if tuple(importance_scores.shape) != tuple(orig.shape):
                raise AssertionError(f"importance_scores should have the same shape as parameter {name} of "
                                     f"{module}, got {importance_scores.shape} vs {orig.shape}")
        else:
            importance_scores = orig
        fresh = not isinstance(method, PruningContainer)
        if fresh:
            module.register_parameter(name + "_orig", orig)
            del module._parameters[name]
            default_mask = _like(np.ones(orig.shape), orig)
        else:
            default_mask = _like(_np(getattr(module, name + "_mask")).copy(), orig)
        try:
            mask = method.compute_mask(importance_scores, default_mask=default_mask)
            module.register_buffer(name + "_mask", mask)
            setattr(module, name, method.apply_mask(module))
            module.register_forward_pre_hook(method)
        except Exception:
            if fresh:
                orig = getattr(module, name + "_orig")
                module.register_parameter(name, orig)
                del module._parameters[name + "_orig"]
            raise
        return method

    def prune(self, t: Tensor, default_mask: Tensor | None = None, importance_scores: Tensor | None = None) -> Tensor:
        """t * its mask (a pruned copy of t), importance_scores (default t) ranking the entries."""
        if importance_scores is not None:
            if tuple(importance_scores.shape) != tuple(t.shape):
                raise AssertionError(f"importance_scores should have the same shape as tensor t, got "
                                     f"{importance_scores.shape} vs {t.shape}")
        else:
            importance_scores = t
        default_mask = default_mask if default_mask is not None else _like(np.ones(t.shape), t)
        return t * self.compute_mask(importance_scores, default_mask=default_mask)

    def remove(self, module: Module) -> None:
        """Make the pruning permanent: <name> becomes the parameter <name>_orig (the same object, now
        holding orig * mask); <name>_orig and <name>_mask are gone."""
        if self._tensor_name is None:
            raise AssertionError(f"Module {module} has to be pruned before pruning can be removed")
        with no_grad():
            weight = self.apply_mask(module)
        module.__dict__.pop(self._tensor_name, None)
        orig = module._parameters[self._tensor_name + "_orig"]
        orig.data = weight.detach()
        del module._parameters[self._tensor_name + "_orig"]
        del module._buffers[self._tensor_name + "_mask"]
        setattr(module, self._tensor_name, orig)


def _composite_method(cls, module: Module, name: str, *args, **kwargs):
    """(the method to register, the one it replaces or None): cls(*args, **kwargs), put in a
    PruningContainer with the pruning of module.<name> already there (whose hook is taken off)."""
    hooks = _pre_hooks(module)
    found = [(k, h) for k, h in hooks.items() if isinstance(h, BasePruningMethod) and h._tensor_name == name]
    if len(found) > 1:
        raise AssertionError(f"Avoid adding multiple pruning hooks to the same tensor {name} of module {module}. "
                             f"Use a PruningContainer.")
    for k, _ in found:
        del hooks[k]
        forget(k)
    method = cls(*args, **kwargs)
    method._tensor_name = name
    old = found[0][1] if found else None
    if isinstance(old, PruningContainer):
        old.add_pruning_method(method)
        method = old
    elif old is not None:
        container = PruningContainer(old)
        container.add_pruning_method(method)
        method = container
    return method, old


class PruningContainer(BasePruningMethod):
    """The pruning methods applied to one tensor in turn; its mask is the last method's, computed on the
    entries (or channels) the masks before it keep."""

    def __init__(self, *args) -> None:
        self._pruning_methods: tuple[BasePruningMethod, ...] = ()
        if len(args) == 1:
            self._tensor_name = args[0]._tensor_name
            self.add_pruning_method(args[0])
        else:
            for method in args:
                self.add_pruning_method(method)

    def add_pruning_method(self, method: BasePruningMethod | None) -> None:
        """Append method (acting on the same tensor name)."""
        if not isinstance(method, BasePruningMethod) and method is not None:
            raise TypeError(f"{type(method)} is not a BasePruningMethod subclass")
        if method is not None and getattr(self, "_tensor_name", None) != method._tensor_name:
            raise ValueError(f"Can only add pruning methods acting on the parameter named "
                             f"'{getattr(self, '_tensor_name', None)}' to PruningContainer {self}. "
                             f"Found '{method._tensor_name}'")
        self._pruning_methods += (method,)

    def __len__(self) -> int:
        return len(self._pruning_methods)

    def __iter__(self):
        return iter(self._pruning_methods)

    def __getitem__(self, idx):
        return self._pruning_methods[idx]

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        """default_mask with the last method's mask written where it still keeps: over the kept entries
        (unstructured), the kept channels along the method's dim (structured), or everything (global)."""
        method = self._pruning_methods[-1]
        tv, mask = _np(t), _np(default_mask).astype(_np(t).dtype, copy=True)
        kind = method.PRUNING_TYPE
        if kind == "unstructured":
            slc = mask == 1
        elif kind == "structured":
            if not hasattr(method, "dim"):
                raise AttributeError('Pruning methods of PRUNING_TYPE "structured" need to have the attribute '
                                     '`dim` defined.')
            n_dims = tv.ndim
            dim = method.dim + n_dims if method.dim < 0 else method.dim
            if dim < 0:
                raise IndexError(f"Index is out of bounds for tensor with dimensions {n_dims}")
            keep_channel = mask.sum(axis=tuple(d for d in range(n_dims) if d != dim)) != 0
            slc = tuple(keep_channel if d == dim else slice(None) for d in range(n_dims))
        elif kind == "global":
            slc = tuple(slice(None) for _ in range(tv.ndim))
        else:
            raise ValueError(f"Unrecognized PRUNING_TYPE {kind}")
        partial = method.compute_mask(_like(tv[slc], t), default_mask=_like(mask[slc], t))
        mask[slc] = _np(partial)
        return _like(mask, default_mask)


class Identity(BasePruningMethod):
    """Prunes nothing: the mask is all ones."""

    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        return default_mask

    @classmethod
    def apply(cls, module: Module, name: str) -> Identity:
        return super().apply(module, name)


def _count(amount, size: int) -> int:
    """How many of `size` entries `amount` (an int or a fraction) prunes, checked as torch checks it."""
    k = _compute_nparams_toprune(amount, size)
    _validate_pruning_amount(k, size)
    return k


def _channels(amount, t: Tensor, dim: int) -> tuple[int, int]:
    """(the channels of t along dim, how many of them `amount` prunes), t and dim checked as torch's
    structured methods check them."""
    _validate_structured_pruning(t)
    _validate_pruning_dim(t, dim)
    return t.shape[dim], _count(amount, t.shape[dim])


class _Unstructured(BasePruningMethod):
    """Prunes the `amount` entries whose `_scores` (one per entry, flattened) are the largest, or with
    _largest False the smallest."""

    PRUNING_TYPE = "unstructured"
    _largest = True

    def __init__(self, amount) -> None:
        _validate_pruning_amount_init(amount)
        self.amount = amount

    def _scores(self, t: Tensor) -> np.ndarray:
        raise NotImplementedError

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        k = _count(self.amount, t.numel())
        mask = _np(default_mask).copy()
        if k != 0:
            mask.reshape(-1)[_top(self._scores(t), k, largest=self._largest)] = 0
        return _like(mask, default_mask)


class RandomUnstructured(_Unstructured):
    """Prunes `amount` entries chosen at random (flame's generator)."""

    def _scores(self, t: Tensor) -> np.ndarray:
        return _np(rand_like(t.detach())).reshape(-1)

    @classmethod
    def apply(cls, module: Module, name: str, amount) -> RandomUnstructured:
        return super().apply(module, name, amount=amount)


class L1Unstructured(_Unstructured):
    """Prunes the `amount` entries of smallest magnitude."""

    _largest = False

    def _scores(self, t: Tensor) -> np.ndarray:
        return np.abs(_np(t)).reshape(-1)

    @classmethod
    def apply(cls, module: Module, name: str, amount, importance_scores=None) -> L1Unstructured:
        return super().apply(module, name, amount=amount, importance_scores=importance_scores)


class RandomStructured(BasePruningMethod):
    """Prunes `amount` channels along dim chosen at random (flame's generator)."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount, dim: int = -1) -> None:
        _validate_pruning_amount_init(amount)
        self.amount, self.dim = amount, dim

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        channels, k = _channels(self.amount, t, self.dim)
        if k == 0:
            return default_mask
        prob = _np(rand(channels))
        keep = prob > np.sort(prob)[k - 1]  # above the k-th smallest draw, as torch's kthvalue
        return _like(_channel_mask(tuple(t.shape), self.dim, keep) * _np(default_mask), default_mask)

    @classmethod
    def apply(cls, module: Module, name: str, amount, dim: int = -1) -> RandomStructured:
        return super().apply(module, name, amount=amount, dim=dim)


class LnStructured(BasePruningMethod):
    """Prunes the `amount` channels along dim of smallest L`n` norm (n as torch.norm's p)."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount, n, dim: int = -1) -> None:
        _validate_pruning_amount_init(amount)
        self.amount, self.n, self.dim = amount, n, dim

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        channels, k = _channels(self.amount, t, self.dim)
        if k == 0:
            return default_mask
        keep = np.zeros(channels, bool)
        keep[_top(_compute_norm(_np(t), self.n, self.dim), channels - k, largest=True)] = True
        return _like(_channel_mask(tuple(t.shape), self.dim, keep) * _np(default_mask), default_mask)

    @classmethod
    def apply(cls, module: Module, name: str, amount, n, dim, importance_scores=None) -> LnStructured:
        return super().apply(module, name, amount=amount, n=n, dim=dim, importance_scores=importance_scores)


class CustomFromMask(BasePruningMethod):
    """Prunes where the given mask is 0."""

    PRUNING_TYPE = "global"

    def __init__(self, mask) -> None:
        self.mask = mask

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        mine = _np(self.mask)
        if tuple(default_mask.shape) != mine.shape:
            raise AssertionError(f"default_mask shape {default_mask.shape} must match self.mask shape "
                                 f"{self.mask.shape}")
        base = _np(default_mask)
        return _like(base * mine.astype(base.dtype), default_mask)

    @classmethod
    def apply(cls, module: Module, name: str, mask) -> CustomFromMask:
        return super().apply(module, name, mask=mask)


def identity(module: Module, name: str) -> Module:
    """Prune nothing, but set up module.<name> as pruned (<name>_orig, <name>_mask of ones). Returns module."""
    Identity.apply(module, name)
    return module


def random_unstructured(module: Module, name: str, amount) -> Module:
    """Prune `amount` (int: count, float: fraction) random entries of module.<name>. Returns module."""
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module: Module, name: str, amount, importance_scores=None) -> Module:
    """Prune the `amount` entries of module.<name> of smallest |importance_scores| (default: the tensor's
    own). Returns module."""
    L1Unstructured.apply(module, name, amount=amount, importance_scores=importance_scores)
    return module


def random_structured(module: Module, name: str, amount, dim) -> Module:
    """Prune `amount` random channels of module.<name> along dim. Returns module."""
    RandomStructured.apply(module, name, amount, dim)
    return module


def ln_structured(module: Module, name: str, amount, n, dim, importance_scores=None) -> Module:
    """Prune the `amount` channels of module.<name> along dim of smallest L`n` norm of importance_scores
    (default: the tensor's own). Returns module."""
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def global_unstructured(parameters, pruning_method, importance_scores=None, **kwargs) -> None:
    """Prune the (module, name) pairs of `parameters` together: pruning_method(**kwargs), an unstructured
    method, chooses among all their entries at once (importance_scores: {(module, name): scores})."""
    if not isinstance(parameters, Iterable):
        raise TypeError("global_unstructured(): parameters is not an Iterable")
    parameters = list(parameters)
    importance_scores = importance_scores if importance_scores is not None else {}
    if not isinstance(importance_scores, dict):
        raise TypeError("global_unstructured(): importance_scores must be of type dict")
    tensors = [_current(module, name, _method_of(module, name)) for module, name in parameters]
    scores = np.concatenate([_np(importance_scores.get((m, n), t)).reshape(-1)
                             for (m, n), t in zip(parameters, tensors)])
    default_mask = np.concatenate([_np(getattr(m, n + "_mask")).reshape(-1) if n + "_mask" in m._buffers
                                   else np.ones(t.numel()) for (m, n), t in zip(parameters, tensors)])
    container = PruningContainer()
    container._tensor_name = "temp"
    method = pruning_method(**kwargs)
    method._tensor_name = "temp"
    if method.PRUNING_TYPE != "unstructured":
        raise TypeError(f'Only "unstructured" PRUNING_TYPE supported for the `pruning_method`. Found method '
                        f"{pruning_method} of type {method.PRUNING_TYPE}")
    container.add_pruning_method(method)
    like = tensors[0]
    final = _np(container.compute_mask(_like(scores, like), _like(default_mask, like)))
    pointer = 0
    for (module, name), t in zip(parameters, tensors):
        part = final[pointer:pointer + t.numel()].reshape(tuple(t.shape))
        custom_from_mask(module, name, mask=_like(part, t))
        pointer += t.numel()


def custom_from_mask(module: Module, name: str, mask) -> Module:
    """Prune module.<name> where mask is 0. Returns module."""
    CustomFromMask.apply(module, name, mask)
    return module


def remove(module: Module, name: str) -> Module:
    """Make the pruning of module.<name> permanent: <name> is a parameter again, holding orig * mask, and
    the hook, <name>_orig and <name>_mask are gone. Returns module."""
    hooks = _pre_hooks(module)
    for k, hook in hooks.items():
        if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
            hook.remove(module)
            del hooks[k]
            forget(k)
            return module
    raise ValueError(f"Parameter '{name}' of module {module} has to be pruned before pruning can be removed")


def is_pruned(module: Module) -> bool:
    """Whether module or any module inside it has a pruning hook."""
    return any(isinstance(hook, BasePruningMethod)
               for _, sub in module.named_modules() for hook in _pre_hooks(sub).values())


def _method_of(module: Module, name: str) -> BasePruningMethod | None:
    return next((h for h in _pre_hooks(module).values()
                 if isinstance(h, BasePruningMethod) and h._tensor_name == name), None)


def _top(scores: np.ndarray, k: int, largest: bool) -> np.ndarray:
    """The indices of the k largest (or smallest) scores, as torch.topk's; ties: lowest index first."""
    order = np.argsort(-scores if largest else scores, kind="stable")
    return order[:k]


def _channel_mask(shape: tuple[int, ...], dim: int, keep: np.ndarray) -> np.ndarray:
    """Ones in the channels along dim where keep is True, zeros elsewhere."""
    mask = np.zeros(shape)
    slc = [slice(None)] * len(shape)
    slc[dim] = keep
    mask[tuple(slc)] = 1
    return mask


def _compute_norm(t: np.ndarray, n, dim: int) -> np.ndarray:
    """torch.norm(t, p=n, dim=every dim but dim): one norm per channel."""
    axes = tuple(d for d in range(t.ndim) if d != dim % t.ndim)
    a = np.abs(t.astype(np.float64))
    if n == "fro":  # torch.norm: the vector 2-norm over one dim, the matrix Frobenius norm over two, no more
        if len(axes) > 2:
            raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {' '.join(map(str, axes))}")
        n = 2
    if not isinstance(n, numbers.Real):
        raise ValueError(f"ln_structured: norm order n={n!r} is not supported; give a number, inf or 'fro'")
    if n == np.inf:
        return a.max(axis=axes)
    if n == -np.inf:
        return a.min(axis=axes)
    if n == 0:
        return (a != 0).sum(axis=axes).astype(np.float64)
    return (a ** n).sum(axis=axes) ** (1.0 / n)


def _validate_pruning_amount_init(amount) -> None:
    if not isinstance(amount, numbers.Real):
        raise TypeError(f"Invalid type for amount: {amount}. Must be int or float.")
    if (isinstance(amount, numbers.Integral) and amount < 0) or (
            not isinstance(amount, numbers.Integral) and (float(amount) > 1.0 or float(amount) < 0.0)):
        raise ValueError(f"amount={amount} should either be a float in the range [0, 1] or a non-negative integer")


def _validate_pruning_amount(amount, tensor_size: int) -> None:
    if isinstance(amount, numbers.Integral) and amount > tensor_size:
        raise ValueError(f"amount={amount} should be smaller than the number of parameters to prune={tensor_size}")


def _validate_structured_pruning(t: Tensor) -> None:
    shape = tuple(t.shape)
    if len(shape) <= 1:
        raise ValueError(f"Structured pruning can only be applied to multidimensional tensors. Found tensor of "
                         f"shape {list(shape)} with {len(shape)} dims")


def _compute_nparams_toprune(amount, tensor_size: int) -> int:
    return amount if isinstance(amount, numbers.Integral) else round(amount * tensor_size)


def _validate_pruning_dim(t: Tensor, dim: int) -> None:
    if dim >= t.ndim:
        raise IndexError(f"Invalid index {dim} for tensor of size {list(t.shape)}")
