"""flame.autograd.functional: torch.autograd.functional's vjp, jvp, jacobian, hessian, vhp and hvp, eagerly
and inside @flame.compile, over flame.autograd.grad (and so over the one autodiff pass). As torch's:
`inputs` is a Tensor or a tuple of Tensors and each result mirrors the structure of what it is taken
against; the function's inputs are fresh leaves (detached copies, or views of inputs that require grad
under create_graph=True); gradients the function does not depend on are zeros (strict=True raises
instead); results carry a history only with create_graph=True. jvp and hvp use the double-backward
trick (the gradient of a vector-Jacobian product with respect to its vector), as torch's do, so they
need no forward-mode autodiff; a Jacobian is one vector-Jacobian product per output element
(vectorize=True and strategy="forward-mode", which torch allows only together, give the same values,
computed so)."""

from __future__ import annotations

from collections.abc import Callable

from flame.frontend.autograd_grad import grad
from flame.frontend.context import enable_grad, is_grad_enabled, set_grad_enabled
from flame.frontend.creation import zeros_like
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import stack


def _as_tuple(x, arg_name: str, fn_name: str) -> tuple[bool, tuple]:
    """(whether x was a tuple, x as a tuple), every element a Tensor (torch's TypeError otherwise)."""
    is_tuple = isinstance(x, tuple)
    items = x if is_tuple else (x,)
    for i, el in enumerate(items):
        if not isinstance(el, Tensor):
            where = f"the value at index {i}" if is_tuple else f"the given {arg_name}"
            raise TypeError(
                f"The {arg_name} given to {fn_name} must be either a Tensor or a tuple of Tensors but "
                f"{where} has type {type(el)}."
            )
    return is_tuple, items


def _unpack(res, to_unpack):
    """res (a tuple, or a tuple of tuples) unwrapped where the structure it mirrors was no tuple."""
    if isinstance(to_unpack, tuple):
        if not to_unpack[1]:
            res = tuple(el[0] for el in res)
        if not to_unpack[0]:
            res = res[0]
    elif not to_unpack:
        res = res[0]
    return res


def _preprocess(inputs: tuple, create_graph: bool, need_graph: bool) -> tuple:
    """The function's inputs: views (keeping the history) of those that require grad under
    create_graph, fresh leaves otherwise."""
    return tuple(
        t.view_as(t) if create_graph and t.requires_grad else t.detach().requires_grad_(need_graph) for t in inputs
    )


def _postprocess(items: tuple, create_graph: bool) -> tuple:
    if isinstance(items[0], Tensor):
        return items if create_graph else tuple(t.detach() for t in items)
    return tuple(_postprocess(el, create_graph) for el in items)


def _validate_v(v: tuple, other: tuple, is_other_tuple: bool) -> None:
    if len(other) != len(v):
        if is_other_tuple:
            raise RuntimeError(f"v is a tuple of invalid length: should be {len(other)} but got {len(v)}.")
        raise RuntimeError("The given v should contain a single Tensor.")
    for idx, (el_v, el_other) in enumerate(zip(v, other)):
        if tuple(el_v.shape) != tuple(el_other.shape):
            prepend = f"Entry {idx} in " if is_other_tuple else ""
            raise RuntimeError(
                f"{prepend}v has invalid size: should be {el_other.size()} but got {el_v.size()}."
            )


_REQUIRES = {
    "hessian": "The hessian of the user-provided function with respect to input {i} is independent of the "
    "input. This is not allowed in strict mode. You should ensure that your function is thrice "
    "differentiable and that the hessian depends on the inputs.",
    "jacobian": "While computing the hessian, found that the jacobian of the user-provided function with "
    "respect to input {i} is independent of the input. This is not allowed in strict mode. You should "
    "ensure that your function is twice differentiable and that the jacobian depends on the inputs (this "
    "would be violated by a linear function for example).",
    "grad_inputs": "The gradient with respect to input {i} is independent of the inputs of the user-provided "
    "function. This is not allowed in strict mode.",
    "outputs": "Output {i} of the user-provided function does not require gradients. The outputs must be "
    "computed in a differentiable manner from the input when running in strict mode.",
}


