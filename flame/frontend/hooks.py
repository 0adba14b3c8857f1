"""Hooks on gradients, with PyTorch's semantics: who may change a gradient as backward computes it, in
which order, and the handles that take a hook away again.

Gradient hooks. `Tensor.register_hook(fn)`: when backward has the complete gradient of the tensor,
fn(grad) -> None (keep it) or a new gradient of the same shape and dtype, which is what flows on to
the tensors it was computed from (for a leaf: what is accumulated into .grad). A tensor's hooks run
in registration order; then the group hooks it belongs to (`GroupHook`: a module's backward hooks,
over the gradients of all its inputs, or all its outputs, at once: flame.nn.module_hooks); then a
non-leaf that called `retain_grad()` gets the result in .grad (accumulated, as a leaf's). Eager
backward (frontend/autograd.py) runs in stages so that each hook gets a concrete gradient; inside
@flame.compile the hooks are traced into the backward graph (passes/autodiff.py's `hooks`): a hook
written with flame ops becomes part of the compiled step, and one that needs Python at run time
(.item(), .numpy(), returning None to only record or print) is a flame.TraceError naming the hook.

Node hooks. `t.grad_fn.register_prehook(fn)`: fn(grad_outputs) -> None or new grad_outputs, after the
tensors' own hooks and retain_grad(); `t.grad_fn.register_hook(fn)`: fn(grad_inputs, grad_outputs) ->
None or new grad_inputs, the gradients that node alone passes its inputs, as torch's (inside
@flame.compile too: the traced op reads a copy of each input, whose gradient is its part alone).

Gradient reducers: objects that rewrite the .grad of their parameters right after a backward
(flame.nn.parallel.DistributedDataParallel averages them over the ranks). backward(), eager or
inside @flame.compile (where the reducer's ops join the traced graph after the autodiff ops), calls
`run_grad_reducers` with the tensors whose .grad it has just set. Reducers run in the order they were
registered, which is the same on every rank, so every rank issues the same collectives in the same
order."""

from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable
from contextlib import nullcontext

from flame.errors import AutogradError, TraceError
from flame.frontend.context import current_trace, enable_grad, grad_enabled, no_grad, user_location
from flame.frontend.guards import read_users_function
from flame.frontend.tensor import Tensor

_reducers: list[weakref.ref] = []
_ids = itertools.count()
_seen: dict[int, None] = {}  # the ids of the live hooks a compiled step can see (on leaf tensors and modules)


def register_grad_reducer(reducer) -> None:
    """Call `reducer.reduce_grads(touched)` after each backward (touched: the tensors whose .grad
    that backward set). Held weakly: a reducer nobody keeps stops running."""
    _reducers[:] = [r for r in _reducers if r() is not None]
    _reducers.append(weakref.ref(reducer))


def run_grad_reducers(touched: Iterable) -> None:
    """Hand the tensors whose .grad a backward just set to every live reducer, in registration order."""
    touched = list(touched)
    if not touched:
        return
    for ref in list(_reducers):
        reducer = ref()
        if reducer is not None:
            reducer.reduce_grads(touched)


# ---- handles ---------------------------------------------------------------------------------------
def accumulate_grad(t: Tensor, new: Tensor) -> None:
    """t.grad += new, as torch's AccumulateGrad: the first gradient becomes t.grad; a later one is added
    into the existing .grad in place (the same tensor, its storage updated: a reference held to it
    sees the sum; inside @flame.compile an in-place update of the .grad input, so the plan writes the
    sum into that buffer), except while gradients are recorded (create_graph=True), where the sum is a
    new tensor with a history, as torch's."""
    eager_non_leaf = t._node is not None and t._value is None and current_trace.get() is None
    old = t._grad if eager_non_leaf else t.grad  # (backward(inputs=[non-leaf]) fills it: no warning)
    if old is None:
        t.grad = new
    elif grad_enabled.get():
        t.grad = old + new
    else:
        old.add_(new)


