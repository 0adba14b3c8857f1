"""Mixed dtypes follow PyTorch (issue 15, deliverable 3): binary ops promote by torch.result_type (0-d
tensors and Python numbers only lift the category), bool arithmetic is logic, and where PyTorch raises
-- an integer, f64 or bf16 input to an f32 matmul/Linear -- flame raises naming the user's line, so an
f64 NumPy batch never runs an f32 model in f64. Oracle: torch on the CPU."""

import itertools

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn

DTYPES = ["bool", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
SHAPES = [((3,), (3,)), ((3,), ()), ((), (3,))]


def _pair(a, b, sa, sb):
    ta = (torch.arange(1, 4)[: (3 if sa else 1)].reshape(sa) % 2 == 1 if a == "bool"
          else torch.arange(1, 4)[: (3 if sa else 1)].reshape(sa).to(getattr(torch, a)))
    tb = (torch.arange(2, 5)[: (3 if sb else 1)].reshape(sb) % 2 == 0 if b == "bool"
          else torch.arange(2, 5)[: (3 if sb else 1)].reshape(sb).to(getattr(torch, b)))
    return ta, tb, flame.tensor(ta.float().numpy()).to(a), flame.tensor(tb.float().numpy()).to(b)


def _name(t) -> str:
    return str(t.dtype).removeprefix("torch.") if isinstance(t, torch.Tensor) else t.dtype.np_dtype.name


@pytest.mark.parametrize("a,b", list(itertools.product(DTYPES, DTYPES)))
def test_binary_ops_promote_like_torch(a, b):
    for sa, sb in SHAPES:
        ta, tb, fa, fb = _pair(a, b, sa, sb)
        for op, f_op, t_op in [("+", lambda x, y: x + y, torch.add), ("*", lambda x, y: x * y, torch.mul),
                               ("maximum", flame.maximum, torch.maximum), ("<", lambda x, y: x < y, torch.lt)]:
            want = t_op(ta, tb)
            got = f_op(fa, fb)
            assert _name(got) == _name(want), (op, a, sa, b, sb)
            np.testing.assert_array_equal(got.numpy().astype(np.float64), want.double().numpy())


@pytest.mark.parametrize("scalar", [2, 1.5, True])
def test_python_numbers_only_lift_the_category(scalar):
    for a in DTYPES:
        ta, _, fa, _ = _pair(a, a, (3,), (3,))
        if a == "bool" and not isinstance(scalar, bool):
            pass
        want, got = ta * scalar, fa * scalar
        assert _name(got) == _name(want), (a, scalar)
        np.testing.assert_array_equal(got.numpy().astype(np.float64), want.double().numpy())


def test_where_promotes_like_torch():
    cond = torch.tensor([True, False, True])
    for a, b in [(torch.ones(3, dtype=torch.float16), 2.5), (torch.ones(3, dtype=torch.int32), 2.5),
                 (torch.ones(3, dtype=torch.float32), torch.tensor(2.0, dtype=torch.float64)),
                 (1.0, 0)]:
        want = torch.where(cond, a, b)
        fl = [flame.tensor(x.float().numpy()).to(_name(x)) if isinstance(x, torch.Tensor) else x for x in (a, b)]
        got = flame.where(flame.tensor(cond.numpy()), *fl)
        assert _name(got) == _name(want)
        np.testing.assert_array_equal(got.numpy().astype(np.float64), want.double().numpy())


def test_subtracting_bools_raises_as_in_torch():
    with pytest.raises(RuntimeError):
        torch.ones(2, dtype=torch.bool) - torch.ones(2, dtype=torch.bool)
    with pytest.raises(flame.DTypeError, match=r"(?s)subtraction with a bool tensor.*test_dtypes_like_torch.py"):
        flame.ones(2, dtype="bool") - flame.ones(2, dtype="bool")


@pytest.mark.parametrize("a,b", [("bfloat16", "float32"), ("float32", "bfloat16"), ("int64", "float32"),
                                 ("float64", "float32"), ("float16", "float32")])
def test_matmul_of_two_dtypes_raises_like_torch(a, b):
    ta, tb = torch.ones(2, 3, dtype=getattr(torch, a)), torch.ones(3, 2, dtype=getattr(torch, b))
    with pytest.raises(RuntimeError):
        ta @ tb
    fa, fb = flame.ones(2, 3, dtype=a), flame.ones(3, 2, dtype=b)
    with pytest.raises(flame.DTypeError, match=r"(?s)same dtype.*test_dtypes_like_torch.py:\d+  fa @ fb"):
        fa @ fb


@pytest.mark.parametrize("batch", [np.ones((3, 4)), np.ones((3, 4), np.int64)])
def test_a_float64_or_integer_batch_to_an_f32_linear_raises_eagerly_and_compiled(batch):
    ref = torch.nn.Linear(4, 2)
    with pytest.raises(RuntimeError, match="dtype"):
        ref(torch.from_numpy(batch))
    model = nn.Linear(4, 2)
    with pytest.raises(flame.DTypeError, match=r"(?s)linear: input .* weight f32\[2, 4\].*  model\(flame.tensor"):
        model(flame.tensor(batch))

    @flame.compile
    def forward(x):
        return model(x)

    with pytest.raises(flame.DTypeError, match=r"(?s)different dtypes.*return model\(x\)"):
        forward(batch)
    np.testing.assert_allclose(forward(batch.astype(np.float32)).numpy(),
                               model(flame.tensor(batch.astype(np.float32))).numpy(), rtol=1e-6)


def test_inside_autocast_a_mixed_matmul_is_cast_like_torch():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = torch.ones(2, 3) @ torch.ones(3, 2, dtype=torch.bfloat16)
    with flame.autocast("cpu", dtype=flame.bf16):
        got = flame.ones(2, 3) @ flame.ones(3, 2, dtype="bf16")
        with pytest.raises(flame.DTypeError, match="same dtype"):
            flame.ones(2, 3, dtype="f64") @ flame.ones(3, 2)  # f64 is never cast: PyTorch raises too
    assert _name(got) == _name(want) == "bfloat16"
    np.testing.assert_array_equal(got.numpy().astype(np.float32), want.float().numpy())