def _check_requires_grad(items: tuple, input_type: str, strict: bool) -> None:
    if not strict:
        return
    for i, t in enumerate(items):
        if t is None:
            raise RuntimeError(
                f"The output of the user-provided function is independent of input {i}. This is not "
                f"allowed in strict mode."
            )
        if not t.requires_grad:
            raise RuntimeError(_REQUIRES[input_type].format(i=i))


def _grad(outputs: tuple, inputs: tuple, grad_outputs=None, create_graph=False, retain_graph=None) -> tuple:
    """flame.autograd.grad of the outputs that have a history (None for every input when none has)."""
    grad_outputs = (None,) * len(outputs) if grad_outputs is None else grad_outputs
    kept = [(o, g) for o, g in zip(outputs, grad_outputs) if o is not None and o.requires_grad]
    if not kept:
        return (None,) * len(inputs)
    outs, seeds = zip(*kept)
    return grad(outs, inputs, seeds, allow_unused=True, create_graph=create_graph, retain_graph=retain_graph)


_ZEROS = {
    "back": "The output of the user-provided function is independent of input {i}. This is not allowed in "
    "strict mode.",
    "back_trick": "The gradient with respect to the input is independent of entry {i} in the grad_outputs "
    "when using the double backward trick to compute forward mode gradients. This is not allowed in strict "
    "mode.",
    "double_back": "The jacobian of the user-provided function is independent of input {i}. This is not "
    "allowed in strict mode.",
    "double_back_trick": "The hessian of the user-provided function is independent of entry {i} in the "
    "grad_jacobian. This is not allowed in strict mode as it prevents from using the double backward trick "
    "to replace forward mode AD.",
}


def _fill_in_zeros(grads: tuple, refs: tuple, strict: bool, create_graph: bool, stage: str) -> tuple:
    res = []
    for i, g in enumerate(grads):
        if g is None:
            if strict:
                raise RuntimeError(_ZEROS[stage].format(i=i))
            g = zeros_like(refs[i])
        elif strict and create_graph and not g.requires_grad:
            what = "hessian" if "double" in stage else "jacobian"
            raise RuntimeError(
                f"The {what} of the user-provided function is independent of input {i}. This is not allowed "
                f"in strict mode when create_graph=True."
            )
        res.append(g)
    return tuple(res)


def _seed(v, against: tuple, is_tuple: bool, create_graph: bool, fn_name: str, what: str) -> tuple | None:
    """v as a tuple checked against `against` (the outputs or the inputs); None where torch allows it."""
    if v is not None:
        _, v = _as_tuple(v, "v", fn_name)
        v = _preprocess(v, create_graph, need_graph=False)
        _validate_v(v, against, is_tuple)
        return v
    if len(against) != 1 or against[0].numel() != 1:
        raise RuntimeError(f"The vector v can only be None if {what} a single Tensor with a single element.")
    return None


def vjp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), v^T J): the vector-Jacobian product of func at inputs (torch's vjp)."""
    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "vjp")
        inputs = _preprocess(inputs, create_graph, need_graph=True)
        is_outputs_tuple, outputs = _as_tuple(func(*inputs), "outputs of the user-provided function", "vjp")
        _check_requires_grad(outputs, "outputs", strict)
        v = _seed(v, outputs, is_outputs_tuple, create_graph, "vjp", "the user-provided function returns")
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        res = _fill_in_zeros(_grad(outputs, inputs, v, create_graph), inputs, strict, create_graph, "back")
    return (_unpack(_postprocess(outputs, create_graph), is_outputs_tuple),
            _unpack(_postprocess(res, create_graph), is_inputs_tuple))