def accumulate_and_notify(t: Tensor, new: Tensor) -> None:
    """accumulate_grad, then t's post-accumulate-grad hooks (hook(t), registration order), as torch's
    AccumulateGrad node runs them right after it wrote t.grad."""
    accumulate_grad(t, new)
    if t._post_hooks:
        for h in list(t._post_hooks.values()):
            got = call_hook(h, t)
            if got is not None:
                raise AutogradError(f"{describe(h)} returned {type(got).__name__}: Tensor post accumulate grad "
                                    f"hooks should return None")


def hooks_state() -> tuple[int, ...]:
    """The ids of the live hooks on leaf tensors and modules: a compiled step that read the hooks guards
    on it, so adding or removing one traces it again (or reuses the trace made with those hooks)."""
    return tuple(_seen)


def seen(handle: RemovableHandle) -> None:
    """Note a hook a compiled step can see (on a leaf tensor or a module); its handle's remove() forgets it."""
    _seen[handle.id] = None


def forget(hook_id: int) -> None:
    """Note that the hook `hook_id` was deleted from its dict by key, as torch code does
    (`del module._forward_pre_hooks[k]`), not through its handle: compiled steps trace again."""
    _seen.pop(hook_id, None)


class RemovableHandle:
    """What a register_*hook returns (torch.utils.hooks.RemovableHandle): `.remove()` takes the hook out
    of every dict it was put in (again is harmless); `with handle:` removes it at the block's end."""

    def __init__(self, *dicts: OrderedDict):
        self.id = next(_ids)
        self._dicts = [weakref.ref(d) for d in dicts]

    def remove(self) -> None:
        """Take the hook away; backward and Module calls from now on do not run it."""
        for ref in self._dicts:
            d = ref()
            if d is not None and self.id in d:
                del d[self.id]
        _seen.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def describe(fn: Callable) -> str:
    """How errors name a hook: "hook 'clip' (defined at train.py:12)"."""
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    code = getattr(fn, "__code__", None) or getattr(vars(type(fn)).get("__call__"), "__code__", None)
    where = f" (defined at {code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"hook {name!r}{where}"


def call_hook(fn: Callable, *args):
    """fn(*args), a user's hook; a TraceError inside it (it read a value while @flame.compile traced)
    is raised again naming the hook and what to do. While traced, the Python values it reads are
    guards of the trace."""
    read_users_function(fn)
    try:
        return fn(*args)
    except TraceError as e:
        raise TraceError(
            f"{describe(fn)} needs Python values at run time, which a @flame.compile step does "
            f"not have: write it with flame ops on its arguments (returning a tensor), or run "
            f"this code eagerly\n{e}"
        ) from None


# ---- tensor hooks ----------------------------------------------------------------------------------
class GroupHook:
    """A hook on the gradients of several tensors at once (a module call's inputs, or its outputs):
    fn(grads) -> None, or new gradients, one per member (None where a member gets none). Members are
    held weakly: the hook lives as long as the tensors that carry it."""

    def __init__(self, members: list[Tensor], fn: Callable[[tuple], tuple | None]):
        self._members = [weakref.ref(t) for t in members]
        self.fn = fn
        self.id = next(_ids)
        for t in members:
            _hook_dict(t)[self.id] = self
            _note(t)

    @property
    def members(self) -> list[Tensor]:
        return [t for t in (r() for r in self._members) if t is not None]


def _hook_dict(t: Tensor) -> OrderedDict:
    if t._hooks is None:
        t._hooks = OrderedDict()
    return t._hooks


def own_hooks(t: Tensor) -> OrderedDict | None:
    """A copy of t's own hooks (not the group hooks it is a member of), for the tensor that stands for it
    in a trace (a @flame.compile argument), or None."""
    if not t._hooks:
        return None
    return OrderedDict((k, h) for k, h in t._hooks.items() if not isinstance(h, GroupHook)) or None


def hand_over_hooks(t: Tensor, old: Tensor) -> None:
    """An in-place write left `old` standing for t as it was (its gradient history): t's own gradient
    hooks go with it, as torch's stay on the node of the version they were registered on, so they see
    the gradient of that version; a module's group hooks stay on t. (The dict moves whole, so the
    handles still remove them.)"""
    hooks = t._hooks
    if not hooks:
        return
    groups = OrderedDict((k, h) for k, h in hooks.items() if isinstance(h, GroupHook))
    for k in groups:
        del hooks[k]
    old._hooks, t._hooks = hooks or None, groups or None


