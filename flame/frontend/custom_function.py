"""User-defined gradients, the one mechanism behind flame.autograd.Function (torch's static forward(ctx, ...)
/ backward(ctx, ...)) and flame.custom_vjp (JAX's f.defvjp(fwd, bwd)).

A call runs the user's forward with flame ops, as PyTorch does with gradients off: inside @flame.compile
its ops are the trace's own, so the fusion pass fuses them with their neighbours. Each differentiable
result is handed back through the definition's op (ir/ops/user.py define_function, trait `call_result`):
the identity of the result, whose inputs are also the call's tensor arguments and the tensors its backward
reads, and whose VJP runs the user's backward with flame ops into the graph being differentiated (eager
backward()'s rebuilt graph, or the compiled step's), once per call with every result's cotangent.
Simplification removes the op once autodiff is done, so the forward's ops are all that is left of it.

The op's `call` attribute finds the call's record (`Call`: what the backward needs besides Values) while
something that can still be differentiated holds it: the result's Node when eager, the trace's graph
inside @flame.compile. Live calls have distinct numbers, the smallest free, so an eager training loop's
backward graphs print alike from one step to the next and share their compiled plan."""

from __future__ import annotations

import functools
import inspect
import os
import weakref
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flame.errors import AutogradError
from flame.frontend.context import (
    current_trace,
    func_transforms,
    function_jvp,
    grad_enabled,
    no_grad,
    user_location,
)
from flame.frontend.creation import zeros
from flame.frontend.dispatch import Node, apply, record_versions
from flame.frontend.guards import read_users_function
from flame.frontend.saved import hooks_installed, pack_tensors, packs, refuse_in_trace
from flame.frontend.tensor import Tensor
from flame.frontend.user_ops import run_backward
from flame.ir.ops.user import define_function
from flame.ir.registry import OpDef
from flame.ir.types import TensorType


@dataclass(eq=False)
class Forward:
    """What a front end's forward gave: `outputs`, the result's leaves (tensors and Python values) and
    `rebuild(leaves)` its structure; `saved`, the tensors (or None) the backward reads; `backward(saved,
    cotangents)` -> one gradient per argument (saved and cotangents as traced tensors, None kept);
    `non_differentiable`, ids of output tensors that get no gradient; `materialize`: a result without a
    cotangent is given zeros (PyTorch's set_materialize_grads, JAX's instantiated zeros); `hooked`: how
    many entries of `saved` saved-tensor hooks pack (torch's save_for_backward ones; None: all)."""

    outputs: list
    rebuild: Callable[[list], Any]
    saved: list
    backward: Callable[[list, list], list]
    non_differentiable: set = field(default_factory=set)
    materialize: bool = True
    hooked: int | None = None


@dataclass(eq=False)
class Call:
    """One call's record for its VJP: `what`/`where` name the user's backward in errors; the types of its
    tensor arguments (`inputs`, at `positions` among `n_args` arguments) and of its output leaves
    (`outputs`, None for a Python value); `slots`: which saved entries are tensors (the rest None);
    `saved_results`: saved tensor (its position among the saved tensors) -> the index of the result it
    is, for a backward that reads the Function's own result (`op`, the definition's op, finds it);
    `needs`: which tensor arguments required grad (a gradient for one that did not is dropped unchecked,
    as torch's engine has no edge to check it against)."""

    what: str
    where: str
    forward: Forward
    n_args: int
    positions: list[int]
    inputs: list[TensorType]
    outputs: list[TensorType | None]
    slots: list[bool]
    op: str = ""
    saved_results: dict[int, int] = field(default_factory=dict)
    key: int = -1
    results: list = field(default_factory=list)  # weak references to its eager differentiable results
    needs: list[bool] = field(default_factory=list)
    __weakref__: Any = field(default=None, init=False, repr=False, compare=False)


