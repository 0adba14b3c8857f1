"""flame.autograd: torch.autograd's names. `Function` (static forward(ctx, ...) / backward(ctx, ...), called
with .apply) becomes one op of the IR whose gradient is your backward, eagerly and inside @flame.compile
(frontend/custom_function.py); `grad` and `backward` are torch.autograd.grad / torch.autograd.backward
over the one autodiff pass (frontend/autograd_grad.py); `gradcheck` compares the gradients with central
finite differences, as torch.autograd.gradcheck. flame.grad / flame.value_and_grad are the functional
(JAX-shaped) forms, and flame.custom_vjp is JAX's custom_vjp. flame.autograd.functional is
torch.autograd.functional (vjp, jvp, jacobian, hessian, vhp, hvp), and flame.autograd.forward_ad is
torch.autograd.forward_ad (dual_level, make_dual, unpack_dual), its tangents computed by reverse mode.
flame.autograd.graph holds torch.autograd.graph's saved_tensors_hooks and save_on_cpu (frontend/saved.py).
detect_anomaly / set_detect_anomaly / is_anomaly_enabled are torch's anomaly mode: a gradient
computation returning NaN raises at its first such step, naming the backward op and the forward line it
derives from (frontend/anomaly.py)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np

from flame.autograd import forward_ad, function, functional, graph
from flame.errors import GradcheckError
from flame.frontend.anomaly import (
    detect_anomaly,
    is_anomaly_check_nan_enabled,
    is_anomaly_enabled,
    set_detect_anomaly,
)
from flame.frontend.autograd_grad import backward, grad
from flame.frontend.context import (  # noqa: F401  (torch.autograd's names of the grad modes)
    enable_grad,
    inference_mode,
    no_grad,
    set_grad_enabled,
    user_stacklevel,
)
from flame.frontend.custom_function import Function, FunctionCtx, custom_vjp, once_differentiable
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import f64


def _outputs(got) -> list:
    """The floating-point tensors among a function's results (a tensor, or a tuple/list of results)."""
    items = got if isinstance(got, (tuple, list)) else (got,)
    return [t for t in items if isinstance(t, Tensor) and t.dtype.is_float]


def _numerical(func: Callable, inputs: Sequence, i: int, eps: float) -> list[np.ndarray]:
    """d outputs / d inputs[i] by central differences: one (inputs[i].numel(), output.numel()) array
    per output, its rows the input's elements."""
    x = inputs[i]
    base = x.numpy().astype(np.float64)
    per_output: list[list[np.ndarray]] = []
    for k in range(base.size):
        sides = []
        for step in (eps, -eps):
            moved = base.copy()
            moved.flat[k] += step
            args = list(inputs)
            args[i] = Tensor(moved, dtype=x.dtype)
            with no_grad():
                sides.append([o.numpy().astype(np.float64).ravel() for o in _outputs(func(*args))])
        per_output = per_output or [[] for _ in sides[0]]
        for j, (p, m) in enumerate(zip(*sides)):
            per_output[j].append((p - m) / (2 * eps))
    return [np.stack(rows) for rows in per_output]


def _analytical(func: Callable, inputs: Sequence, diff: list[int]) -> list[list[np.ndarray]]:
    """[output][input] Jacobians (rows: the input's elements) from one backward per output element."""
    outs = _outputs(func(*inputs))
    wrt = [inputs[i] for i in diff]
    jac = [[np.zeros((w.numel(), o.numel())) for w in wrt] for o in outs]
    for j, o in enumerate(outs):
        if not o.requires_grad:
            continue
        for k in range(o.numel()):
            seed = np.zeros(o.numel())
            seed[k] = 1.0
            got = grad(o, wrt, Tensor(seed.reshape(o.shape), dtype=o.dtype), retain_graph=True, allow_unused=True)
            for n, gt in enumerate(got):
                if gt is not None:
                    jac[j][n][:, k] = gt.numpy().astype(np.float64).ravel()
    return jac


def gradcheck(
    func: Callable,
    inputs,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_backward_ad: bool = True,
    fast_mode: bool = False,
    masked: bool | None = None,
) -> bool:
    """torch.autograd.gradcheck: the gradients of func with respect to the inputs that require grad,
    from backward, against central finite differences (eps) in float64; each Jacobian entry must satisfy
    |analytical - numerical| <= atol + rtol * |numerical|. Returns True; on a mismatch raises
    flame.errors.GradcheckError naming the output and input with both Jacobians (or returns False when
    raise_exception=False). Use float64 inputs: in float32 the finite differences are too coarse. The
    check_* options PyTorch offers for its other modes are accepted; the backward check is what runs."""
    args = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    diff = [i for i, x in enumerate(args) if isinstance(x, Tensor) and x.requires_grad]
    if not diff:
        raise ValueError(
            "gradcheck expects at least one input tensor to require gradient, but none of the them "
            "have requires_grad=True."
        )
    for i in diff:
        if args[i].dtype != f64:
            warnings.warn(
                f"Input #{i} requires gradient and is not a double precision floating point. This check "
                f"will likely fail if all the inputs are not of double precision floating point.",
                stacklevel=user_stacklevel(),
            )
    analytical = _analytical(func, args, diff)
    for n, i in enumerate(diff):
        numerical = _numerical(func, args, i, eps)
        for j, (num, ana) in enumerate(zip(numerical, (a[n] for a in analytical))):
            if not np.allclose(ana, num, rtol=rtol, atol=atol):
                if not raise_exception:
                    return False
                raise GradcheckError(
                    f"Jacobian mismatch for output {j} with respect to input {i},\nnumerical:{num}\nanalytical:{ana}\n"
                )
    return True


__all__ = [
    "Function",
    "FunctionCtx",
    "GradcheckError",
    "backward",
    "custom_vjp",
    "detect_anomaly",
    "forward_ad",
    "function",
    "graph",
    "functional",
    "grad",
    "gradcheck",
    "is_anomaly_check_nan_enabled",
    "is_anomaly_enabled",
    "once_differentiable",
    "set_detect_anomaly",
]
