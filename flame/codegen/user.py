"""The lowering of a raw user kernel (flame.cuda.kernel: an "opaque" op with the `user` trait): the user's
__global__ body wrapped into a kernel with the op ABI (its inputs, then `out`, under the user's names),
launched on the user's grid; and `compile_check`, which renders and compiles a user op for given input
types with NVRTC so that a mistake in the user's code is told at the user's call, in the user's lines."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from flame.codegen import cuda_c
from flame.codegen.elementwise import lower_elementwise
from flame.codegen.kernel import Kernel, finish, header, shape_tag
from flame.codegen.user_source import kernel_body
from flame.errors import ArgumentError
from flame.ir import symbolic
from flame.ir.graph import Op, Value
from flame.ir.registry import get
from flame.ir.types import TensorType


def lower_user(op: Op) -> list[Kernel]:
    """One launch of the user's kernel: `extern "C" __global__ void NAME(const T* x, ..., T* out)` around
    the user's body, on the (blocks, threads) of the user's grid rule; none for an empty output. The
    kernel may read any input element from any thread, so its output never shares an input's bytes."""
    code = get(op.name).user
    if op.out.type.numel == 0:
        return []
    blocks, threads = _launch(op)
    named = [(p, v.dtype.cuda_type, v.shape) for p, v in zip(code.params, op.inputs)]
    named.append(("out", op.out.dtype.cuda_type, op.out.shape))
    params = [f"const {c}* __restrict__ {p}" for p, c, _ in named[:-1]] + [f"{named[-1][1]}* __restrict__ out"]
    dtypes = {op.out.dtype, *(v.dtype for v in op.inputs)}
    source = "\n".join(
        [
            header(op, f"{code.what}: the user's kernel"),
            *cuda_c.includes(dtypes),
            f'extern "C" __global__ void __launch_bounds__({threads}) FLAME_KERNEL_NAME({", ".join(params)}) {{',
            kernel_body(op.name, code, named) + "}",
            "",
        ]
    )
    stem = f"{op.name}_{op.out.dtype.name}_{shape_tag(op.out.shape)}"
    return [dataclasses.replace(finish(stem, source, blocks, threads, len(op.inputs)), in_place_safe=False)]


def _launch(op: Op) -> tuple[int, int]:
    """(blocks, threads) from the user's grid rule, given plain sizes. With a dynamic dim
    (flame.ir.symbolic) the blocks are a function of the size (the rule asked again at each size), and
    the threads, which the kernel's __launch_bounds__ holds, must be the same at every size."""
    code = get(op.name).user
    types = [v.type for v in op.inputs] + [op.out.type]

    def at(s: int | None):
        plain = [
            TensorType(tuple(int(d) if s is None else symbolic.value_at(d, s) for d in t.shape), t.dtype) for t in types
        ]
        return code.launch(plain[:-1], plain[-1])

    blocks, threads = at(None)
    if not any(isinstance(d, (symbolic.SymInt, symbolic.SizeExpr)) for t in types for d in t.shape):
        return blocks, threads

    def blocks_at(s: int) -> int:
        b, t = at(s)
        if t != threads:
            raise ArgumentError(
                f"{code.what}: its grid rule gives {t} threads per block at size {s} of a dynamic "
                f"dim and {threads} at another; the threads must not depend on the size"
            )
        return b

    return symbolic.SizeExpr(blocks, f"{op.name}_grid", blocks_at), threads


def render(name: str, in_types: Sequence[TensorType]) -> list[Kernel]:
    """The kernels of user op `name` alone on inputs of `in_types` (as the plan would launch it)."""
    opdef = get(name)
    op = Op(name, tuple(Value(t) for t in in_types), {}, opdef.infer(list(in_types)))
    return lower_elementwise(op) if opdef.category == "elementwise" else lower_user(op)


def compile_check(name: str, in_types: Sequence[TensorType], arch: str) -> None:
    """Compile user op `name` for `in_types` with NVRTC (through its disk cache, so the executor's compile
    of the same source is a cache hit); a FlameError quoting the user's lines if it does not compile."""
    from flame.codegen.nvrtc import compile_cubin

    for k in render(name, in_types):
        compile_cubin(k.source, arch, name_hint=k.name)