def jvp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), J v): the Jacobian-vector product of func at inputs (torch's jvp), by the double
    backward trick: the gradient, with respect to u, of the vector-Jacobian product u^T J."""
    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jvp")
        inputs = _preprocess(inputs, create_graph, need_graph=True)
        v = _seed(v, inputs, is_inputs_tuple, create_graph, "jvp", "the input to the user-provided function is")
        is_outputs_tuple, outputs = _as_tuple(func(*inputs), "outputs of the user-provided function", "jvp")
        _check_requires_grad(outputs, "outputs", strict)
        # the vector-Jacobian product is linear in u: u's values never reach the result (zeros will do)
        us = tuple(zeros_like(o).requires_grad_(True) for o in outputs)
        grad_inputs = _grad(outputs, inputs, us, create_graph=True)
        _check_requires_grad(grad_inputs, "grad_inputs", strict)
    with enable_grad() if create_graph else set_grad_enabled(is_grad_enabled()):
        res = _fill_in_zeros(_grad(grad_inputs, us, v, create_graph), outputs, strict, create_graph, "back_trick")
    return (_unpack(_postprocess(outputs, create_graph), is_outputs_tuple),
            _unpack(_postprocess(res, create_graph), is_outputs_tuple))


def jacobian(
    func: Callable,
    inputs,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    strategy: str = "reverse-mode",
):
    """The Jacobian of func at inputs (torch's jacobian): for output i and input j a tensor of shape
    output_i.shape + input_j.shape, nested as the outputs and inputs are. One vector-Jacobian product
    per output element; vectorize and strategy are accepted and give the same values."""
    if strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError(
            'Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your function has more '
            'outputs than inputs, "forward-mode" tends to be more performant. Otherwise, prefer to use '
            '"reverse-mode".'
        )
    if strategy == "forward-mode" and create_graph:
        raise NotImplementedError(
            'torch.autograd.functional.jacobian: `create_graph=True` and `strategy="forward-mode"` are not '
            'supported together (yet). Please either set `create_graph=False` or `strategy="reverse-mode"`.'
        )
    if strategy == "forward-mode" and strict:
        raise RuntimeError(
            'torch.autograd.functional.jacobian: `strict=True` and `strategy="forward-mode"` are not supported '
            'together (yet). Please either set `strict=False` or `strategy="reverse-mode"`.'
        )
    if strategy == "forward-mode" and not vectorize:
        raise NotImplementedError(
            "Computing Jacobian using forward-AD or forward-over-reverse Hessian is only implemented for "
            "`vectorize=True`."
        )
    if vectorize and strict:
        raise RuntimeError(
            "torch.autograd.functional.jacobian: `strict=True` and `vectorized=True` are not supported "
            "together. Please either set `strict=False` or `vectorize=False`."
        )
    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        inputs = _preprocess(inputs, create_graph, need_graph=True)
        is_outputs_tuple, outputs = _as_tuple(func(*inputs), "outputs of the user-provided function", "jacobian")
        _check_requires_grad(outputs, "outputs", strict)
        jac = tuple(_jacobian_of(i, out, inputs, create_graph, strict) for i, out in enumerate(outputs))
        return _unpack(_postprocess(jac, create_graph), (is_outputs_tuple, is_inputs_tuple))


def _jacobian_of(i: int, out: Tensor, inputs: tuple, create_graph: bool, strict: bool) -> tuple:
    """d out / d inputs, one tensor per input, row by row (one vector-Jacobian product per element)."""
    rows: tuple[list, ...] = tuple([] for _ in inputs)
    flat = out.reshape(-1)
    for j in range(out.numel()):
        vj = _grad((flat[j],), inputs, retain_graph=True, create_graph=create_graph)
        for k, (row, g, inp) in enumerate(zip(rows, vj, inputs)):
            if g is None:
                if strict:
                    raise RuntimeError(
                        f"Output {i} of the user-provided function is independent of input {k}. This is not "
                        f"allowed in strict mode."
                    )
                g = zeros_like(inp)
            elif strict and create_graph and not g.requires_grad:
                raise RuntimeError(
                    f"The jacobian of the user-provided function is independent of input {i}. This is not "
                    f"allowed in strict mode when create_graph=True."
                )
            row.append(g)
    return tuple(
        (stack(row, dim=0) if row else zeros_like(inp).reshape(0, *inp.shape)).reshape(*out.shape, *inp.shape)
        for row, inp in zip(rows, inputs)
    )


def hessian(
    func: Callable,
    inputs,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    outer_jacobian_strategy: str = "reverse-mode",
):
    """The Hessian of the scalar function func at inputs (torch's hessian): the Jacobian of its
    gradient; for tuple inputs a tuple of tuples, [i][j] of shape inputs[i].shape + inputs[j].shape."""
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError('Expected strategy to be either "forward-mode" or "reverse-mode".')

    def scalar(*inp):
        out = func(*inp)
        is_out_tuple, t_out = _as_tuple(out, "outputs of the user-provided function", "hessian")
        _check_requires_grad(t_out, "outputs", strict)
        if is_out_tuple or not isinstance(out, Tensor):
            raise RuntimeError("The function given to hessian should return a single Tensor")
        if out.numel() != 1:
            raise RuntimeError("The Tensor returned by the function given to hessian should contain a single element")
        return out.squeeze()

    def gradient(*inp):
        if outer_jacobian_strategy == "forward-mode":
            inp = tuple(t.requires_grad_(True) for t in inp)
        jac = jacobian(scalar, inp, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict)
        return jac

    res = jacobian(gradient, inputs, create_graph=create_graph, strict=strict, vectorize=vectorize,
                   strategy=outer_jacobian_strategy)
    return _unpack(res, (is_inputs_tuple, is_inputs_tuple))


def _scalar_output(func: Callable, inputs: tuple, strict: bool, fn_name: str) -> tuple:
    is_outputs_tuple, outputs = _as_tuple(func(*inputs), "outputs of the user-provided function", fn_name)
    _check_requires_grad(outputs, "outputs", strict)
    if is_outputs_tuple or not isinstance(outputs[0], Tensor):
        raise RuntimeError(f"The function given to {fn_name} should return a single Tensor")
    if outputs[0].numel() != 1:
        raise RuntimeError(f"The Tensor returned by the function given to {fn_name} should contain a single element")
    return is_outputs_tuple, outputs


_V_OF_INPUTS = "the input to the user-provided function is"


def vhp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), v^T H): the vector-Hessian product of the scalar function func (torch's vhp)."""
    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "vhp")
        inputs = _preprocess(inputs, create_graph, need_graph=True)
        v = _seed(v, inputs, is_inputs_tuple, create_graph, "vhp", _V_OF_INPUTS)
        is_outputs_tuple, outputs = _scalar_output(func, inputs, strict, "vhp")
        jac = _grad(outputs, inputs, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict)
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        res = _fill_in_zeros(_grad(jac, inputs, v, create_graph), inputs, strict, create_graph, "double_back")
    return (_unpack(_postprocess(outputs, create_graph), is_outputs_tuple),
            _unpack(_postprocess(res, create_graph), is_inputs_tuple))


def hvp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), H v): the Hessian-vector product of the scalar function func (torch's hvp), by
    the double backward trick on the gradient's vector-Jacobian product."""
    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "hvp")
        inputs = _preprocess(inputs, create_graph, need_graph=True)
        v = _seed(v, inputs, is_inputs_tuple, create_graph, "hvp", _V_OF_INPUTS)
        is_outputs_tuple, outputs = _scalar_output(func, inputs, strict, "hvp")
        jac = _grad(outputs, inputs, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict)
        us = tuple(zeros_like(t).requires_grad_(True) for t in inputs)
        double_back = _grad(jac, inputs, us, create_graph=True)
        _check_requires_grad(jac, "hessian", strict)
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        got = _grad(double_back, us, v, create_graph)
        res = _fill_in_zeros(got, inputs, strict, create_graph, "double_back_trick")
    return (_unpack(_postprocess(outputs, create_graph), is_outputs_tuple),
            _unpack(_postprocess(res, create_graph), is_inputs_tuple))


__all__ = ["hessian", "hvp", "jacobian", "jvp", "vhp", "vjp"]