def hand_over_traced_hooks(t: Tensor) -> None:
    """hand_over_hooks while tracing, before traced t takes a new value by a write gradients are
    recorded for: its own hooks go to a traced tensor holding its value as it was, which its trace's
    backward looks for as it does for t. (A write under no_grad keeps them on t, as torch's.)"""
    if t._value is not None and t._hooks and grad_enabled.get() and own_hooks(t):
        old = Tensor._traced(t._value, t._trace)
        hand_over_hooks(t, old)
        _note(old)


def is_hooked(t: Tensor) -> bool:
    """t has a hook or a group hook."""
    return bool(t._hooks)


def unit_of(t: Tensor) -> list[Tensor]:
    """The tensors whose gradients t's hooks transform together: t, and the members of its group hooks."""
    out = [t]
    for h in (t._hooks or {}).values():
        if isinstance(h, GroupHook):
            out += [m for m in h.members if all(m is not o for o in out)]
    return out


def check_traced_result(fn: Callable, got, what: str) -> None:
    """A backward hook that returned None while @flame.compile traced the backward: a TraceError (it
    runs once, when the step is traced, so what it records or prints would not happen at each call)."""
    if got is None and current_trace.get() is not None:
        raise TraceError(
            f"{describe(fn)} returned None while @flame.compile traced the backward: it runs once, when "
            f"the step is traced, so what it records or prints would not happen at each call. Return "
            f"{what} (changed or not) to make it part of the step, or run it eagerly\n  at {user_location()}"
        )


def _checked(fn: Callable, grad: Tensor, got) -> Tensor:
    if got is None:
        check_traced_result(fn, got, "the gradient")
        return grad
    if not isinstance(got, Tensor):
        raise AutogradError(
            f"{describe(fn)} returned {type(got).__name__}; a gradient hook returns None or a flame Tensor"
        )
    if got.shape != grad.shape or got.dtype != grad.dtype:
        raise AutogradError(
            f"{describe(fn)} has changed the size of value: it returned {got.dtype.name}"
            f"{list(got.shape)} for a gradient of {grad.dtype.name}{list(grad.shape)}"
        )
    return got


def run_unit(tensors: list[Tensor], grads: list) -> list:
    """Apply the hooks of `tensors` to their complete gradients (Tensors or None), PyTorch's order: each
    tensor's own hooks in registration order, then (a non-leaf that retains its grad gets the result in
    .grad) the group hooks, which torch runs on the node after the tensor's hooks (a module's backward
    pre-hook changes what flows into the module, not its output's .grad). Concrete gradients eagerly,
    traced ones inside @flame.compile."""
    grads = list(grads)
    groups = {}
    for i, t in enumerate(tensors):
        for h in list((t._hooks or {}).values()):
            if isinstance(h, GroupHook):
                groups.setdefault(h.id, h)
            elif grads[i] is not None:
                grads[i] = _checked(h, grads[i], call_hook(h, grads[i]))
    for t, gr in zip(tensors, grads):
        if t._retains_grad and gr is not None:
            if current_trace.get() is not None:
                with no_grad():
                    accumulate_grad(t, gr)
            else:  # torch's retain_grad sums out of place (recorded for a gradient with a history)
                with nullcontext() if gr.requires_grad and grad_enabled.get() else no_grad():
                    t.grad = gr if t.grad is None else t.grad + gr
    for h in sorted(groups.values(), key=lambda h: h.id):
        members = h.members
        # a member the gradient does not reach (a module output the loss does not use) gets None
        idx = [next((j for j, t in enumerate(tensors) if t is m), None) for m in members]
        got = h.fn(tuple(None if j is None else grads[j] for j in idx))
        if got is not None:
            for j, gr in zip(idx, got):
                if j is not None:
                    grads[j] = gr
    return grads


