"""Plan steps describe themselves (reads, writes, renaming, printing), every executor has a handler
for every step type, and the layers import one way: runtime/ reads only flame.plan.steps of the
plan package, passes/ nothing of runtime/."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import flame
from flame.ir import Builder, Graph, TensorType, dtype_of
from flame.plan import steps
from flame.plan.steps import Alias, Copy, KernelLaunch, MatmulCall, Step
from flame.runtime import cuda_steps, reference

ROOT = Path(flame.__file__).parent


def _matmul_op():
    g = Graph("mm")
    b = Builder(g)
    x = g.add_input(TensorType((2, 5, 3), dtype_of("f32")))
    w = g.add_input(TensorType((3, 4), dtype_of("f32")))
    b.matmul(x, w)
    return g, g.ops[-1]


def test_steps_state_what_they_read_and_write():
    _, op = _matmul_op()
    k = KernelLaunch("k", "", 1, 32, 0, (1, 2, 3, 4), 2, (op,), n_outputs=1)
    assert (k.reads, k.writes, k.outputs, k.scratch) == ((1, 2), (3, 4), (3,), (4,))
    mm = MatmulCall.of(op, 1, 2, 3, epilogue="bias", bias=5)
    assert (mm.reads, mm.writes, mm.ops) == ((1, 2, 5), (3,), (op,))
    assert (mm.m, mm.n, mm.k, mm.batch_a, mm.batch_b, mm.batch) == (5, 4, 3, (2,), (), (2,))
    assert (Copy(1, 2).reads, Copy(1, 2).writes) == ((1,), (2,))
    alias = Alias(1, 2, op)
    assert (alias.reads, alias.writes, alias.touches, alias.ops) == ((), (), (1, 2), ())


def test_renamed_rewrites_every_buffer_field():
    _, op = _matmul_op()
    assert KernelLaunch("k", "", 1, 32, 0, (1, 2, 1), 2, (op,)).renamed(1, 9).args == (9, 2, 9)
    mm = MatmulCall.of(op, 1, 2, 3, epilogue="bias", bias=1).renamed(1, 9)
    assert (mm.a, mm.b, mm.out, mm.bias) == (9, 2, 3, 9)
    assert MatmulCall.of(op, 1, 2, 3).renamed(3, 9).bias is None
    assert Copy(1, 2).renamed(2, 9) == Copy(1, 9)


def test_matmul_call_prints_its_operands_and_epilogue():
    g, op = _matmul_op()
    line = MatmulCall.of(op, 0, 1, 3, tb=True, epilogue="bias_relu", bias=2).format(g.numbering())
    assert line == ("b3 = call matmul (b0, b1, b2) {m=5, n=4, k=3, batch_a=[2], batch_b=[], batch=[2], ta=false, "
                    "tb=true, epilogue=\"bias_relu\"}  # %2 = matmul %0, %1 : f32[2,5,4]")


def _step_types() -> set[type]:
    return {c for _, c in inspect.getmembers(steps, inspect.isclass)
            if issubclass(c, Step) and c.__module__ == steps.__name__ and "__dataclass_fields__" in vars(c)}


@pytest.mark.parametrize("table", [cuda_steps.STEP_HANDLERS, reference.STEP_HANDLERS], ids=["cuda", "reference"])
def test_every_executor_handles_every_step_type(table):
    assert set(table) == _step_types()


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_layers_import_one_way():
    for path in (ROOT / "runtime").glob("*.py"):
        plan = {m for m in _imports(path) if m.startswith("flame.plan")}
        assert plan <= {"flame.plan.steps"}, f"{path.name} imports {plan}"
    for path in (ROOT / "passes").glob("*.py"):
        runtime = {m for m in _imports(path) if m.startswith("flame.runtime")}
        assert not runtime, f"{path.name} imports {runtime}"
