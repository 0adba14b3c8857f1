"""flame.autograd.forward_ad: torch.autograd.forward_ad's API (dual_level, enter_dual_level,
exit_dual_level, make_dual, unpack_dual, UnpackedDualTensor), eagerly and inside @flame.compile.

flame has no forward-mode rules per op; a tangent is computed by reverse mode instead. make_dual(x, v)
returns a tensor with x's values whose history starts at a leaf of its own (a view of x when x requires
grad, so gradients still reach x), and the level remembers that leaf with its tangent v. Every op on a
dual then records its usual reverse-mode history. unpack_dual(y) computes y's tangent, sum_i J_i v_i over
the level's duals, by the double-backward trick that flame.autograd.functional.jvp uses: the gradient,
with respect to a seed u, of the vector-Jacobian product u^T J (two flame.autograd.grad calls, the first
with create_graph=True). So any op with a gradient has a tangent, in-place updates of a dual included.
A user autograd Function called on tensors with tangents takes its outputs' tangents from its `jvp`,
as torch's (those outputs are where the double-backward stops: their history, through the Function's
backward, carries reverse-mode gradients only); one without jvp is torch's NotImplementedError.

Under no_grad() (or inference_mode), where ops record no history, the level keeps a tape instead: the
ops (those dispatched through flame's op table) that read a dual, a tensor on the tape, or a tensor that
requires grad. Their results do not require grad, as torch's; unpack_dual of one of them replays the tape
up to it with gradients enabled (from the duals' leaves) and takes the tangent of the replayed tensor, so
the tangent needs no gradient mode (as torch's forward AD ignores no_grad); the tape lives until the level
exits.

Where it differs from torch's (which propagates tangents op by op):
- under no_grad, an in-place write into a tensor computed from a dual is not followed (its tangent is
  the one from before the write), and each unpack_dual replays the tape up to its tensor;
- with gradients enabled, a dual and the tensors computed from it require grad (their history is what
  carries the tangent), and so do the primal and the tangent unpack_dual returns for them (the
  tangent's history reaches the primals and tangents it derives from, so it can be differentiated
  again, as torch's); a dual's primal is the tensor given to make_dual (or, where that does not require
  grad, a detached copy);
- a tangent has the dtype of the tensor it belongs to (torch keeps a tangent of another floating dtype
  as given, and so does unpack_dual of the dual itself here, as long as it was not written in place);
- the dual does not share storage with the tensor given to make_dual: an in-place write into one is not
  seen by the other (in-place writes into the dual itself are tracked);
- each unpack_dual runs two backward passes over the history from the duals to its tensor (inside
  @flame.compile they are traced into the compiled step, as flame.autograd.grad's are).
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from typing import NamedTuple

from flame.errors import AutogradError
from flame.frontend.autograd_grad import grad
from flame.frontend.context import enable_grad, function_jvp, is_grad_enabled, op_recorder, user_location
from flame.frontend.creation import zeros_like
from flame.frontend.dispatch import apply
from flame.frontend.saved import grad_for_real, hooks_suspended
from flame.frontend.tensor import Tensor


class UnpackedDualTensor(NamedTuple):
    """What unpack_dual returns: the primal and its tangent (None where the tensor has none)."""

    primal: Tensor
    tangent: Tensor | None


class _Dual:
    """One make_dual: the dual returned, the leaf its history starts at, its tangent, and the dual's
    version counter when made (an unchanged dual's tangent is the one given)."""

    __slots__ = ("dual", "leaf", "primal", "tangent", "version")

    def __init__(self, dual: Tensor, leaf: Tensor, primal: Tensor, tangent: Tensor) -> None:
        self.dual, self.leaf, self.primal, self.tangent = dual, leaf, primal, tangent
        self.version = dual._version


class _Tape:
    """The ops that carry tangents without a gradient history: each op that reads a dual or a result
    already on the tape that does not require grad, or (under no_grad) a tensor that requires grad, as
    (op, inputs, attributes, result). Told of every op by dispatch.apply while a level is entered."""

    def __init__(self) -> None:
        self.entries: list[tuple] = []
        self.on: dict[int, Tensor] = {}  # id -> a dual or a result on the tape (held, so the ids stay)
        self.replaying = False
        self.previous = None  # the recorder in place when the level was entered (told of every op too)

    def __call__(self, name: str, inputs: tuple, attrs: dict, out: Tensor) -> None:
        if self.previous is not None:
            self.previous(name, inputs, attrs, out)
        if out.requires_grad and not _for_real(inputs):
            _tangents_only[id(out)] = out
        if self.replaying:
            return
        grad_off = not is_grad_enabled()
        for x in inputs:  # (a tensor that requires grad carries its tangent in its history, unless no_grad)
            if isinstance(x, Tensor) and (grad_off if x.requires_grad else self.on.get(id(x)) is x):
                self.entries.append((name, inputs, attrs, out))
                self.on[id(out)] = out
                return

    def replay(self, y: Tensor) -> Tensor | None:
        """y computed again from the duals' leaves with gradients enabled (None: y is not on the tape)."""
        if self.on.get(id(y)) is not y:
            return None
        mapped = {id(r.dual): r.leaf for r in _duals.values() if not r.dual.requires_grad}
        self.replaying = True
        try:
            with enable_grad():
                for name, inputs, attrs, out in self.entries:
                    if id(out) in mapped and _is_dual(out):  # a Function's result: its leaf, not its forward's ops
                        continue
                    ins = tuple(mapped.get(id(x), x) if isinstance(x, Tensor) else x for x in inputs)
                    mapped[id(out)] = apply(name, *ins, **attrs)
                    if out is y:
                        break
        finally:
            self.replaying = False
        return mapped.get(id(y))


class _Scope:
    """The tangents one forward-AD computation knows (a dual level, or one flame.func.jvp call): `duals`,
    id -> the record of a tensor given a tangent, and `from_jvp`, id -> a user Function's result whose
    tangent its jvp gave. Those results are leaves while tangents are computed: their history, which
    reaches the Function's inputs through its backward, carries reverse-mode gradients only."""

    def __init__(self) -> None:
        self.duals: dict[int, _Dual] = {}
        self.from_jvp: dict[int, Tensor] = {}

    def given(self, t: Tensor) -> Tensor | None:
        """The tangent t was given (a dual, or a Function result), if it is one and unchanged since."""
        record = self.duals.get(id(t))
        if record is not None and record.dual is t and t._version == record.version:
            return record.tangent
        return None

    def jvp(self, y: Tensor, create_graph: bool) -> Tensor | None:
        """y's tangent over the records, by the double-backward trick (None: y depends on none)."""
        records = list(self.duals.values())
        if not records:
            return None
        cut = [(t, t._node) for t in self.from_jvp.values() if t._node is not None]
        try:
            for t, _ in cut:
                t._node = None
            return _jvp_of(y, records, create_graph)
        finally:
            for t, node in cut:
                t._node = node

    def function_tangents(self, tangent_of, cls: type, args: tuple, result, jvp):
        """A user autograd Function called on tensors with tangents (`tangent_of(tensor)` -> its tangent or
        None), as torch's forward AD: its outputs' tangents are what its jvp makes of the arguments'
        (zeros for a tensor without one, None for a Python value); a Function without jvp is torch's
        NotImplementedError (flame's own Functions, without one, keep the tangents their backward gives)."""
        tangents = [tangent_of(a) if isinstance(a, Tensor) else None for a in args]
        if all(t is None for t in tangents):
            return result
        if jvp is None:
            if cls.__module__.split(".")[0] == "flame":
                return result
            raise NotImplementedError(
                "You must implement the jvp function for custom autograd.Function to use it with forward mode AD."
            )
        tangents = [zeros_like(a) if t is None and isinstance(a, Tensor) else t for a, t in zip(args, tangents)]
        with enable_grad():
            got = jvp(tangents)
        outs = list(result) if isinstance(result, tuple) else [result]
        got = list(got) if isinstance(got, tuple) else [got]
        if len(got) != len(outs):
            raise AutogradError(f"function {cls.__name__}.jvp returned {len(got)} tangents for {len(outs)} outputs "
                                f"of forward\n  at {user_location()}")
        for o, t in zip(outs, got):
            if isinstance(o, Tensor) and o.dtype.is_float and isinstance(t, Tensor):
                self._from_jvp(cls, o, t)
        return result

    def _from_jvp(self, cls: type, out: Tensor, tangent: Tensor) -> None:
        if tuple(tangent.shape) != tuple(out.shape):
            raise AutogradError(f"function {cls.__name__}.jvp returned a tangent of shape {list(tangent.shape)} for "
                                f"an output of shape {list(out.shape)}\n  at {user_location()}")
        if out._value is not None:
            raise AutogradError(f"function {cls.__name__}: a custom Function's jvp inside @flame.compile is not "
                                f"supported (flame's forward AD takes tangents there by reverse mode); call it "
                                f"eagerly\n  at {user_location()}")
        if out.requires_grad:
            self.duals[id(out)] = _Dual(out, out, out, tangent)
            self.from_jvp[id(out)] = out
        else:  # (no_grad, in a dual level: a leaf of its own, as make_dual's, its ops on the tape)
            self.duals[id(out)] = _Dual(out, out.detach().clone().requires_grad_(True), out, tangent)
            _tape.on[id(out)] = out


# id -> a tensor that requires grad only to carry tangents (a dual of a tensor that does not, and what ops
# made from such tensors alone): saved-tensor hooks do not run for its ops, as torch's forward AD saves nothing
_tangents_only: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _for_real(inputs) -> bool:
    """An op on `inputs` records a gradient torch would: one reads a tensor that requires grad for
    another reason than carrying a tangent."""
    return any(isinstance(x, Tensor) and x.requires_grad and _tangents_only.get(id(x)) is not x for x in inputs)


_current_level = -1
_scope = _Scope()  # the dual level's
_duals = _scope.duals  # id(dual) -> its record, for the current level
_tape = _Tape()


def _function_tangents(cls: type, args: tuple, result, jvp):
    return _scope.function_tangents(lambda a: unpack_dual(a).tangent, cls, args, result, jvp)


@contextlib.contextmanager
def function_jvps(inputs: list, tangents: list):
    """For flame.func.jvp: inside the block, a user Function called on tensors computed from `inputs`
    (leaves that require grad) takes its outputs' tangents from its jvp, given `tangents` for the inputs.
    Yields `tangent(y, create_graph)` -> y's tangent, or None where no Function's jvp ran (the caller's
    own double backward then gives the same)."""
    scope = _Scope()
    for x, t in zip(inputs, tangents):
        scope.duals[id(x)] = _Dual(x, x, x, t)

    def tangent_of(a: Tensor) -> Tensor | None:
        given = scope.given(a)
        return given if given is not None or not a.requires_grad else scope.jvp(a, True)

    def tangent(y: Tensor, create_graph: bool) -> Tensor | None:
        if not scope.from_jvp:
            return None
        got = scope.jvp(y, create_graph) if y.requires_grad else None
        return zeros_like(y) if got is None else got

    token = function_jvp.set(functools.partial(scope.function_tangents, tangent_of))
    try:
        yield tangent
    finally:
        function_jvp.reset(token)


def enter_dual_level() -> int:
    """Enter a new forward grad level (torch's: only one level at a time) and return it."""
    global _current_level
    if _current_level >= 0:
        raise RuntimeError("Nested forward mode AD is not supported at the moment")
    _current_level += 1
    _tape.previous = op_recorder.get()
    op_recorder.set(_tape)
    function_jvp.set(_function_tangents)
    grad_for_real.set(_for_real)
    return _current_level


def exit_dual_level(*, level: int | None = None) -> None:
    """Exit the current forward grad level: its duals lose their tangents."""
    global _current_level
    if level is None:
        level = _current_level
    if level != _current_level:
        raise RuntimeError(
            "Trying to exit a forward AD level that was not the last one that was created. This is not supported."
        )
    if level < 0:
        raise RuntimeError("Dual level must be a positive number.")
    _duals.clear()
    _scope.from_jvp.clear()
    _tangents_only.clear()
    function_jvp.set(None)
    grad_for_real.set(None)
    _tape.entries.clear()
    _tape.on.clear()
    op_recorder.set(_tape.previous)
    _tape.previous = None
    _current_level = level - 1


class dual_level(contextlib.ContextDecorator):
    """A context manager (or decorator) in which forward AD computations happen: make_dual's tangents
    live until it exits. `with dual_level() as level:` gives the level."""

    def __enter__(self) -> int:
        return enter_dual_level()

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        exit_dual_level()


def _sizes(t: Tensor) -> str:
    return "[" + ", ".join(str(int(s)) for s in t.shape) + "]"


def _check_level(level: int | None, what: str) -> int:
    if level is None:
        level = _current_level
    if level >= 0 and level != _current_level:
        raise RuntimeError(f"Invalid level given to {what}")
    return level


def _is_dual(t) -> bool:
    record = _duals.get(id(t))
    return record is not None and record.dual is t


def make_dual(tensor: Tensor, tangent: Tensor, *, level: int | None = None) -> Tensor:
    """A dual tensor: `tensor`'s values with `tangent` as its forward gradient at the level (torch's
    make_dual). Results computed from it carry the tangent that unpack_dual reads."""
    if level is None:
        level = _current_level
    if level < 0:
        raise RuntimeError(
            "Trying to create a dual Tensor for forward AD but no level exists, make sure to "
            "enter_dual_level() first."
        )
    _check_level(level, "_make_dual")
    if not tensor.dtype.is_float:
        raise ValueError(f"Expected primal to be floating point or complex, but got: {tensor.dtype!r}")
    if not tangent.dtype.is_float:
        raise ValueError(f"Expected tangent to be floating point or complex, but got: {tangent.dtype!r}")
    if tuple(tensor.shape) != tuple(tangent.shape):
        raise RuntimeError(
            "Trying to set a forward gradient that has a different size than that of the original Tensor, "
            f"this is not supported. Tensor is of size {_sizes(tensor)} while the given forward gradient is "
            f"of size {_sizes(tangent)}."
        )
    if _is_dual(tensor):
        raise RuntimeError(
            "Making a dual Tensor based on a Tensor that already has a forward gradient at the same level "
            f"{level} is not supported."
        )
    recording = is_grad_enabled()
    with enable_grad():
        if tensor.requires_grad:
            leaf, primal = tensor.view_as(tensor), tensor  # gradients still reach `tensor`
        else:
            leaf = tensor.detach().clone().requires_grad_(True)
            primal = tensor.detach()
            _tangents_only[id(leaf)] = leaf
    if not recording:  # (no_grad: a dual that does not require grad; its ops go on the tape)
        dual = tensor.detach().clone()
    else:  # not the leaf itself, so that in-place writes into the dual are allowed
        dual = leaf if tensor.requires_grad else leaf.clone()
    _duals[id(dual)] = _Dual(dual, leaf, primal, tangent)
    _tape.on[id(dual)] = dual
    return dual


def _tangent(y: Tensor) -> Tensor | None:
    """y's tangent: the Jacobian-vector product, from the level's duals to y, by the double-backward
    trick (None where y does not depend on any dual)."""
    if not y.dtype.is_float:
        return None
    if not y.requires_grad:
        y = _tape.replay(y)
        if y is None or not y.requires_grad:
            return None
    return _scope.jvp(y, is_grad_enabled())  # (with gradients on, the tangent is differentiable again)


def _jvp_of(y: Tensor, records: list, create_graph: bool) -> Tensor | None:
    with enable_grad(), hooks_suspended():  # (torch's forward AD saves nothing: no saved-tensor hook runs)
        u = zeros_like(y).requires_grad_(True)  # u^T J is linear in u: its values never reach the result
        vjps = grad(y, [r.leaf for r in records], u, create_graph=True, retain_graph=True, allow_unused=True)
        kept = [(g, r.tangent) for g, r in zip(vjps, records) if g is not None]
        if not kept:
            return None
        live = [(g, v) for g, v in kept if g.requires_grad]
        if not live:  # y depends on a dual only through ops of zero derivative (floor, sign, ...)
            return zeros_like(y)
        gs, vs = zip(*live)
        vs = tuple(v if v.dtype == g.dtype else v.to(g.dtype) for g, v in zip(gs, vs))
        (jv,) = grad(gs, [u], vs, create_graph=create_graph, retain_graph=True, allow_unused=True)
    return zeros_like(y) if jv is None else jv


def unpack_dual(tensor, *, level: int | None = None) -> UnpackedDualTensor:
    """(primal, tangent) of a tensor at the level (torch's unpack_dual): the tangent of a tensor computed
    from duals is its Jacobian-vector product with their tangents; None for a tensor that is no dual and
    depends on none, and for any tensor outside a level. A level other than the current one is an error
    for a tensor with a tangent, as in torch."""
    if level is None:
        level = _current_level
    if _current_level < 0 or not isinstance(tensor, Tensor):
        return UnpackedDualTensor(tensor, None)
    if _is_dual(tensor) and tensor._version == _duals[id(tensor)].version:
        record = _duals[id(tensor)]
        primal, tangent = record.primal, record.tangent
    else:
        primal, tangent = tensor, _tangent(tensor)
    if tangent is None:
        return UnpackedDualTensor(tensor, None)
    _check_level(level, "_fw_primal")
    return UnpackedDualTensor(primal, tangent)


__all__ = ["UnpackedDualTensor", "dual_level", "enter_dual_level", "exit_dual_level", "make_dual", "unpack_dual"]