@dataclass(eq=False)
class FunctionNode(Node):
    """The Node of an eager result of a user's Function: it keeps the call's record alive for backward().
    The call's results share one grad_fn, named as torch's (`FBackward` for a Function class F)."""

    call: Call | None = None

    def grad_fn_parts(self) -> tuple[str | None, tuple, Any, list | None]:
        c = self.call
        name = c.what.removeprefix("function ") if c.what.startswith("function ") else None
        results = [t for t in (r() for r in c.results) if t is not None]
        return name, self.inputs[: len(c.positions)], c, results


_IN_FORWARD: ContextVar[bool] = ContextVar("flame_in_custom_forward", default=False)
_CALLS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # call number -> Call
_HELD: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # trace Graph -> its calls' records


def claim(calls: weakref.WeakValueDictionary, call) -> int:
    """The smallest number no live call of `calls` holds, now `call`'s (its `key`): numbers are reused
    once their calls are gone, so a training loop's backward graphs print alike from one step to the
    next and share their compiled plan."""
    k = 0
    while k in calls:
        k += 1
    call.key = k
    calls[k] = call
    return k


def define(name: str, where: str | None) -> OpDef:
    """The op of a user definition (an autograd Function class, a custom_vjp function)."""
    ident = "".join(c if c.isalnum() or c == "_" else "_" for c in name).strip("_") or "function"
    return define_function(ident if not ident[0].isdigit() else f"f{ident}", _vjp, where)


def invoke(op: OpDef, what: str, where: str, args: Sequence, forward: Callable[[tuple, bool], Forward]) -> Any:
    """Run a user definition on `args` (tensors and Python values): forward(needs_input_grad, recording)
    with gradients off, then each differentiable result through `op`, eager or traced. needs_input_grad
    is torch's: which arguments require grad (known while tracing too), whether or not gradients are on;
    recording: whether the call records a gradient (gradients on and some argument requires grad)."""
    trace = current_trace.get()
    on = grad_enabled.get() and not _IN_FORWARD.get()  # inside a forward, as with gradients off: none
    wants = (lambda a: a.requires_grad) if trace is None else trace.requires_grad
    needs = tuple(isinstance(a, Tensor) and a.dtype.is_float and wants(a) for a in args)
    recording = on and any(needs)
    token = _IN_FORWARD.set(True)
    try:
        with no_grad():
            fw = forward(needs, recording)
    finally:
        _IN_FORWARD.reset(token)
    diff = [
        recording and isinstance(t, Tensor) and t.dtype.is_float and id(t) not in fw.non_differentiable
        for t in fw.outputs
    ]
    if not any(diff):
        return fw.rebuild([_plain(t, trace) for t in fw.outputs])
    positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    saved = [t for t in fw.saved if t is not None]
    call = Call(
        what,
        where,
        fw,
        len(args),
        positions,
        [args[i]._type() for i in positions],
        [t._type() if isinstance(t, Tensor) else None for t in fw.outputs],
        [t is not None for t in fw.saved],
        op.name,
        {i: k for i, s in enumerate(saved) for k, (t, d) in enumerate(zip(fw.outputs, diff)) if d and s is t},
    )
    call.needs = [needs[i] for i in positions]
    claim(_CALLS, call)
    if trace is not None:
        _HELD.setdefault(trace.graph, []).append(call)
    ins = (*(args[i] for i in positions), *saved)
    # a tensor returned at several positions is one result, the last position's, as torch's (the
    # earlier positions get no cotangent of their own)
    last = {id(t): k for k, (t, d) in enumerate(zip(fw.outputs, diff)) if d}
    made = {k: _result(op, call, k, ins, t, trace) for k, t in enumerate(fw.outputs) if diff[k] and last[id(t)] == k}
    outs = [made[last[id(t)]] if d else _plain(t, trace) for t, d in zip(fw.outputs, diff)]
    if trace is None:
        call.results = [weakref.ref(o) for o in made.values()]
    if hooks_installed():
        _pack(fw, ins, len(positions), list(made.values()), trace)
    return fw.rebuild(outs)