def traced_unit(tensors: list[Tensor], wrap: Callable, unwrap: Callable) -> Callable:
    """The hooks of `tensors` as an autodiff gradient hook (passes/autodiff.py `hooks`): fn(builder,
    gradient Values) -> Values, running `run_unit` on traced tensors (wrap: Value -> Tensor, unwrap:
    Tensor -> Value)."""

    def fn(b, grads):
        got = run_unit(tensors, [None if g is None else wrap(g) for g in grads])
        return tuple(None if t is None else unwrap(t) for t in got)

    return fn


class TensorHooks:
    """Tensor's hook methods (bound onto Tensor by frontend/methods.py)."""

    __slots__ = ()

    def register_hook(self, hook: Callable) -> RemovableHandle:
        """hook(grad) -> None or a new gradient, called when backward computes this tensor's gradient
        (for a leaf: before it is accumulated into .grad). Returns a handle whose .remove() unregisters
        it. Inside @flame.compile the hook is traced into the backward: it must compute with flame ops
        and return the gradient."""
        if not self.requires_grad and not (self._value is not None and not self.is_leaf):
            raise AutogradError(
                f"register_hook: cannot register a hook on a tensor that doesn't require "
                f"gradient\n  at {user_location()}"
            )
        if not callable(hook):
            raise AutogradError(
                f"register_hook: expected a function of the gradient, got {type(hook).__name__}\n  at {user_location()}"
            )
        d = _hook_dict(self)
        handle = RemovableHandle(d)
        d[handle.id] = hook
        _note(self, handle)
        return handle

    def register_post_accumulate_grad_hook(self, hook: Callable) -> RemovableHandle:
        """hook(tensor) -> None, called after backward accumulated this leaf's gradient into .grad, as
        torch's (an optimizer step per parameter as soon as its gradient is ready, then
        `p.grad = None`, keeps one gradient live at a time). Returns a handle whose .remove()
        unregisters it. Inside @flame.compile it runs while the backward is traced: its flame ops
        (the optimizer's update) become part of the step."""
        if not self.requires_grad:
            raise AutogradError(
                f"register_post_accumulate_grad_hook: cannot register a hook on a tensor that doesn't require "
                f"gradient\n  at {user_location()}"
            )
        if not self.is_leaf:
            raise AutogradError(
                f"post accumulate grad hooks cannot be registered on non-leaf tensors\n  at {user_location()}"
            )
        if not callable(hook):
            raise AutogradError(f"register_post_accumulate_grad_hook: expected a function of the tensor, got "
                                f"{type(hook).__name__}\n  at {user_location()}")
        if self._post_hooks is None:
            self._post_hooks = OrderedDict()
        handle = RemovableHandle(self._post_hooks)
        self._post_hooks[handle.id] = hook
        if self._value is None:
            seen(handle)  # a compiled step that ran this leaf's backward traces again without it
        return handle

    def retain_grad(self) -> None:
        """Keep this non-leaf tensor's gradient in .grad after backward (a leaf keeps it anyway)."""
        if self.is_leaf:
            if not self.requires_grad:
                raise AutogradError(f"can't retain_grad on Tensor that has requires_grad=False\n  at {user_location()}")
            return
        self._retains_grad = True
        _note(self)

    @property
    def retains_grad(self) -> bool:
        """True for a non-leaf whose retain_grad() was called."""
        return self._retains_grad

    @property
    def is_leaf(self) -> bool:
        """A tensor backward ends at: one made by the user (or that does not require grad), not by an
        op from tensors that require grad."""
        if self._value is not None:
            return self._value.producer is None or not _traced_requires_grad(self)
        return self._node is None

    @property
    def grad_fn(self) -> GradFn | None:
        """None for a tensor without gradient history, as torch's; else a GradFn naming the op that made
        it (`name()`: torch's spelling, "MulBackward0") and, eagerly, the grad_fns of its inputs
        (`next_functions`); eagerly the same object at each access, as torch's."""
        if self.is_leaf:
            return None
        if self._value is not None:
            return GradFn(self._value.producer.name, None, [self])
        name, inputs, holder, shared = self._node.grad_fn_parts()
        got = getattr(holder, "grad_fn", None)
        tensors = shared if shared is not None else [self]
        if got is None or len(got._tensors) != len(tensors) or any(r() is not t for r, t in zip(got._tensors, tensors)):
            got = holder.grad_fn = GradFn(self._node.name, inputs, tensors, name)
        return got


