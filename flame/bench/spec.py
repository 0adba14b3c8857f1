"""What a benchmark case is, and how its inputs reach each framework.

A Case names its sizes (full and --quick), its inputs (`Input`: shape, dtype, whether it is state
that a step updates in place), the minimum bytes and flops one call must move or do, and one
factory per framework. A factory gets the sizes, the inputs already converted to that framework's
arrays, and `wrap` (flame.compile, torch.compile, jax.jit, or the identity for eager), and returns
a `Bound`: `call(*data)` runs one step on the data inputs (in Input order), `state()` lists the
arrays the step updates in place (compared as before/after deltas). Inputs are generated once with
CuPy on the GPU (NumPy on the reference executor) and handed to every framework by DLPack, so all
frameworks see the same numbers. torch, jax and flame's CUDA side are imported lazily.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Input:
    """One input of a case. high: integer labels in [0, high); scale, mean: std and mean of a normal
    draw; state: updated in place by the step (each framework gets its own copy; never rotated)."""

    shape: tuple[int, ...]
    dtype: str = "f32"
    high: int | None = None
    scale: float = 1.0
    mean: float = 0.0
    state: bool = False

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * {"f32": 4, "bf16": 2, "i64": 8}[self.dtype]


@dataclass
class Bound:
    """A case set up in one framework: call(*data) -> outputs; state() -> arrays updated in place."""

    call: Callable[..., Any]
    state: Callable[[], list] = field(default=lambda: [])


Factory = Callable[[dict, dict, Callable], Bound]
MAX_AUTOTUNE = "torch.compile max-autotune"  # the strongest torch.compile setting: a peer of every torch case


@dataclass(frozen=True)
class Case:
    """One row of the suite. inputs(sizes) -> name -> Input; min_bytes/min_flops(sizes) -> int.
    flame/torch/jax: factories (sizes, arrays, wrap) -> Bound. extra: further peers,
    name -> (framework, factory, mode) with mode "eager", "compiled" (default settings) or "max-autotune"
    (torch.compile's mode of that name). tol: largest accepted
    relative error of flame's outputs against PyTorch eager's; state_tol: the same for what one step
    changed in the state (p_after - p_before), None meaning tol."""

    name: str
    what: str
    sizes: Callable[[bool], dict]
    inputs: Callable[[dict], dict[str, Input]]
    min_bytes: Callable[[dict], int]
    flame: Factory
    torch: Factory | None = None
    jax: Factory | None = None
    min_flops: Callable[[dict], int] | None = None
    tol: float = 1e-4
    extra: dict[str, tuple[str, Factory, str]] = field(default_factory=dict)
    state_tol: float | None = None

    @property
    def stateful(self) -> bool:
        return any(i.state for i in self.inputs(self.sizes(True)).values())

    def peers(self) -> dict[str, tuple[str, Factory, str]]:
        """name -> (framework, factory, mode) of every peer this case has."""
        out = {}
        if self.torch is not None:
            out["torch"] = ("torch", self.torch, "eager")
            out["torch.compile"] = ("torch", self.torch, "compiled")
            out[MAX_AUTOTUNE] = ("torch", self.torch, "max-autotune")
        if self.jax is not None:
            out["jax"] = ("jax", self.jax, "compiled")
        out.update(self.extra)
        return out


# ---------------------------------------------------------------------------------------------
# generating inputs (CuPy on the GPU, NumPy on the reference executor)


def generate(inputs: dict[str, Input], xp, seed: int) -> dict[str, Any]:
    """Fresh random arrays (f32 normals or i64 labels; never zeros) for every input, on xp."""
    out = {}
    if xp.__name__ == "numpy":
        rng = xp.random.default_rng(seed)
        for name, i in inputs.items():
            if i.high is not None:
                out[name] = rng.integers(0, i.high, i.shape, dtype=xp.int64)
            else:
                out[name] = rng.standard_normal(i.shape, dtype=xp.float32) * xp.float32(i.scale)
            if i.mean:
                out[name] += xp.float32(i.mean)
        return out
    for k, (name, i) in enumerate(inputs.items()):
        rs = xp.random.RandomState(seed * 1000 + k)
        if i.high is not None:
            out[name] = rs.randint(0, i.high, size=i.shape, dtype=xp.int64)
        else:
            out[name] = rs.standard_normal(i.shape, dtype=xp.float32) * xp.float32(i.scale)
        if i.mean:
            out[name] += xp.float32(i.mean)
    return out


# ---------------------------------------------------------------------------------------------
# handing arrays to frameworks and back


def flame_inputs(case: Case, sizes: dict, seed: int = 0) -> dict:
    """name -> flame tensor for every input of `case` at `sizes`, drawn as the suite draws them (NumPy)."""
    import numpy as np

    inputs = case.inputs(sizes)
    return {n: to_flame(x, inputs[n].dtype, copy=False) for n, x in generate(inputs, np, seed).items()}


def _on_gpu(arr) -> bool:
    return hasattr(arr, "__cuda_array_interface__")


def to_flame(arr, dtype: str, copy: bool):
    """A flame Tensor of arr (zero-copy unless copy), cast to dtype."""
    import flame

    if copy:
        arr = arr.copy()
    t = flame.from_dlpack(arr) if _on_gpu(arr) else flame.Tensor(arr)
    return t.to(flame.bf16) if dtype == "bf16" else t


def torch_device(flame_device: str) -> str:
    """Where the torch peers run: on the GPU when flame does and torch has CUDA, else the CPU."""
    import torch

    return "cuda" if flame_device == "cuda" and torch.cuda.is_available() else "cpu"


def to_torch(arr, dtype: str, copy: bool, device: str):
    import torch

    if _on_gpu(arr) and device == "cuda":
        t = torch.from_dlpack(arr)
    else:
        t = torch.from_numpy(arr.get() if _on_gpu(arr) else arr)
    if copy:
        t = t.clone()
    return t.to(torch.bfloat16) if dtype == "bf16" else t


def to_jax(arr, dtype: str, copy: bool):
    """A JAX array of arr; integer labels become int32 (JAX's default without x64)."""
    import jax
    import jax.numpy as jnp

    if dtype == "i64":
        arr = arr.astype("int32")
    if _on_gpu(arr):
        try:
            x = jax.dlpack.from_dlpack(arr)
        except Exception:  # older JAX wants a capsule; failing that, go through the host
            try:
                x = jax.dlpack.from_dlpack(arr.toDlpack())
            except Exception:
                x = jax.device_put(arr.get())
    else:
        x = jnp.asarray(arr)
    if copy:
        x = jnp.array(x, copy=True)
    return x.astype(jnp.bfloat16) if dtype == "bf16" else x


def convert(framework: str, arr, dtype: str, copy: bool, torch_dev: str = "cpu"):
    """arr (CuPy/NumPy) as an array of `framework` ("flame", "torch" or "jax")."""
    if framework == "flame":
        return to_flame(arr, dtype, copy)
    if framework == "torch":
        return to_torch(arr, dtype, copy, torch_dev)
    return to_jax(arr, dtype, copy)


def as_xp(x, xp, copy: bool = False):
    """Any framework's array (or a flame Tensor) as an f32 xp array, for comparisons."""
    if x is None:
        return None
    mod = type(x).__module__.split(".")[0]
    if mod == "flame":
        import flame

        a = (x if x.dtype == flame.f32 else x.float())._data
    elif mod == "torch":
        t = x.detach()
        t = t.float() if t.is_floating_point() else t.double()
        if t.is_cuda and xp.__name__ == "cupy":
            a = xp.from_dlpack(t.contiguous())
        else:
            a = xp.asarray(t.cpu().numpy())
    elif mod in ("jax", "jaxlib"):
        import jax.numpy as jnp

        y = x.astype(jnp.float32)
        if xp.__name__ == "cupy":
            try:
                a = xp.from_dlpack(y)
            except Exception:
                a = xp.asarray(jnp.asarray(y).__array__())
        else:
            a = xp.asarray(y.__array__())
    else:
        a = xp.asarray(x)
    a = a.astype(xp.float32, copy=False)
    return a.copy() if copy else a


def flat_outputs(out) -> list:
    """A step's result as a flat list (None, one array, or nested tuples/lists of arrays)."""
    if out is None:
        return []
    if isinstance(out, (tuple, list)):
        return [y for o in out for y in flat_outputs(o)]
    return [out]


def rel_error(got: list, want: list, xp) -> float:
    """max over outputs of ||got - want|| / ||want|| in float64 (inf if shapes differ, nan if NaN)."""
    if len(got) != len(want):
        return math.inf
    worst = 0.0
    for g, w in zip(got, want):
        if tuple(g.shape) != tuple(w.shape):
            return math.inf
        g64, w64 = g.astype(xp.float64).ravel(), w.astype(xp.float64).ravel()
        num = float(xp.linalg.norm(g64 - w64))
        den = float(xp.linalg.norm(w64))
        err = num / den if den > 0 else num
        if math.isnan(err):
            return math.nan
        worst = max(worst, err)
    return worst