def _pack(fw: Forward, ins: tuple, n: int, outs: list, trace) -> None:
    """Saved-tensor hooks (frontend/saved.py) on what the call saved for its backward (the first
    `fw.hooked` entries of fw.saved), packed once for the call: its results' nodes share them."""
    hooked = fw.saved if fw.hooked is None else fw.saved[: fw.hooked]
    count = sum(t is not None for t in hooked)
    if not count:
        return
    if trace is not None:
        raise refuse_in_trace(f"a custom Function's {outs[0]._value.producer.name}", user_location())
    if not packs(ins[:n]):
        return
    packed = pack_tensors({i: ins[i] for i in range(n, n + count)})
    for o in outs:
        o._node.packed = packed


def _plain(t: Any, trace) -> Any:
    """A result that gets no gradient: a float tensor detached, so no gradient flows through the
    forward's ops (which, traced, are ordinary ops of the trace)."""
    if isinstance(t, Tensor) and t.dtype.is_float and (trace is not None or t.requires_grad):
        return t.detach()
    return t


def _result(op: OpDef, call: Call, k: int, ins: tuple, t: Tensor, trace) -> Tensor:
    if trace is not None:
        return apply(op.name, *ins, t, call=call.key, index=k)
    inputs = (*ins, t)
    out = Tensor._concrete(t._data, t.dtype)
    out.requires_grad = True
    out._node = FunctionNode(
        op.name, {"call": call.key, "index": k}, inputs, record_versions(inputs), user_location(), call=call
    )
    return out


def _vjp(b, gouts: dict, *inputs, call: int, index: int):
    """The VJP of every definition's op: the user's backward, run once per call (autodiff hands the
    call's first op the cotangents of all its results)."""
    c = _CALLS.get(call)
    if c is None:
        raise AutogradError(
            f"a user autograd Function's call {call} has no record left (the tensors it made "
            f"were freed)\n  at {user_location()}"
        )
    n, m = len(c.positions), sum(c.slots)
    values = [*inputs[: n + m], *(gouts.get(k) for k in range(len(c.outputs)))]
    if c.saved_results:
        # a saved result is read as the Function's result (torch's saved output), not as the forward's
        # tensor before it: a gradient of the backward (create_graph) flows through the Function again
        results = {op.attrs["index"]: op.out for op in b.graph.ops if op.name == c.op and op.attrs["call"] == call}
        for i, k in c.saved_results.items():
            values[n + i] = results.get(k, values[n + i])
    try:
        got, trace = run_backward(b, c.what, lambda *ts: _run(c, ts[n : n + m], ts[n + m :]), values)
    except AutogradError as e:  # the front end's count check: say where the call was made too
        raise AutogradError(f"{e}\n  applied at {b.loc}" if b.loc and "applied at" not in str(e) else str(e)) from None
    return (*_checked(c, got, trace, b.loc), *([None] * (len(inputs) - n)))


def _run(c: Call, saved: Sequence, cotangents: Sequence) -> list:
    """The user's backward on traced saved tensors and cotangents (zeros where a result has none)."""
    it = iter(saved)
    view = [next(it) if s else None for s in c.slots]
    cts = []
    for g, t in zip(cotangents, c.outputs):
        if g is None and t is not None and c.forward.materialize:
            g = zeros(t.shape, dtype=t.dtype)
        cts.append(g)
    return c.forward.backward(view, cts)