class Node:
    """torch.autograd.graph.Node: what grad_fn and its next_functions are instances of."""

    __slots__ = ()


class GradFn(Node):
    """What torch's grad_fn answers of a tensor with gradient history: `name()`, `next_functions`
    ((input's grad_fn, 0) per input: an AccumulateGrad for an input that is a leaf requiring grad, None
    for one that requires none; empty inside @flame.compile, where the traced graph is the history),
    `register_prehook` and `register_hook`. flame's backward rebuilds the graph from the loss; this object
    describes it, and its hooks are group hooks (GroupHook) on the tensors it made (pre-hooks) and on
    copies of its inputs that the node reads from then on (post-hooks)."""

    __slots__ = ("op", "_inputs", "_tensors", "_name")

    def __init__(self, op: str, inputs: tuple | None, tensors: list, name: str | None = None):
        self.op, self._inputs, self._name = op, inputs, name
        self._tensors = [weakref.ref(t) for t in tensors]

    def name(self) -> str:
        if self._name is not None:
            return self._name
        op = self.op.removeprefix("reduce_")  # reduce_sum: torch's SumBackward0
        return "".join(part.capitalize() for part in op.split("_")) + "Backward0"

    @property
    def next_functions(self) -> tuple:
        if not self._inputs:
            return ()
        return tuple((_next_of(t), 0) for t in self._inputs)

    def register_prehook(self, fn: Callable[[tuple], tuple | None]) -> RemovableHandle:
        """fn(grad_outputs) -> None or new grad_outputs (a tuple of one gradient, of the same shape),
        called before the node computes its inputs' gradients, as torch's Node.register_prehook: after
        the tensors' own hooks and retain_grad() (grad_outputs: one per result of the node, None for one
        the gradient does not reach). Returns a handle whose .remove() unregisters it."""
        tensors = [t for t in (r() for r in self._tensors) if t is not None]
        if not callable(fn):
            raise TypeError(f"register_prehook: expected a function of the gradients, got {type(fn).__name__}")

        def run(grads: tuple):
            got = call_hook(fn, grads)
            if got is None:
                check_traced_result(fn, got, "the gradients")
            return _node_hook_result(fn, got, grads)

        hook = GroupHook(tensors, run)
        handle = RemovableHandle(*(_hook_dict(t) for t in tensors))
        handle.id = hook.id
        return handle

    def register_hook(self, fn: Callable) -> RemovableHandle:
        """fn(grad_inputs, grad_outputs) -> None or new grad_inputs, called once the node computed the
        gradients it passes to its inputs (one per input, None for one that requires no grad), as
        torch's Node.register_hook. Each input that requires grad is given to the node through a copy
        of its own (eagerly the node's results' histories are rewired to read it; inside @flame.compile
        the traced op does), whose gradient is the node's contribution alone. Inside @flame.compile the
        hook must return the gradients (it is traced once). Returns a handle whose .remove() unregisters
        it."""
        tensors = [t for t in (r() for r in self._tensors) if t is not None]
        if not callable(fn):
            raise TypeError(f"register_hook: expected a function of the gradients, got {type(fn).__name__}")
        edges = _edges(tensors, self._inputs) if self._inputs is not None else _traced_edges(tensors)
        outputs: list = []

        def seen(grads: tuple):  # the node's grad_outputs, known before its inputs' gradients
            outputs[:] = [grads]

        def run(grads: tuple):
            full = iter(grads)
            gi = tuple(next(full) if e is not None else None for e in edges)
            if all(g is None for g in gi):  # the backward did not run the node
                return None
            got = call_hook(fn, gi, outputs[0] if outputs else (None,) * len(tensors))
            if got is None:
                check_traced_result(fn, got, "the gradients")
            got = _node_hook_result(fn, got, gi)
            return None if got is None else tuple(g for g, e in zip(got, edges) if e is not None)

        first = GroupHook(tensors, seen)
        second = GroupHook([e for e in edges if e is not None], run)
        handle = RemovableHandle(*(_hook_dict(t) for t in (*tensors, *(e for e in edges if e is not None))))
        handle.id = second.id
        for t in tensors:  # (the first hook goes with the second)
            _hook_dict(t)[handle.id] = _hook_dict(t).pop(first.id)
        return handle

    def __repr__(self) -> str:
        return f"<{self.name()} object>"


