"""torch.func.vmap and stack_module_state.

flame's vmap runs the function once per batch element (on the slices of the batched arguments) and
stacks the results: correct for every op, flame's and the user's Python alike, but no batched kernel
(a loop of B calls, traced as B copies of the function's ops inside @flame.compile)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import contextmanager
from functools import wraps
from typing import Any
from weakref import WeakValueDictionary

from flame.frontend.context import current_trace, in_transform, like_hook, op_recorder, user_location, write_hook
from flame.frontend.creation import draw_hook
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import stack
from flame.frontend.views import bump, write
from flame.func._grad import _name, _refuse_draw
from flame.func._tree import broadcast_to_and_flatten, tree_flatten, tree_unflatten


class _Same:
    """randomness="same": every batch element draws the numbers the first drew (each generator's
    offset is put back, at its first draw in an element, to where it stood at the first element's)."""

    def __init__(self):
        self.starts: dict[int, Any] = {}
        self.seen: set[int] = set()

    def __call__(self, generator) -> None:
        key = id(generator)
        if key in self.seen:
            return
        self.seen.add(key)
        if key in self.starts:
            generator.offset_tensor.copy_(self.starts[key])
        else:
            self.starts[key] = generator.offset_tensor.clone()


class _Batched:
    """Which tensors the calls computed from the slices of the batched arguments: an op's result is when
    one of its inputs is (told of every op by dispatch.apply, after the recorder it replaces), and so is
    a tensor made like one (zeros_like, new_zeros ...). What torch's BatchedTensor marks, so an output
    whose out_dim is None, or an in-place write of batched values into an unbatched tensor, can be
    refused as torch's is."""

    def __init__(self, previous) -> None:
        self.previous = previous
        self.previous_like = like_hook.get()
        self.size = 0
        self.seen: WeakValueDictionary = WeakValueDictionary()  # id -> tensor (an id never outlives it)

    def add(self, t) -> None:
        if isinstance(t, Tensor):
            self.seen[id(t)] = t

    def holds(self, t) -> bool:
        return self.seen.get(id(t)) is t

    def like(self, source, out) -> None:
        """A tensor made with source's shape (zeros_like, new_zeros ...) is batched where source is."""
        previous = self.previous_like
        if previous is not None:
            previous(source, out)
        if self.holds(source):
            self.add(out)

    def __call__(self, name: str, inputs: tuple, attrs: dict, out) -> None:
        if self.previous is not None:
            self.previous(name, inputs, attrs, out)
        for x in inputs:
            if isinstance(x, Tensor) and self.seen.get(id(x)) is x:
                self.seen[id(out)] = out
                return


_INPLACE = ("vmap: inplace arithmetic(self, *extra_args) is not possible because there exists a Tensor `other` in "
            "extra_args that has more elements than `self`. This happened due to `other` being vmapped over but "
            "`self` not being vmapped over in a vmap. Please try to use out-of-place operators instead of inplace "
            "arithmetic. If said operator is being called inside the PyTorch framework, please file a bug report "
            "instead.")


class _Writes:
    """vmap's handling of every in-place write func makes. Batched values written into a tensor that is
    not batched is torch's RuntimeError. A write of unbatched values into an unbatched tensor runs once
    in torch's vmap, where flame's runs func once per batch element: eagerly, each tensor so written
    takes back, before each element after the first, its values and history from before the first
    element's write (reads see what torch's would, and the write is not compounded), and after the last
    element keeps what the last element that wrote it left (an element's own tensors: the first's).
    Inside @flame.compile such a write into a tensor the first element wrote too is refused."""

    def __init__(self, batched: _Batched, previous) -> None:
        self.batched = batched
        self.previous = previous  # an enclosing vmap's (told first)
        self.element = 0
        self.kept: dict[int, list] = {}  # id -> [tensor, its state before the first write, after the last]
        self.wrote: set[int] = set()  # the ids this element wrote

    def __call__(self, t, new, what: str) -> None:
        if self.previous is not None:
            self.previous(t, new, what)
        root = t if t._base is None else t._base
        if self.batched.holds(t) or self.batched.holds(root) or root._role == "state":
            return  # (a state tensor: a generator's offset, which draws advance and randomness="same" resets)
        if isinstance(new, Tensor) and self.batched.holds(new):
            raise RuntimeError(f"{_INPLACE}\n  at {user_location()}")
        if current_trace.get() is not None or root._value is not None:
            if self.element > 0 and id(root) in self.kept and self.kept[id(root)][0] is root:
                raise RuntimeError(
                    f"vmap: {what} writes in place into a tensor that is not vmapped over inside @flame.compile: "
                    f"torch's vmap runs the write once, flame's runs the function once per batch element and "
                    f"would run it {self.batched.size} times. Write out of place, or into a tensor made from the "
                    f"batched inputs\n  at {user_location()}")
            self.kept.setdefault(id(root), [root, None, None])
            return
        if id(root) not in self.kept:
            self.kept[id(root)] = [root, _state(root), None]
        self.wrote.add(id(root))

    def start(self, i: int) -> None:
        """Before element i: the unbatched tensors written so far take back their state from before."""
        self._note_after()
        self.element = i
        if i > 0:
            for t, before, _ in self.kept.values():
                if before is not None:
                    _restore(t, before)

    def finish(self) -> None:
        """After the last element: each unbatched tensor written keeps what its last writer left."""
        self._note_after()
        for t, before, after in self.kept.values():
            if before is not None and after is not None:
                _restore(t, after)

    def _note_after(self) -> None:
        for k in self.wrote:
            self.kept[k][2] = _state(self.kept[k][0])
        self.wrote = set()


def _state(t: Tensor) -> tuple:
    """t's values (a copy of its buffer) and gradient history now."""
    return Tensor._concrete(t._data.copy(), t.dtype), t._node, t.requires_grad


def _restore(t: Tensor, state: tuple) -> None:
    """t takes a state _state gave; what was recorded from t before reads it as it was (t._past)."""
    data, node, needs = state
    if t._node is not None:
        now = Tensor._concrete(t._data.copy(), t.dtype)
        now._node, now.requires_grad = t._node, t.requires_grad
        t._past = {**(t._past or {}), t._version: now}
    write(t, data)
    bump(t)
    t._node, t.requires_grad = node, needs


@contextmanager
def _tracking(batched: _Batched, writes: _Writes):
    tokens = op_recorder.set(batched), write_hook.set(writes), like_hook.set(batched.like)
    try:
        yield
    finally:
        like_hook.reset(tokens[2])
        write_hook.reset(tokens[1])
        op_recorder.reset(tokens[0])


@contextmanager
def _randomness(mode: str, hook):
    token = draw_hook.set(hook) if mode != "different" else None
    try:
        yield
    finally:
        if token is not None:
            draw_hook.reset(token)


def _check_in_dims(func, in_dims, args: tuple) -> tuple[list, Any, list]:
    """(the flat arguments, their structure, one in_dim per flat argument), checked as torch's."""
    name = _name(func)
    if not isinstance(in_dims, (int, tuple)):
        raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): expected `in_dims` to be int or a "
                         f"(potentially nested) tuple matching the structure of inputs, got: {type(in_dims)}.")
    if not args:
        raise ValueError(f"vmap({name})(<inputs>): got no inputs. Maybe you forgot to add inputs, or you are "
                         f"trying to vmap over a function with no inputs. The latter is unsupported.")
    flat_args, spec = tree_flatten(args)
    flat_dims = broadcast_to_and_flatten(in_dims, spec)
    if flat_dims is None:
        raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): in_dims is not compatible with the "
                         f"structure of `inputs`. in_dims has structure {tree_flatten(in_dims)[1]} but inputs has "
                         f"structure {spec}.")
    dims = []
    for arg, d in zip(flat_args, flat_dims):
        if d is not None and not isinstance(d, int):
            raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): Got in_dim={d} for an input but "
                             f"in_dim must be either an integer dimension or None.")
        if isinstance(d, int) and not isinstance(arg, Tensor):
            raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): Got in_dim={d} for an input but "
                             f"the input is of type {type(arg)}. We cannot vmap over non-Tensor arguments, please "
                             f"use None as the respective in_dim")
        if d is not None and not -arg.dim() <= d < arg.dim():
            raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): Got in_dim={d} for some input, but "
                             f"that input is a Tensor of dimensionality {arg.dim()} so expected in_dim to satisfy "
                             f"-{arg.dim()} <= in_dim < {arg.dim()}.")
        dims.append(None if d is None else d % arg.dim())
    return flat_args, spec, dims