def _checked(c: Call, got: list, trace, loc) -> list:
    """The user's gradients (one per argument) as Values of the tensor arguments, checked as PyTorch does."""
    at = c.where + (f"\n  applied at {loc}" if loc else "")
    out = []
    for pos, g in enumerate(got):
        if pos not in c.positions:
            if g is not None:
                raise AutogradError(
                    f"{c.what} returned a gradient different than None at position {pos + 1}, "
                    f"but the corresponding forward input was not a Variable{at}"
                )
            continue
        x = c.inputs[c.positions.index(pos)]
        if g is None:
            out.append(None)
            continue
        if not c.needs[c.positions.index(pos)] and isinstance(g, Tensor):
            out.append(None)
            continue
        if not isinstance(g, Tensor) or g._trace is not trace:
            kind = type(g).__name__ if not isinstance(g, Tensor) else "a Tensor computed outside backward"
            raise AutogradError(
                f"{c.what}: expected Variable or None (got {kind}) at position {pos + 1}: a "
                f"gradient is a flame Tensor computed from the saved tensors and the "
                f"gradients it was given{at}"
            )
        try:
            fits = np.broadcast_shapes(x.shape, g.shape) == tuple(g.shape)
        except ValueError:
            fits = False
        if not fits:
            raise AutogradError(
                f"{c.what} returned an invalid gradient at index {pos} - got {list(g.shape)} "
                f"but expected shape compatible with {list(x.shape)}{at}"
            )
        out.append(g._value)
    return out


# ---- PyTorch's convention: class F(Function) with static forward(ctx, ...) and backward(ctx, ...) ------