def _node_hook_result(fn: Callable, got, grads: tuple):
    """A node hook's result checked as torch's: None, or a tuple of one gradient (or None) per gradient
    it was given, each of that gradient's size."""
    if got is None:
        return None
    if not isinstance(got, tuple):
        raise TypeError(f"expected tuple, but hook returned '{type(got).__name__}'")
    name = getattr(fn, "__name__", type(fn).__name__)
    if len(got) != len(grads):
        raise AutogradError(f"hook '{name}' has returned an incorrect number of values (got {len(got)}, but "
                            f"expected {len(grads)})")
    for g, new in zip(grads, got):
        if g is not None and new is not None and (not isinstance(new, Tensor) or new.shape != g.shape):
            raise AutogradError(f"hook '{name}' has changed the size of value")
    return got


def _edges(tensors: list, inputs: tuple) -> list:
    """For a node post-hook: a copy of each input that requires grad (None for the others), recorded from
    the input, which the node of each of `tensors` (its results) reads from now on in the input's place."""
    with enable_grad():
        edges = [x.clone() if isinstance(x, Tensor) and x.requires_grad else None for x in inputs]
    for t in tensors:
        node = t._node
        for i, e in enumerate(edges):
            if e is not None and node.inputs[i] is inputs[i]:
                if node.versions[i] != inputs[i]._version:
                    raise AutogradError(f"register_hook: an input of {node.name} was modified in place since it "
                                        f"was used (at {node.loc})\n  at {user_location()}")
                node.inputs = (*node.inputs[:i], e, *node.inputs[i + 1 :])
                node.versions = (*node.versions[:i], e._version, *node.versions[i + 1 :])
    return edges


def _traced_edges(tensors: list) -> list:
    """_edges inside @flame.compile: a copy (x * 1) of each input of the op that made `tensors` that
    requires grad, put into the traced graph just before that op, which reads it from then on."""
    t = tensors[0]
    trace, op = t._trace, t._value.producer
    ops = trace.graph.ops
    start = len(ops)
    with enable_grad():
        edges = []
        for x in op.inputs:
            x = Tensor._traced(x, trace)
            edges.append(x * 1 if x.dtype.is_float and trace.requires_grad(x) else None)
    made = ops[start:]
    del ops[start:]
    at = ops.index(op)
    ops[at:at] = made
    op.inputs = tuple(x if e is None else e._value for x, e in zip(op.inputs, edges))
    return edges


class AccumulateGrad(Node):
    """The grad_fn entry of a leaf requiring grad (its `variable`), as torch's."""

    __slots__ = ("variable",)

    def __init__(self, variable: Tensor):
        self.variable = variable

    def name(self) -> str:
        return "torch::autograd::AccumulateGrad"

    next_functions = ()

    def __repr__(self) -> str:
        return "<AccumulateGrad object>"


def _next_of(t) -> GradFn | AccumulateGrad | None:
    if not isinstance(t, Tensor) or not t.requires_grad:
        return None
    return AccumulateGrad(t) if t.is_leaf else t.grad_fn


def _note(t: Tensor, handle: RemovableHandle | None = None) -> None:
    """A hook was added: a traced tensor is noted by its trace (its backward looks for them), a leaf's
    hook is one a compiled step can see."""
    if t._value is not None:
        t._trace.hooked[id(t)] = t
    elif t._node is None and handle is not None:
        seen(handle)


def _traced_requires_grad(t: Tensor) -> bool:
    """A traced tensor is computed from a tensor that requires grad, through ops with a gradient."""
    return t._trace.requires_grad(t)