def _batch_size(flat_args: list, dims: list) -> int:
    sizes = [arg.shape[d] for arg, d in zip(flat_args, dims) if d is not None]
    if not sizes:
        raise ValueError("vmap: Expected at least one Tensor to vmap over")
    if any(s != sizes[0] for s in sizes):
        raise ValueError(f"vmap: Expected all tensors to have the same size in the mapped dimension, got sizes "
                         f"{sizes} for the mapped dimension")
    return sizes[0]


def _check_out_dims(func, out_dims) -> None:
    leaves, _ = tree_flatten(out_dims)
    if not all(d is None or isinstance(d, int) for d in leaves):
        raise ValueError(f"vmap({_name(func)}, ..., out_dims={out_dims}): `out_dims` must be an int, None or a "
                         f"python collection of ints representing where in the outputs the vmapped dimension "
                         f"should appear.")


def _stack_outputs(func, outs: list, out_dims, batched: _Batched | None = None, empty: bool = False):
    """The outputs of the batch elements stacked at out_dims (empty: outs holds one stand-in element's,
    and each batched output keeps 0 of it)."""
    name = _name(func)
    flat0, spec = tree_flatten(outs[0])
    flat_dims = broadcast_to_and_flatten(out_dims, spec)
    if flat_dims is None:
        raise ValueError(f"vmap({name}, ..., out_dims={out_dims})(<inputs>): out_dims is not compatible with the "
                         f"structure of `outputs`. out_dims has structure {tree_flatten(out_dims)[1]} but outputs "
                         f"has structure {spec}.")
    flats = [flat0] + [tree_flatten(o)[0] for o in outs[1:]]
    result = []
    for k, d in enumerate(flat_dims):
        first = flat0[k]
        if d is None:
            if batched is not None and any(batched.holds(f[k]) for f in flats):
                raise ValueError(f"vmap({name}, ...): `{name}` can not return a BatchedTensor when out_dim is None")
            result.append(first)
            continue
        if not isinstance(first, Tensor):
            raise ValueError(f"vmap({name}, ...): `{name}` must only return Tensors, got type {type(first)}. "
                             f"Did you mean to set out_dims= to None for output?")
        stacked = stack([f[k] for f in flats], dim=d)
        result.append(stacked.narrow(d, 0, 0) if empty else stacked)
    return tree_unflatten(result, spec)


