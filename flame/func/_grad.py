"""torch.func's autodiff transforms, grad, grad_and_value, vjp, jvp, jacrev, jacfwd and hessian, over
flame.autograd.grad (and so over the one autodiff pass), eagerly and inside @flame.compile.

A transform runs the function on fresh leaves that require grad (views of the inputs that already
require grad, so that an enclosing transform or torch-style autograd differentiates through it) and asks
flame.autograd.grad for the gradients, with create_graph=True where an enclosing transform or an input's
history needs them: so transforms compose (grad of grad, jacfwd of jacrev, vmap of grad). At the top
level, with inputs that do not require grad, results carry no history, as torch.func's.
jvp and jacfwd are computed by reverse mode (jvp by the double-backward trick, the gradient of a
vector-Jacobian product with respect to its vector; jacfwd as jacrev, one vector-Jacobian product per
output element): the values are torch's. Where a user autograd Function's jvp gives tangents (torch's
forward mode takes them from it, not from its backward), jvp uses them and jacfwd runs one jvp per
input element. A user Function inside a transform is checked as torch's (setup_context, and inside
vmap, jacfwd and hessian a vmap rule: frontend/custom_function.py)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from functools import wraps
from typing import Any

from flame.autograd.forward_ad import function_jvps
from flame.frontend.autograd_grad import grad as _autograd_grad
from flame.frontend.context import current_trace, enable_grad, in_transform
from flame.frontend.creation import draw_hook, eye, zeros, zeros_like
from flame.frontend.saved import disable_saved_tensors_hooks, hooks_suspended
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import stack
from flame.func._tree import Spec, tree_flatten, tree_unflatten

_depth: ContextVar[int] = ContextVar("func_transform_depth", default=0)

RANDOM_ERROR = ("vmap: called random operation while in randomness error mode. Please either use the 'same' or "
                "'different' randomness flags on vmap or perform the randomness operation out of vmap")


def _refuse_draw(_generator) -> None:
    raise RuntimeError(RANDOM_ERROR)


_REVERSE_HOOKS = ("torch.func.{grad, vjp, jacrev, hessian} don't yet support saved tensor hooks. Please open an "
                  "issue with your use case.")


@contextmanager
def _level(randomness: str | None = None, forward: bool = False, kind: str = "grad"):
    """One transform level: gradients enabled, the nesting depth raised; randomness="error" refuses
    random draws inside. Saved-tensor hooks, as torch.func's: a reverse-mode transform refuses them
    (installed around it or inside, torch's RuntimeError); a forward-mode one (`forward`) runs none.
    `kind` is what a user autograd Function called inside is checked for (frontend/context.py
    func_transforms): "vmap" for jacfwd, which torch computes as a vmap of jvp."""
    token = _depth.set(_depth.get() + 1)
    hook = draw_hook.set(_refuse_draw) if randomness == "error" else None
    try:
        with (enable_grad(), hooks_suspended() if forward else disable_saved_tensors_hooks(_REVERSE_HOOKS),
              in_transform(kind)):
            yield
    finally:
        if hook is not None:
            draw_hook.reset(hook)
        _depth.reset(token)


def _name(func) -> str:
    return getattr(func, "__name__", repr(func))


def _wrap_argnum(argnum, num_args: int) -> int:
    if not isinstance(argnum, int):
        raise RuntimeError(f"argnum must be int, got: {type(argnum)}")
    if 0 <= argnum < num_args:
        return argnum
    if -num_args <= argnum < 0:
        return argnum + num_args
    raise RuntimeError(f"Got argnum={argnum}, but only {num_args} positional inputs")


def _slice_argnums(args: tuple, argnums) -> tuple[Any, Any]:
    """(the wrapped argnums, the differentiated arguments: one argument for an int, a tuple otherwise)."""
    if isinstance(argnums, int):
        n = _wrap_argnum(argnums, len(args))
        return n, args[n]
    if not isinstance(argnums, tuple):
        raise RuntimeError(f"argnums must be int or Tuple[int, ...], got: {type(argnums)}")
    nums = tuple(_wrap_argnum(a, len(args)) for a in argnums)
    if not nums:
        raise RuntimeError("argnums must be non-empty")
    if len(set(nums)) != len(nums):
        raise RuntimeError(f"argnums elements must be unique, got {argnums}")
    return nums, tuple(args[n] for n in nums)


def _replace_args(args: tuple, nums, new) -> tuple:
    if isinstance(nums, int):
        return tuple(new if i == nums else a for i, a in enumerate(args))
    by = dict(zip(nums, new))
    return tuple(by.get(i, a) for i, a in enumerate(args))


def _lift(x) -> Tensor:
    """A fresh input that requires grad: a view of x where x already requires grad (its history is kept
    for an enclosing level), a detached leaf otherwise."""
    if not isinstance(x, Tensor):
        raise ValueError(f"Thing passed to transform API must be Tensor, got {type(x)}")
    return x.view_as(x) if x.requires_grad else x.detach().requires_grad_(True)


def _keeps_history(leaves: list) -> bool:
    """Whether results need a history: inside another transform, or against inputs that require grad."""
    return _depth.get() > 0 or any(isinstance(t, Tensor) and t.requires_grad for t in leaves)


def _captured_history(outs: list, ins: list) -> bool:
    """Whether eager outputs were computed from a tensor that requires grad other than the lifted
    inputs (one the function captured): their gradients then keep a history, as torch's."""
    if current_trace.get() is not None:
        return False
    mine, seen = {id(t) for t in ins}, set()
    todo = [o for o in outs if isinstance(o, Tensor)]
    while todo:
        t = todo.pop()
        if id(t) in seen or id(t) in mine:
            continue
        seen.add(id(t))
        if t._node is None:
            if t.requires_grad:
                return True
            continue
        todo.extend(x for x in getattr(t._node, "inputs", ()) if isinstance(x, Tensor))
    return False


def _grads(outs: list, ins: list, seeds: list | None, create: bool) -> list:
    """d(sum seeds . outs)/d ins, zeros where nothing depends on an input (torch.func's answer)."""
    seeds = [None] * len(outs) if seeds is None else seeds
    kept = [(o, s) for o, s in zip(outs, seeds) if o.requires_grad]
    if not kept:
        return [zeros_like(t) for t in ins]
    os_, ss = zip(*kept)
    got = _autograd_grad(list(os_), ins, list(ss), retain_graph=True, create_graph=create, allow_unused=True,
                         materialize_grads=True)
    return list(got)


def _detach_tree(tree, keep: bool):
    if keep:
        return tree
    leaves, spec = tree_flatten(tree)
    return tree_unflatten([t.detach() if isinstance(t, Tensor) else t for t in leaves], spec)


def _split_aux(out, has_aux: bool, api: str):
    if not has_aux:
        return out, None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise RuntimeError(f"{api}: output of function f should be a tuple: (output, aux) if has_aux is True")
    return out


def grad_and_value(func: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """torch.func.grad_and_value: f -> (args -> (gradient, value)) (with has_aux: (gradient, (value,
    aux))); the gradient of f's scalar output with respect to args[argnums] (an int: that argument, a
    pytree of tensors; a tuple: a tuple of them)."""

    @wraps(func)
    def wrapper(*args, **kwargs):
        nums, diff = _slice_argnums(args, argnums)
        leaves, spec = tree_flatten(diff)
        keep = _keeps_history(leaves)
        with _level():
            ins = [_lift(t) for t in leaves]
            out = func(*_replace_args(args, nums, tree_unflatten(ins, spec)), **kwargs)
            out, aux = _split_aux(out, has_aux, "grad_and_value(f)(*args)")
            if not isinstance(out, Tensor):
                raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a Tensor, got {type(out)}")
            if out.dim() != 0:
                raise RuntimeError(
                    f"grad_and_value(f)(*args): Expected f(*args) to return a scalar Tensor, got tensor with "
                    f"{out.dim()} dims. Maybe you wanted to use the vjp or jacrev APIs instead?"
                )
            keep = keep or _captured_history([out], ins)
            gs = _grads([out], ins, None, create=keep)
        g = _detach_tree(tree_unflatten(gs, spec), keep)
        value = _detach_tree(out, keep)
        return (g, (value, _detach_tree(aux, keep))) if has_aux else (g, value)

    return wrapper


def grad(func: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """torch.func.grad: f -> (args -> the gradient of f's scalar output with respect to args[argnums]);
    with has_aux, f returns (output, aux) and the result is (gradient, aux)."""
    gv = grad_and_value(func, argnums, has_aux)

    @wraps(func)
    def wrapper(*args, **kwargs):
        g, value = gv(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapper


def _check_outputs(leaves: list, api: str) -> None:
    for o in leaves:
        if not isinstance(o, Tensor):
            raise RuntimeError(f"{api}: expected f(*primals) to return only tensors, got unsupported type {type(o)}")
        if not o.dtype.is_float:
            raise RuntimeError(f"vjp(f, ...): All outputs of f must be floating-point or complex Tensors, got Tensor "
                               f"with dtype {o.dtype}")


def vjp(func: Callable, *primals, has_aux: bool = False):
    """torch.func.vjp: (func(*primals), vjp_fn) (with has_aux: and aux); vjp_fn(cotangents), cotangents
    shaped as the output, gives the vector-Jacobian product as a tuple, one entry per primal. vjp_fn may
    be called several times."""
    leaves, spec = tree_flatten(primals)
    keep = _keeps_history(leaves)
    with _level():
        ins = [_lift(t) for t in leaves]
        out = func(*tree_unflatten(ins, spec))
        out, aux = _split_aux(out, has_aux, "vjp(f, *primals)")
        out_leaves, out_spec = tree_flatten(out)
        _check_outputs(out_leaves, "vjp(f, *primals)")
        keep = keep or _captured_history(out_leaves, ins)

    def vjp_fn(cotangents, *, retain_graph: bool = True, create_graph: bool | None = None):
        ct_leaves, ct_spec = tree_flatten(cotangents)
        if ct_spec != out_spec:
            raise RuntimeError(
                f"Expected pytree structure of cotangents to be the same as pytree structure of outputs to the "
                f"function. cotangents: {ct_spec}, primal output: {out_spec}"
            )
        again = keep or _keeps_history(ct_leaves) if create_graph is None else create_graph
        with _level():
            gs = _grads(out_leaves, ins, ct_leaves, create=again)
        return _detach_tree(tree_unflatten(gs, spec), again)

    result = (_detach_tree(out, keep), vjp_fn)
    return (*result, _detach_tree(aux, keep)) if has_aux else result


def jvp(func: Callable, primals: Any, tangents: Any, *, strict: bool = False, has_aux: bool = False):
    """torch.func.jvp: (func(*primals), J tangents) (with has_aux: and aux); primals is a tuple of
    arguments (pytrees of tensors), tangents the same structure. A user autograd Function inside gives
    its outputs' tangents by its jvp, as torch's (one without jvp: torch's NotImplementedError)."""
    api = "jvp(f, primals, tangents)"
    if not isinstance(primals, tuple):
        raise RuntimeError(f"{api}: Expected primals to be a tuple. E.g. it should be valid to call f(*primals).")
    leaves, spec = tree_flatten(primals)
    t_leaves, t_spec = tree_flatten(tangents)
    if t_spec != spec:
        raise RuntimeError(
            f"{api}: Expected primals and tangents to have the same python structure. For example, if primals is "
            f"a tuple of 3 tensors, tangents also must be. Got primals with structure {spec} and tangents with "
            f"structure {t_spec}"
        )
    for p, t in zip(leaves, t_leaves):
        if not isinstance(p, Tensor) or not isinstance(t, Tensor):
            raise RuntimeError(f"{api}: Expected primals to only contain Tensors, got {type(p)}")
        if tuple(p.shape) != tuple(t.shape):
            raise RuntimeError(f"{api}: Expected primals and tangents to have the same shape, got "
                               f"{tuple(p.shape)} and {tuple(t.shape)}")
    keep = _keeps_history(leaves + t_leaves)
    with _level(forward=True):
        ins = [_lift(t) for t in leaves]
        with function_jvps(ins, t_leaves) as tangent:  # (a user Function's jvp gives its outputs' tangents)
            out = func(*tree_unflatten(ins, spec))
        out, aux = _split_aux(out, has_aux, api)
        out_leaves, out_spec = tree_flatten(out)
        _check_outputs(out_leaves, api)
        keep = keep or _captured_history(out_leaves, ins)
        if strict and not any(o.requires_grad for o in out_leaves):
            raise RuntimeError("jvp(f, primals, tangents, strict=True): The output of f is independent of the inputs. "
                               "This is not allowed with strict=True.")
        jv = [tangent(o, keep) for o in out_leaves]
        if jv and jv[0] is None:
            jv = _reverse_jvp(out_leaves, ins, t_leaves, keep)
    result = (_detach_tree(out, keep), _detach_tree(tree_unflatten(jv, out_spec), keep))
    return (*result, _detach_tree(aux, keep)) if has_aux else result


def _reverse_jvp(out_leaves: list, ins: list, t_leaves: list, keep: bool) -> list:
    """J t by the double-backward trick: u^T J is linear in u, so u's values never reach the result
    (zeros will do)."""
    us = [zeros_like(o).requires_grad_(True) for o in out_leaves]
    vjps = _grads(out_leaves, ins, us, create=True)
    pairs = [(g, t) for g, t in zip(vjps, t_leaves) if g.requires_grad]
    if not pairs:
        return [zeros_like(o) for o in out_leaves]
    outs_, seeds = zip(*pairs)
    return _grads(list(outs_), us, list(seeds), create=keep)


def _jacobian(func: Callable, argnums, has_aux: bool, api: str, randomness: str | None) -> Callable:
    """The Jacobian of func at args with respect to args[argnums]: for each output leaf, the structure of
    the differentiated arguments with tensors of shape output.shape + input.shape."""

    @wraps(func)
    def wrapper(*args, **kwargs):
        nums, diff = _slice_argnums(args, argnums)
        leaves, spec = tree_flatten(diff)
        keep = _keeps_history(leaves)
        forward = api.startswith("jvp")
        with _level(randomness, forward=forward, kind="vmap" if forward else "grad"):
            ins = [_lift(t) for t in leaves]

            def call(tangents: list):  # (out leaves, their tangents or None, out spec, aux)
                with function_jvps(ins, tangents) if forward else nullcontext() as tangent:
                    out = func(*_replace_args(args, nums, tree_unflatten(ins, spec)), **kwargs)
                out, aux = _split_aux(out, has_aux, api)
                out_leaves, out_spec = tree_flatten(out)
                _check_outputs(out_leaves, api)
                return out_leaves, [tangent(o, keep) for o in out_leaves] if forward else None, out_spec, aux

            out_leaves, first, out_spec, aux = call(_basis(ins, 0) if forward else [])
            keep = keep or _captured_history(out_leaves, ins)
            if first and first[0] is not None:  # a user Function's jvp gave tangents: forward mode, as torch's
                jacs = _forward_jacobians(call, ins, spec, out_leaves, first)
            else:
                jacs = [_jacobian_of(o, ins, spec, keep) for o in out_leaves]
        jac = _detach_tree(tree_unflatten(jacs, out_spec), keep)
        return (jac, _detach_tree(aux, keep)) if has_aux else jac

    return wrapper


def _basis(ins: list, column: int) -> list:
    """The tangents of the inputs' element `column` (counted over all inputs, flattened in order): a
    one there, zeros elsewhere."""
    out = []
    for t in ins:
        n = t.numel()
        if 0 <= column < n:
            out.append(eye(n, dtype=t.dtype)[column].reshape(t.shape))
        else:
            out.append(zeros_like(t))
        column -= n
    return out


def _forward_jacobians(call: Callable, ins: list, spec: Spec, out_leaves: list, first: list) -> list:
    """jacfwd where a user autograd Function's jvp gives tangents: one jvp per input element (func runs
    again for each), its tangents the Jacobian's columns, as torch's jacfwd (a vmap of jvp over the
    basis) takes them from that jvp."""
    columns = [first] + [call(_basis(ins, k))[1] for k in range(1, sum(t.numel() for t in ins))]
    jacs, start = [[] for _ in out_leaves], 0
    for t in ins:
        n = t.numel()
        for i, o in enumerate(out_leaves):
            cols = [c[i] for c in columns[start : start + n]]
            jac = stack(cols, dim=-1) if cols else zeros((*o.shape, 0), dtype=o.dtype)
            jacs[i].append(jac.reshape(*o.shape, *t.shape))
        start += n
    return [tree_unflatten(per, spec) for per in jacs]


def _jacobian_of(o: Tensor, ins: list, spec: Spec, keep: bool):
    """One vector-Jacobian product per element of o, stacked to o.shape + input.shape per input."""
    n = o.numel()
    if n == 0 or not o.requires_grad:
        return tree_unflatten([zeros((*o.shape, *t.shape), dtype=t.dtype) for t in ins], spec)
    flat = o.reshape(-1)
    rows = [_grads([flat[i]], ins, None, create=keep) for i in range(n)]
    per = [stack([r[j] for r in rows]).reshape(*o.shape, *t.shape) for j, t in enumerate(ins)]
    return tree_unflatten(per, spec)


def jacrev(func: Callable, argnums: int | tuple[int, ...] = 0, *, has_aux: bool = False,
           chunk_size: int | None = None, _preallocate_and_copy: bool = False) -> Callable:
    """torch.func.jacrev: the Jacobian of func with respect to args[argnums], by reverse mode (one
    vector-Jacobian product per output element; chunk_size is accepted and changes nothing)."""
    if chunk_size is not None and not (isinstance(chunk_size, int) and chunk_size > 0):
        raise ValueError("jacrev: `chunk_size` should be greater than 0.")
    return _jacobian(func, argnums, has_aux, "vjp(f, *primals)", None)


def jacfwd(func: Callable, argnums=0, has_aux: bool = False, *, randomness: str = "error") -> Callable:
    """torch.func.jacfwd: the Jacobian of func with respect to args[argnums] (torch's values; computed
    by reverse mode, as jacrev, unless a user autograd Function's jvp gives tangents: then one jvp per
    input element). randomness="error" refuses random draws inside func; "same" and "different" let
    them happen."""
    if randomness not in ("error", "different", "same"):
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or 'same'. Got {randomness}")
    return _jacobian(func, argnums, has_aux, "jvp(f, primals, tangents)", randomness)


def hessian(func: Callable, argnums=0) -> Callable:
    """torch.func.hessian: jacfwd(jacrev(func, argnums), argnums)."""
    return jacfwd(jacrev(func, argnums), argnums)


def linearize(func: Callable, *primals) -> tuple[Any, Callable]:
    """torch.func.linearize: (func(*primals), jvp_fn), where jvp_fn(*tangents) gives J tangents at
    primals (tangents in the primals' structure, each of its primal's shape and dtype, else torch's
    RuntimeError). torch replays a graph traced once; flame's jvp_fn runs jvp(func, primals, tangents),
    which gives the same values for a function that draws no random numbers."""
    output = func(*primals)
    flat_primals, primals_spec = tree_flatten(primals)

    def jvp_fn(*tangents):
        flat_tangents, tangents_spec = tree_flatten(tangents)
        if tangents_spec != primals_spec:
            raise RuntimeError(
                f"Expected the tangents {tangents_spec} to have the same argspec as the primals {primals_spec}"
            )
        for idx, (p, t) in enumerate(zip(flat_primals, flat_tangents)):
            for what, want, got in (("shape", tuple(p.shape), tuple(t.shape)), ("dtype", p.dtype, t.dtype)):
                if got != want:
                    raise RuntimeError(
                        f"tangent:{idx} with {what} {got} in flattened pytree doesn't match the {what} {want} "
                        "of the corresponding primal."
                    )
        return jvp(func, primals, tangents)[1]

    return output, jvp_fn