class FunctionCtx:
    """The `ctx` a Function's forward and backward share (torch.autograd.function.FunctionCtx): tensors
    saved with save_for_backward (read back as ctx.saved_tensors), needs_input_grad (one bool per
    argument: True for a floating-point tensor that requires grad, eagerly and inside @flame.compile,
    as torch's), and any Python value set as an attribute. A tensor set as an
    attribute (ctx.mask = m) is saved as if given to save_for_backward."""

    def __init__(self, needs_input_grad: tuple[bool, ...] = ()):
        self.needs_input_grad = needs_input_grad
        self.materialize_grads = True
        self._flame_saved: tuple = ()
        self._flame_saved_forward: tuple = ()
        self._flame_view: tuple | None = None
        self._flame_non_diff: set[int] = set()

    def save_for_backward(self, *tensors) -> None:
        """Keep tensors (or None) for backward, where ctx.saved_tensors gives them back."""
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(
                    f"save_for_backward can only save variables, but argument {i} is of type "
                    f"{type(t).__name__}\n  at {user_location()}"
                )
        self._flame_saved = tuple(tensors)

    def save_for_forward(self, *tensors) -> None:
        """Keep tensors (or None) for jvp, where ctx.saved_tensors gives them back (torch's)."""
        self._flame_saved_forward = tuple(tensors)

    @property
    def saved_tensors(self) -> tuple:
        """The tensors save_for_backward kept (in backward: as the backward's own traced tensors; in jvp:
        those save_for_forward kept)."""
        return self._flame_view if self._flame_view is not None else self._flame_saved

    def mark_non_differentiable(self, *tensors) -> None:
        """These outputs get no gradient: they do not require grad, and backward is given zeros for them."""
        self._flame_non_diff.update(id(t) for t in tensors)

    def set_materialize_grads(self, value: bool) -> None:
        """False: backward is given None (not zeros) for an output without a gradient."""
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors) -> None:
        """Not supported: a Function cannot update its inputs in place (flame's IR is pure)."""
        raise AutogradError(
            f"ctx.mark_dirty: a flame autograd Function cannot update its inputs in place; "
            f"return a new tensor instead (x.add_(1) -> x + 1)\n  at {user_location()}"
        )

    def _tensor_attrs(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_flame_") and isinstance(v, Tensor)}


def once_differentiable(fn: Callable) -> Callable:
    """torch.autograd.function.once_differentiable, accepted: flame traces a backward with flame ops, so it
    can be differentiated again inside @flame.compile, and the decorator changes nothing."""
    return fn


class Function:
    """torch.autograd.Function: subclass it with static `forward(ctx, *args)` (flame ops; it runs with
    gradients off) and `backward(ctx, *grads)` (one gradient or None per forward argument, computed with
    flame ops from ctx.saved_tensors and the grads), or with `forward(*args)` and
    `setup_context(ctx, inputs, output)`; call it as `F.apply(*args)`. Eagerly and inside @flame.compile
    the call is one op of the IR whose gradient is your backward; compiled, the forward's ops fuse with
    their neighbours. The backward is traced (as a compiled function is): it cannot read tensor values."""

    generate_vmap_rule = False  # torch.func.vmap may run the Function per batch element (torch's flag)

    @staticmethod
    def forward(ctx, *args, **kwargs):
        """The result, from flame ops on the arguments."""
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        """Fill ctx from the inputs and the output (when forward takes no ctx)."""
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        """One gradient (a Tensor, or None) per forward argument, given one per output."""
        raise NotImplementedError(
            "You must implement either the backward or vjp method for your custom "
            "autograd.Function to use it with backward mode AD."
        )

    @staticmethod
    def jvp(ctx, *grad_inputs):
        """Forward-mode AD (flame.autograd.forward_ad): one tangent per output, given one per forward
        argument (zeros for a tensor without one, None for a Python value), from ctx.saved_tensors (what
        save_for_forward kept) and attributes set in forward."""
        raise NotImplementedError(
            "You must implement the jvp function for custom autograd.Function to use it with forward mode AD."
        )

    @staticmethod
    def vmap(info, in_dims, *args):
        """torch's vmap rule (outputs and their batch dims for batched args). flame's vmap runs the
        Function once per batch element, so a Function that defines one (or sets generate_vmap_rule)
        gives the values the per-element calls give."""
        raise NotImplementedError("To use autograd.Function with vmap, you must either override the vmap "
                                  "staticmethod or set generate_vmap_rule=True.")

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run the Function on args: its outputs require grad when an input does."""
        split = cls.setup_context is not Function.setup_context
        transforms = func_transforms.get()
        if transforms and cls.__module__.split(".")[0] != "flame":
            _check_transformable(cls, split, "vmap" in transforms)
        for f in (cls.forward, cls.backward, cls.setup_context):  # while traced, their Python values are guards
            read_users_function(f)
        if kwargs:
            args = _bind(cls.forward, args, kwargs, with_ctx=not split)
        what = f"function {cls.__name__}Backward"
        where = _where(cls.backward, f"{cls.__qualname__}.backward")
        n_args = len(args)
        made: list[FunctionCtx] = []

        def forward(needs, recording):
            ctx = FunctionCtx(needs)
            made.append(ctx)
            if split:
                out = cls.forward(*args)
                cls.setup_context(ctx, tuple(args), out)
            else:
                out = cls.forward(ctx, *args)
            many = isinstance(out, tuple)
            attrs = ctx._tensor_attrs()
            n_saved = len(ctx._flame_saved)

            def backward(view, cts):
                ctx._flame_view = tuple(view[:n_saved])
                for k, v in zip(attrs, view[n_saved:]):
                    setattr(ctx, k, v)
                try:
                    got = cls.backward(ctx, *cts)
                finally:
                    ctx._flame_view = None
                    for k, v in attrs.items():
                        setattr(ctx, k, v)
                return _torch_count(what, where, got, n_args)

            return Forward(
                list(out) if many else [out],
                tuple if many else (lambda leaves: leaves[0]),
                [*ctx._flame_saved, *attrs.values()],
                backward,
                ctx._flame_non_diff,
                ctx.materialize_grads,
                n_saved,
            )

        result = invoke(_op_of(cls, cls.__name__, cls.backward), what, where, args, forward)
        tangents = function_jvp.get()
        if tangents is None:
            return result
        return tangents(cls, args, result, None if cls.jvp is Function.jvp else functools.partial(_jvp, cls, made[0]))


def _check_transformable(cls: type, split: bool, vmapped: bool) -> None:
    """A user Function called inside a torch.func transform: torch's RuntimeError without setup_context,
    and inside vmap (jacfwd and hessian run one) without a vmap rule or with two."""
    if not split:
        raise RuntimeError("In order to use an autograd.Function with functorch transforms (vmap, grad, jvp, "
                           "jacrev, ...), it must override the setup_context staticmethod. For more details, "
                           "please see https://pytorch.org/docs/main/notes/extending.func.html")
    if not vmapped:
        return
    own = cls.vmap is not Function.vmap
    if cls.generate_vmap_rule and own:
        raise RuntimeError(f"You tried to vmap over {cls.__name__}, but it has both generate_vmap_rule=True and an "
                           f"overridden vmap staticmethod. Please set generate_vmap_rule=False or delete the "
                           f"overridden vmap staticmethod to avoid ambiguity. For more details, please see "
                           f"https://pytorch.org/docs/main/notes/extending.func.html")
    if not cls.generate_vmap_rule and not own:
        raise RuntimeError(f"You tried to vmap over {cls.__name__}, but it does not have vmap support. Please "
                           f"override and implement the vmap staticmethod or set generate_vmap_rule=True. For "
                           f"more details, please see https://pytorch.org/docs/main/notes/extending.func.html")


def _jvp(cls: type, ctx: FunctionCtx, tangents: list):
    """cls.jvp(ctx, *tangents), ctx.saved_tensors giving what save_for_forward kept."""
    read_users_function(cls.jvp)
    ctx._flame_view = ctx._flame_saved_forward
    try:
        return cls.jvp(ctx, *tangents)
    finally:
        ctx._flame_view = None


_OPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Function class / custom_vjp -> its op


def _op_of(owner, name: str, backward: Callable) -> OpDef:
    op = _OPS.get(owner)
    if op is None:
        op = _OPS[owner] = define(name, _site(backward))
    return op


def _site(fn) -> str | None:
    """`file.py:12`, where fn is defined."""
    code = getattr(fn, "__code__", None)
    return None if code is None else f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"


def _where(fn, name: str) -> str:
    """`\n  in F.backward, defined at file.py:12`: where errors point the user."""
    site = _site(fn)
    return f"\n  in {name}" + (f", defined at {site}" if site else "")


def _bind(fn: Callable, args: tuple, kwargs: dict, with_ctx: bool) -> tuple:
    """args and kwargs of a call as positional arguments of fn (torch's apply binds them so)."""
    sig = inspect.signature(fn)
    bound = sig.bind(None, *args, **kwargs) if with_ctx else sig.bind(*args, **kwargs)
    bound.apply_defaults()
    return tuple(bound.args[1:] if with_ctx else bound.args)


def _torch_count(what: str, where: str, got: Any, n: int) -> list:
    """PyTorch's rule for a backward's result: one gradient per argument; extra trailing Nones allowed."""
    items = list(got) if isinstance(got, tuple) else [got]
    if len(items) > n and all(x is None for x in items[n:]):
        items = items[:n]
    if len(items) != n:
        raise AutogradError(f"{what} returned an incorrect number of gradients (expected {n}, got {len(items)}){where}")
    return items


# ---- JAX's convention: @custom_vjp with f.defvjp(fwd, bwd) --------------------------------------------


def _flatten(x: Any) -> tuple[list, Callable[[list], Any]]:
    """The leaves of a pytree of tuples, lists and dicts (anything else is a leaf), and how to rebuild it."""
    if isinstance(x, dict):
        keys = list(x)
        leaves, rebuild = _flatten([x[k] for k in keys])
        return leaves, lambda ls: type(x)(zip(keys, rebuild(ls)))
    if not isinstance(x, (tuple, list)):
        return [x], lambda ls: ls[0]
    parts = [_flatten(v) for v in x]

    def rebuild(ls):
        items, at = [], 0
        for leaves, back in parts:
            items.append(back(ls[at : at + len(leaves)]))
            at += len(leaves)
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)

    return [leaf for leaves, _ in parts for leaf in leaves], rebuild


class custom_vjp:  # noqa: N801  (jax.custom_vjp's name)
    """jax.custom_vjp: `f = flame.custom_vjp(fun)` then `f.defvjp(fwd, bwd)`. fwd(*args) -> (output,
    residuals); bwd(residuals, g) -> a tuple with one cotangent per argument of fun (None: zero), g shaped
    like the output. Arguments and outputs may be tuples, lists and dicts of tensors; the arguments at
    nondiff_argnums get no cotangent and are passed to bwd first: bwd(*nondiff_args, residuals, g). Without
    a gradient to take (no input requires grad, eagerly) fun runs; else fwd, and the call is one op of the
    IR whose gradient is bwd (flame.grad, backward(), inside @flame.compile alike)."""

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun, self.nondiff_argnums = fun, tuple(nondiff_argnums)
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None

    def defvjp(self, fwd: Callable, bwd: Callable, optimize_remat: bool = False) -> None:
        """Define the gradient: fwd(*args) -> (output, residuals), bwd(residuals, g) -> cotangents."""
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args, **kwargs):
        name = getattr(self.fun, "__name__", "f")
        if self.fwd is None:
            raise AutogradError(f"No VJP defined for custom_vjp function {name} using defvjp.\n  at {user_location()}")
        if kwargs:
            args = tuple(inspect.signature(self.fun).bind(*args, **kwargs).args)
        nd = sorted(i % len(args) for i in self.nondiff_argnums)
        diff = [a for i, a in enumerate(args) if i not in nd]
        leaves, _ = _flatten(diff)
        counts = [len(_flatten(a)[0]) for a in diff]
        what, where = f"custom_vjp {name!r}", _where(self.bwd, f"the bwd of {name}")

        def forward(needs, recording):
            if not recording:
                out, res = self.fun(*args), None
            else:
                pair = self.fwd(*args)
                if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                    raise AutogradError(
                        f"Custom VJP fwd rule {getattr(self.fwd, '__name__', 'fwd')} must produce a "
                        f"pair (list or tuple of length two) representing primal outputs and "
                        f"residuals{_where(self.fwd, 'fwd')}"
                    )
                out, res = pair
            outs, rebuild_out = _flatten(out)
            res_leaves, rebuild_res = _flatten(res)

            def backward(view, cts):
                r = rebuild_res([v if isinstance(x, Tensor) else x for v, x in zip(view, res_leaves)])
                got = self.bwd(*(args[i] for i in nd), r, rebuild_out(cts))
                return _jax_cotangents(what, where, got, counts)

            saved = [x if isinstance(x, Tensor) else None for x in res_leaves]
            return Forward(outs, rebuild_out, saved, backward)

        return invoke(_op_of(self, name, self.bwd), what, where, leaves, forward)


def _jax_cotangents(what: str, where: str, got: Any, counts: list[int]) -> list:
    """JAX's rule for bwd's result: a tuple with one cotangent (a pytree like its argument, or None) per
    argument; as one list of cotangents per argument leaf."""
    if not isinstance(got, (tuple, list)) or len(got) != len(counts):
        n = len(got) if isinstance(got, (tuple, list)) else type(got).__name__
        raise AutogradError(
            f"{what}: Custom VJP bwd rule must produce a tuple of length equal to the number of "
            f"arguments to the primal function ({len(counts)}), but got {n}{where}"
        )
    flat = []
    for k, (n, g) in enumerate(zip(counts, got)):
        leaves = [None] * n if g is None else _flatten(g)[0]
        if len(leaves) != n:
            raise AutogradError(f"{what}: bwd's cotangent {k} has {len(leaves)} leaves; its argument has {n}{where}")
        flat += leaves
    return flat


__all__ = [
    "Call",
    "Forward",
    "Function",
    "FunctionCtx",
    "FunctionNode",
    "custom_vjp",
    "define",
    "invoke",
    "once_differentiable",
]
