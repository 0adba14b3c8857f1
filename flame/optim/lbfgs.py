"""L-BFGS (torch.optim.LBFGS): a quasi-Newton method whose `step(closure)` re-evaluates the loss
several times, with torch's algorithm step for step (the two-loop recursion over `history_size`
curvature pairs, an optional strong-Wolfe line search, torch's stopping rules and state names).

Its loop is data-dependent (how many iterations and evaluations, the line search's branches all read
the loss and gradient values), so it runs eagerly: inside @flame.compile `step` raises a TraceError.
Scalars the loop branches on (the loss, directional derivatives, step lengths) are Python floats;
vectors (the flat gradient, the direction, the history) are flame tensors in the parameters' dtype."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from typing import Any

from flame.checkpoint import as_tensor
from flame.errors import CheckpointError, TraceError
from flame.frontend.context import current_trace, enable_grad, no_grad, user_location
from flame.frontend.creation import zeros
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import cat
from flame.optim.optimizer import Optimizer


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None) -> float:
    """The minimiser of the cubic through (x1, f1, g1) and (x2, f2, g2), clamped to `bounds` (default
    the interval [x1, x2]); the interval's midpoint when the cubic has no real minimiser (torch's)."""
    xmin_bound, xmax_bound = bounds if bounds is not None else ((x1, x2) if x1 <= x2 else (x2, x1))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1**2 - g1 * g2
    if d2_square < 0:
        return (xmin_bound + xmax_bound) / 2.0
    d2 = math.sqrt(d2_square)
    if x1 <= x2:
        min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(min_pos, xmin_bound), xmax_bound)


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """torch's strong-Wolfe line search along d from x (bracketing, then zoom by cubic interpolation).
    Returns (loss, flat gradient, step length, evaluations)."""
    d_norm = float(d.abs().max())
    g = g.clone()
    f_new, g_new = obj_func(x, t, d)
    ls_func_evals = 1
    gtd_new = float(g_new.dot(d))
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    ls_iter = 0
    while ls_iter < max_ls:  # bracket an interval containing a point satisfying the Wolfe criteria
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f, bracket_g = [t_prev, t], [f_prev, f_new], [g_prev, g_new.clone()]
            bracket_gtd = [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f, bracket_g = [t_prev, t], [f_prev, f_new], [g_prev, g_new.clone()]
            bracket_gtd = [gtd_prev, gtd_new]
            break
        min_step, max_step, tmp = t + 0.01 * (t - t_prev), t * 10, t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new.clone(), gtd_new
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = float(g_new.dot(d))
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]

    # zoom: refine the bracket until a point satisfies the criteria
    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1])
        # a trial too close to the bracket's ends twice running (or outside it) moves 0.1 of its width in
        hi, lo = max(bracket), min(bracket)
        eps = 0.1 * (hi - lo)
        if min(hi - t, t - lo) < eps:
            if insuf_progress or t >= hi or t <= lo:
                t = hi - eps if abs(t - hi) < abs(t - lo) else lo + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = float(g_new.dot(d))
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:  # Armijo fails, or not the lowest
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new.clone(), gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:  # the old high becomes the new low
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos], bracket_gtd[high_pos] = bracket_g[low_pos], bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_gtd[low_pos] = g_new.clone(), gtd_new
    return bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], ls_func_evals


class LBFGS(Optimizer):
    """torch.optim.LBFGS: one parameter group; `step(closure)` runs up to max_iter iterations (and
    max_eval closure evaluations) of L-BFGS with a fixed step `lr` or, with line_search_fn="strong_wolfe",
    a strong-Wolfe line search. The state (torch's names: func_evals, n_iter, d, t, old_dirs, old_stps,
    ro, H_diag, prev_flat_grad, prev_loss, al) is kept under the first parameter, as torch's.
    Eager only: the iteration count and the line search depend on the values."""

    torch_flags = ()

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1,
        max_iter: int = 20,
        max_eval: int | None = None,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-9,
        history_size: int = 100,
        line_search_fn: str | None = None,
    ):
        if isinstance(lr, Tensor):
            if lr.numel() != 1:
                raise ValueError("Tensor lr must be 1-element")
            lr = float(lr)
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = dict(
            lr=lr,
            max_iter=max_iter,
            max_eval=max_eval,
            tolerance_grad=tolerance_grad,
            tolerance_change=tolerance_change,
            history_size=history_size,
            line_search_fn=line_search_fn,
        )
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    def add_param_group(self, group: dict[str, Any]) -> None:
        """As torch's: a second group is refused (LBFGS optimizes one flat vector)."""
        if self.param_groups:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        super().add_param_group(group)

    # ---- the parameters as one flat vector ------------------------------------------------------------
    def _gather_flat_grad(self) -> Tensor:
        views = [
            zeros(p.numel(), dtype=p.dtype) if p.grad is None else p.grad.reshape(-1).to(p.dtype)
            for p in self._params
        ]
        return cat(views, 0)

    def _add_grad(self, step_size: float, update: Tensor) -> None:
        offset = 0
        for p in self._params:
            numel = p.numel()
            p.add_(update[offset : offset + numel].view_as(p), alpha=step_size)
            offset += numel

    def _directional_evaluate(self, closure, x: list[Tensor], t: float, d: Tensor) -> tuple[float, Tensor]:
        self._add_grad(t, d)
        with enable_grad():
            loss = float(closure())
        flat_grad = self._gather_flat_grad()
        for p, saved in zip(self._params, x):
            p.copy_(saved)
        return loss, flat_grad

    # ---- the step ------------------------------------------------------------------------------------
    def step(self, closure: Callable[[], Any]):  # type: ignore[override]
        """Up to max_iter L-BFGS iterations; `closure` (zero the gradients, compute the loss, call
        backward, return the loss) is called at least once. Returns the first evaluation's loss."""
        if current_trace.get() is not None:
            raise TraceError(
                "LBFGS.step cannot run inside @flame.compile: how many times it evaluates the closure and "
                "where its line search goes depend on the loss and gradient values, which a step being traced "
                "does not know; call opt.step(closure) eagerly (the closure itself may call a compiled "
                f"function)\n  at {user_location()}"
            )
        with no_grad():
            return self._step(closure)

    def _step(self, closure):
        group = self.param_groups[0]
        lr, max_iter, max_eval = float(group["lr"]), group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn, history_size = group["line_search_fn"], group["history_size"]
        if line_search_fn not in (None, "strong_wolfe"):
            raise RuntimeError("only 'strong_wolfe' is supported")
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        with enable_grad():
            orig_loss = closure()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if float(flat_grad.abs().max()) <= tolerance_grad:
            return orig_loss

        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        H_diag, prev_flat_grad, prev_loss = state.get("H_diag"), state.get("prev_flat_grad"), state.get("prev_loss")
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            # the descent direction
            if state["n_iter"] == 1:
                d, old_dirs, old_stps, ro, H_diag = -flat_grad, [], [], [], 1
            else:
                H_diag = self._update_history(
                    flat_grad, prev_flat_grad, d, t, old_dirs, old_stps, ro, H_diag, history_size
                )
                d = self._two_loop(state, flat_grad, old_dirs, old_stps, ro, H_diag, history_size)
            prev_flat_grad = flat_grad.clone()
            prev_loss = loss
            # the step length
            t = min(1.0, 1.0 / float(flat_grad.abs().sum())) * lr if state["n_iter"] == 1 else lr
            gtd = float(flat_grad.dot(d))
            if gtd > -tolerance_change:  # the directional derivative is below tolerance
                break
            ls_func_evals = 0
            if line_search_fn is not None:
                x_init = [p.clone() for p in self._params]

                def obj_func(x, t, d):
                    return self._directional_evaluate(closure, x, t, d)

                loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                    obj_func, x_init, t, d, loss, flat_grad, gtd, max_ls=max_eval - current_evals
                )
                self._add_grad(t, d)
                opt_cond = float(flat_grad.abs().max()) <= tolerance_grad
            else:
                self._add_grad(t, d)
                opt_cond = False
                if n_iter != max_iter:  # the last iteration's loss is not evaluated (torch's rule)
                    with enable_grad():
                        loss = float(closure())
                    flat_grad = self._gather_flat_grad()
                    opt_cond = float(flat_grad.abs().max()) <= tolerance_grad
                    ls_func_evals = 1
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals
            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if float((d * t).abs().max()) <= tolerance_change or abs(loss - prev_loss) < tolerance_change:
                break  # no progress

        state.update(
            d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=H_diag,
            prev_flat_grad=prev_flat_grad, prev_loss=prev_loss,
        )
        return orig_loss

    @staticmethod
    def _update_history(flat_grad, prev_flat_grad, d, t, old_dirs, old_stps, ro, H_diag, history_size):
        """Append the curvature pair (y, s) when y.s > 1e-10, dropping the oldest past history_size;
        returns the scale of the initial inverse Hessian, y.s / y.y of the newest pair."""
        y = flat_grad - prev_flat_grad
        s = d * t
        ys = y.dot(s)
        if float(ys) > 1e-10:
            if len(old_dirs) == history_size:
                del old_dirs[0], old_stps[0], ro[0]
            old_dirs.append(y)
            old_stps.append(s)
            ro.append(1.0 / ys)
            H_diag = ys / y.dot(y)
        return H_diag

    @staticmethod
    def _two_loop(state, flat_grad, old_dirs, old_stps, ro, H_diag, history_size) -> Tensor:
        """The L-BFGS two-loop recursion: the approximate inverse Hessian times the negative gradient."""
        if "al" not in state:
            state["al"] = [None] * history_size
        al = state["al"]
        q = -flat_grad
        for i in range(len(old_dirs) - 1, -1, -1):
            al[i] = old_stps[i].dot(q) * ro[i]
            q = q - old_dirs[i] * al[i]
        r = q * H_diag
        for i in range(len(old_dirs)):
            be_i = old_dirs[i].dot(r) * ro[i]
            r = r + old_stps[i] * (al[i] - be_i)
        return r

    # ---- saving and loading --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """torch.optim's layout: the state (torch's names) under index 0 once a step has run, the one
        parameter group's hyperparameters. Tensors are shared, lists are new lists."""
        sd = super().state_dict()
        sd["state"] = {i: st for i, st in sd["state"].items() if st}
        return sd

    def _saved_state(self, state: dict[str, Any]) -> dict[str, Any]:
        return {k: _copy_entry(v, share=True) for k, v in state.items()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Replace the state with a copy of a saved one (flame's or torch.optim.LBFGS's) and take its
        hyperparameters. Raises flame.CheckpointError when the layout does not fit; nothing changes then."""
        groups = state_dict.get("param_groups") if isinstance(state_dict, dict) else None
        saved = state_dict.get("state") if isinstance(state_dict, dict) else None
        if not isinstance(groups, list) or len(groups) != 1 or not isinstance(saved, dict):
            raise CheckpointError("LBFGS.load_state_dict: expected a dict with 'state' and one parameter group")
        if len(groups[0].get("params", [])) != len(self._params):
            raise CheckpointError(
                f"LBFGS.load_state_dict: the saved group has {len(groups[0].get('params', []))} parameters, "
                f"this optimizer {len(self._params)}"
            )
        try:
            loaded = {int(i): {k: _copy_entry(v, share=False) for k, v in st.items()} for i, st in saved.items()}
        except CheckpointError as e:
            raise CheckpointError(f"LBFGS.load_state_dict: {e}") from None
        index = {int(i): p for i, p in zip(groups[0]["params"], self._params)}
        if any(i not in index for i in loaded):
            raise CheckpointError("LBFGS.load_state_dict: the state names a parameter the saved group lacks")
        for p in self._params:
            self.state[p] = {}
        for i, st in loaded.items():
            self.state[index[i]] = st
        self.param_groups[0].update({k: copy.deepcopy(v) for k, v in groups[0].items() if k != "params"})


def _copy_entry(value: Any, share: bool) -> Any:
    """A state entry as saved (share=True: the same tensors) or loaded (a flame copy of each tensor,
    torch tensors included); lists element-wise, numbers as they are."""
    if isinstance(value, list):
        return [_copy_entry(v, share) for v in value]
    if value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, Tensor) and share:
        return value.detach()
    try:
        return as_tensor(value).clone()
    except Exception as e:  # noqa: BLE001 - the saved entry is user data of any kind
        raise CheckpointError(f"cannot load a state entry of type {type(value).__name__}") from e

