"""Pieces of piecewise ops (concat, pad) on the vector path of an elementwise kernel, a vector at a time.

On the vector path an element is i = v * vec + j: the vec elements of vector v are consecutive along
the collapsed domain's innermost dim, which holds whole vectors. Where a piecewise op's result is
walked contiguously along them from a multiple of vec, and each tested edge of its pieces (lo, hi of
the coordinate, and the coordinate's wrap-around) falls on a multiple of vec of the result's flat
index, all vec elements lie in the same piece: the piece's test is evaluated once per vector, in the
load phase (`pf{n}[u]`, a flag per vector slot u), and the element loop branches on that flag. An
input read inside such a piece that walks the vector contiguously from an aligned element (a
`blocked` view, as the other vector loads) is loaded as one aligned vector under the pieces' flags
(`vp{k}_{n}[u]`), instead of element by element under the per-element test: RoPE's
rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]) and its gradient's pads read x as 16-byte vectors.
The arithmetic per element is unchanged (the same values, rounded in the same order). Inputs read
under a piece that does not qualify (or nested in one) stay element by element where it holds."""

from __future__ import annotations

from collections.abc import Callable

from flame.codegen import views
from flame.ir.graph import Op, Value
from flame.ir.indexmap import IndexMap, contiguous_strides


class VectorPieces:
    """The per-vector flags and vector loads of one segment's vector path, made as its element loop is
    emitted (Emitter._select asks `flags`, then emits each piece between `enter` and `leave`; a
    guarded input asks `load`). `lines`: the load-phase statements (after the vector's coordinates
    c0.. of its first element), `decls`: their U-slot arrays, `vectored`: the inputs loaded so."""

    def __init__(self, vec: int, dims: tuple, view: dict, in_name: Callable[[Value], str],
                 blocked: Callable[[tuple[Value, IndexMap]], bool], identity: Callable[[tuple[Value, IndexMap]], bool],
                 streaming: bool):
        self.vec, self.dims, self.view, self.in_name = vec, dims, view, in_name
        self.blocked, self.identity, self.streaming = blocked, identity, streaming
        self.within: list[list[str] | None] = []  # per enclosing piece: its condition per vector, None: per element
        self.decls: list[str] = []
        self.lines: list[str] = []
        self.vectored: set[tuple[Value, IndexMap]] = set()
        self.count = 0

    def start(self, key: tuple[Value, IndexMap]) -> str:
        """The flat index of key's value at the vector's first element (in the load phase)."""
        return f"v * {self.vec}u" if self.identity(key) else views.offset_expr(self.view[key])

    def uniform(self, op: Op, m: IndexMap, bound: tuple) -> bool:
        """Does the test of `bound` of op's result at m hold for all or none of a vector's elements?"""
        axis, lo, hi = bound
        size, stride = op.out.shape[axis], contiguous_strides(op.out.shape)[axis]
        cv = self.view[(op.out, m)]
        if not all(isinstance(x, int) for x in (lo, hi, size, stride, cv.base, *cv.strides, *self.dims)):
            return False
        if not self.blocked((op.out, m)):
            return False  # the vector is not vec consecutive elements of the result from a multiple of vec
        edges = [stride * lo] * bool(lo) + [stride * hi] * (hi < size) + [stride * size] * bool(axis)
        return all(e % self.vec == 0 for e in edges)

    def flags(self, op: Op, m: IndexMap, tested: list[list[tuple]], test: Callable[[tuple, str], str]) -> list | None:
        """Per piece but the last of op at m (its tested bounds), the flag holding its test at the
        vector's first element; None where some test differs along a vector. test(bound, at): the
        test's text with op's result at flat index `at`."""
        if not all(self.uniform(op, m, b) for bounds in tested for b in bounds):
            return None
        out = []
        for bounds in tested:
            name = f"pf{self._fresh()}"
            self.decls.append(f"bool {name}[U];")
            self.lines.append(f"{name}[u] = {' && '.join(test(b, self.start((op.out, m))) for b in bounds)};")
            out.append(f"{name}[u]")
        return out

    def enter(self, flags: list[str] | None, k: int, last: bool) -> None:
        """Emitting piece k of an op whose pieces but the last hold where `flags` do (None: tested per
        element): the piece holds where none before it does and, but for the last, its own flag."""
        self.within.append(None if flags is None else [f"!{f}" for f in flags[:k]] + ([] if last else [flags[k]]))

    def leave(self) -> None:
        self.within.pop()

    def load(self, v: Value, m: IndexMap, k: int) -> str | None:
        """The element j of a vector of input k (v) at m loaded under the enclosing pieces' flags, or None
        where it is read element by element (a piece tested per element, a view off the vector)."""
        key = (v, m)
        if not self.within or None in self.within or not (self.identity(key) or self.blocked(key)):
            return None
        name = f"vp{k}_{self._fresh()}"
        t = f"flame_vec<{v.dtype.cuda_type}, {self.vec}>"
        p = self.in_name(v)
        # the offset summed first: where the piece holds it is in bounds, its base alone may not be
        at = f"({p})[v]" if self.identity(key) else f"({p} + ({views.offset_expr(self.view[key])}))[0]"
        load = f"reinterpret_cast<const {t}*>{at}"
        load = f"{name}[u] = " + (f"flame_ldcs(&{load});" if self.streaming else f"{load};")
        cond = [c for conds in self.within for c in conds]
        self.decls.append(f"{t} {name}[U];")
        self.lines.append(f"if ({' && '.join(cond)}) {load}" if cond else load)
        self.vectored.add(key)
        return f"{name}[u].v[j]"

    def _fresh(self) -> int:
        self.count += 1
        return self.count - 1