def vmap(func: Callable, in_dims: int | tuple = 0, out_dims: Any = 0, randomness: str = "error", *,
         chunk_size: int | None = None) -> Callable:
    """torch.func.vmap: func mapped over a batch dimension of its arguments. in_dims says, per argument
    (a nested tuple matching the arguments' pytrees, or one int for all), which dimension is the batch
    (None: the argument is passed whole to every element); out_dims where the batch dimension goes in
    each output (None: the output of the first element, for outputs that do not depend on the batch; an
    output computed from a batched argument raises ValueError there, as torch's: flame follows the ops
    dispatched through its op table). An in-place write of batched values into an unbatched tensor is
    torch's RuntimeError; one of unbatched values into a tensor func captured runs once, as torch's
    (_Writes; inside @flame.compile it is refused).
    Keyword arguments are not batched.

    flame runs func once per batch element, on slices of the batched arguments, and stacks the outputs:
    correct for every op (and composable with grad, jacrev and with vmap itself), but not a batched
    kernel: B batch elements cost B calls (inside @flame.compile, B copies of func's ops).
    randomness: "error" raises when func draws random numbers (torch's message); "different" gives
    each element its own numbers (the stream advances per element); "same" gives every element the
    numbers the first drew. chunk_size is accepted (torch's check) and changes nothing."""
    if randomness not in ("error", "different", "same"):
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or 'same'. Got {randomness}")
    if chunk_size is not None and not (isinstance(chunk_size, int) and chunk_size > 0):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got {chunk_size})")

    @wraps(func)
    def wrapped(*args, **kwargs):
        _check_out_dims(func, out_dims)
        flat_args, spec, dims = _check_in_dims(func, in_dims, args)
        n = _batch_size(flat_args, dims)
        same = _Same()
        outs = []
        batched = _Batched(op_recorder.get())
        batched.size = n
        writes = _Writes(batched, write_hook.get())
        with (_randomness(randomness, _refuse_draw if randomness == "error" else same), _tracking(batched, writes),
              in_transform("vmap")):
            for i in range(max(n, 1)):
                same.seen.clear()
                writes.start(i)
                sliced = [a if d is None else _element(a, d, i) for a, d in zip(flat_args, dims)]
                for a, d in zip(sliced, dims):
                    if d is not None:
                        batched.add(a)
                outs.append(func(*tree_unflatten(sliced, spec), **kwargs))
            writes.finish()
        return _stack_outputs(func, outs, out_dims, batched if None in tree_flatten(out_dims)[0] else None,
                              empty=n == 0)

    return wrapped


def _element(a: Tensor, d: int, i: int) -> Tensor:
    """Element i of `a` along its batch dim d; for an empty batch, zeros of an element's shape, on which
    func runs once so that the outputs have their shapes (a batch of 0), as torch's vmap gives."""
    if a.shape[d] == 0:
        return a.new_zeros(a.shape[:d] + a.shape[d + 1 :])
    return a.select(d, i)


def _stacked_leaf(tensors: tuple, name: str) -> Tensor:
    all_grad = all(t.requires_grad for t in tensors)
    if not all_grad and any(t.requires_grad for t in tensors):
        raise RuntimeError(f"Expected {name} from each model to have the same .requires_grad")
    result = stack(tensors)
    return result.detach().requires_grad_() if all_grad else result


def stack_module_state(models: Sequence) -> tuple[dict[str, Any], dict[str, Any]]:
    """torch.func.stack_module_state: (params, buffers), each model's parameters and buffers stacked
    along a new dimension 0 by name (parameters as new leaves that require grad), for
    vmap(functional_call) over an ensemble of same-class models."""
    if len(models) == 0:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if not (all(m.training for m in models) or all(not m.training for m in models)):
        raise RuntimeError("stack_module_state: Expected all models to have the same training/eval mode.")
    if not all(type(m) is type(models[0]) for m in models):
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")
    all_params = [dict(m.named_parameters()) for m in models]
    params = {k: _stacked_leaf(tuple(p[k] for p in all_params), k) for k in all_params[0]}
    all_buffers = [dict(m.named_buffers()) for m in models]
    buffers = {k: _stacked_leaf(tuple(b[k] for b in all_buffers), k) for k in all_buffers[0]}
    return params, buffers
