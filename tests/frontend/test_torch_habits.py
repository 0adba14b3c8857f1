"""The lines at the top of PyTorch training scripts work in flame as torch's: torch.backends' switches
(the TF32 ones reach flame's matmul and convolution settings), set_float32_matmul_precision, the random
number generators' states (get/set_rng_state, fork_rng, Generator.get_state), memory_format arguments
(accepted, no change of values), Module.half()/bfloat16(), torch.utils.checkpoint's module path with
checkpoint_sequential, set_printoptions, pin_memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame.errors import ArgumentError, ArgumentTypeError
from flame.frontend import tensor as tensor_module
from flame.runtime import cudnn_conv, matmul


@pytest.fixture
def switches(monkeypatch, determinism_settings):
    monkeypatch.setattr(matmul, "allow_tf32", False)
    monkeypatch.setattr(cudnn_conv, "allow_tf32", False)
    import flame.backends.cuda as bcuda
    import flame.backends.cudnn as bcudnn

    monkeypatch.setattr(bcuda.matmul, "_precision", "highest")
    for name in ("benchmark", "deterministic", "enabled"):
        monkeypatch.setattr(type(bcudnn), name, getattr(type(bcudnn), name))


def test_backends_switches_as_torchs(switches):
    import flame.backends.cudnn as cudnn

    cudnn.benchmark = True
    cudnn.deterministic = True
    assert flame.backends.cudnn.benchmark and flame.backends.cudnn.deterministic and cudnn.enabled
    assert not flame.backends.cuda.matmul.allow_tf32 and not cudnn.allow_tf32
    flame.backends.cuda.matmul.allow_tf32 = True
    assert matmul.allow_tf32 and flame.get_float32_matmul_precision() == "high"
    cudnn.allow_tf32 = True
    assert cudnn_conv.allow_tf32
    assert isinstance(cudnn.is_available(), bool) and (cudnn.version() is None) == (not cudnn.is_available())


@pytest.mark.parametrize("precision", ["highest", "high", "medium"])
def test_float32_matmul_precision_as_torchs(switches, precision):
    flame.set_float32_matmul_precision(precision)
    assert flame.get_float32_matmul_precision() == precision
    assert matmul.allow_tf32 == (precision != "highest")
    with pytest.raises(ValueError, match="precision must be one of"):
        flame.set_float32_matmul_precision("low")


def test_rng_state_restores_the_draws_eager_and_compiled():
    flame.manual_seed(5)
    state = flame.get_rng_state()
    assert state.dtype == flame.uint8 and tuple(state.shape) == (16,)
    a = flame.rand(6)

    @flame.compile
    def drop(x):
        return F.dropout(x, 0.5)

    x = flame.ones(64)
    d1 = drop(x)
    flame.set_rng_state(state)
    np.testing.assert_array_equal(flame.rand(6).numpy(), a.numpy())
    np.testing.assert_array_equal(drop(x).numpy(), d1.numpy())  # the compiled step draws from the restored stream
    assert flame.initial_seed() == 5 and flame.cuda.get_rng_state_all()[0].shape == (16,)


def test_fork_rng_leaves_the_generators_as_they_were():
    flame.manual_seed(1)
    before = flame.get_rng_state()
    with flame.random.fork_rng():
        flame.rand(10)
        flame.manual_seed(99)
        flame.rand(3)
    np.testing.assert_array_equal(flame.get_rng_state().numpy(), before.numpy())
    assert flame.initial_seed() == 1
    with flame.random.fork_rng(enabled=False):
        flame.rand(2)
    assert not np.array_equal(flame.get_rng_state().numpy(), before.numpy())


def test_generator_state_and_seed():
    g = flame.Generator(3)
    s = g.get_state()
    first = flame.rand(4, generator=g)
    g.set_state(s)
    np.testing.assert_array_equal(flame.rand(4, generator=g).numpy(), first.numpy())
    seed = g.seed()
    assert g.initial_seed() == seed >= 0
    with pytest.raises(ArgumentTypeError, match="16 bytes"):
        g.set_state(flame.zeros(16))
    assert flame.seed() == flame.initial_seed()


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 1, 4, 5), (1, 3, 1, 1), (2, 3, 4), (2, 3, 1, 4, 5)])
def test_memory_format_arguments_as_torchs(shape):
    x, t = flame.ones(*shape), torch.ones(*shape)
    for fmt, tfmt in ((flame.channels_last, torch.channels_last), (flame.channels_last_3d, torch.channels_last_3d),
                      (flame.contiguous_format, torch.contiguous_format)):
        if (fmt is flame.channels_last and len(shape) != 4) or (fmt is flame.channels_last_3d and len(shape) != 5):
            continue
        assert x.is_contiguous(memory_format=fmt) == t.is_contiguous(memory_format=tfmt), (shape, fmt)
        for y in (x.to(memory_format=fmt), x.contiguous(memory_format=fmt), x.clone(memory_format=fmt),
                  flame.zeros_like(x, memory_format=fmt), flame.rand_like(x, memory_format=fmt)):
            assert tuple(y.shape) == shape
    with pytest.raises(ArgumentError, match="preserve memory format"):
        x.contiguous(memory_format=flame.preserve_format)
    with pytest.raises(ArgumentTypeError, match="memory_format must be"):
        x.to(memory_format="channels_last")


def test_module_half_bfloat16_and_memory_format_as_torchs():
    m, t = nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
    assert m.to(memory_format=flame.channels_last) is m
    for fn in ("half", "bfloat16"):
        assert getattr(m, fn)() is m
        getattr(t, fn)()
        got = {n: v.dtype.name for n, v in m.state_dict().items()}
        want = {n: {"float16": "f16", "bfloat16": "bf16", "int64": "i64"}[str(v.dtype).split(".")[1]]
                for n, v in t.state_dict().items()}
        assert got == want


def test_utils_checkpoint_module_path_and_checkpoint_sequential():
    import flame.utils.checkpoint as cp
    from flame.utils.checkpoint import checkpoint, checkpoint_sequential

    assert checkpoint is cp.checkpoint
    rng = np.random.default_rng(0)
    layers = [nn.Linear(4, 4) for _ in range(5)]
    model = nn.Sequential(*layers, nn.Tanh())
    ref = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(5)], torch.nn.Tanh()).double()
    ref.load_state_dict({k: torch.from_numpy(v.numpy().astype(np.float64)) for k, v in model.state_dict().items()})
    x = rng.standard_normal((3, 4))
    xt = torch.tensor(x, requires_grad=True)
    want = torch.utils.checkpoint.checkpoint_sequential(ref, 3, xt, use_reentrant=False)
    want.sum().backward()

    def step(xf):
        y = checkpoint_sequential(model, 3, xf, use_reentrant=False)
        y.sum().backward()
        return y

    for run in (step, flame.compile(step)):
        model.zero_grad()
        xf = flame.tensor(x.astype(np.float32), requires_grad=True)
        np.testing.assert_allclose(run(xf).numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(model[0].weight.grad.numpy(), ref[0].weight.grad.numpy(), rtol=1e-4, atol=1e-6)
    assert flame.utils.checkpoint(lambda a: a * 2, flame.ones(2)).tolist() == [2.0, 2.0]


def test_set_printoptions_as_torchs(monkeypatch):
    monkeypatch.setattr(tensor_module, "_PRINT_OPTIONS", {})
    values = [1.23456, 2.0, -0.5]
    body = lambda r: r[r.index("[") : r.index("]") + 1]  # noqa: E731
    old = torch._tensor_str.PRINT_OPTS.__dict__.copy()
    try:
        for kwargs in (dict(precision=2), dict(precision=6), dict(profile="short"), dict(profile="default")):
            flame.set_printoptions(**kwargs)
            torch.set_printoptions(**kwargs)
            assert body(repr(flame.tensor(values))) == body(repr(torch.tensor(values))), kwargs
    finally:
        torch._tensor_str.PRINT_OPTS.__dict__.update(old)
    with pytest.raises(ValueError, match="profile"):
        flame.set_printoptions(profile="long")


def test_pin_memory_keeps_the_tensor():
    x = flame.ones(3)
    assert x.pin_memory() is x and not x.is_pinned()


def test_an_integer_tensor_of_one_element_is_a_python_index_as_torchs():
    """operator.index of an integer or bool tensor of one element is its value (a list's subscript, range's
    bound, a NumPy index), as torch's; a float tensor or several elements raise TypeError, as torch's."""
    import operator

    for make in (lambda L: L.tensor(2), lambda L: L.tensor([2], dtype=L.int32), lambda L: L.tensor(True)):
        assert operator.index(make(flame)) == operator.index(make(torch))
    assert [10, 20, 30][flame.tensor(1)] == 20 and list(range(flame.tensor(3))) == [0, 1, 2]
    assert np.arange(5)[flame.tensor(4)] == 4
    for make in (lambda L: L.tensor(1.0), lambda L: L.tensor([1, 2])):
        with pytest.raises(TypeError):
            operator.index(make(torch))
        with pytest.raises(TypeError, match="only integer tensors of a single element"):
            operator.index(make(flame))


@pytest.mark.parametrize("call", [
    lambda L, x: x.sum(L.tensor(1)),
    lambda L, x: x.mean((L.tensor(0), 2), keepdim=True),
    lambda L, x: x.unsqueeze(L.tensor(-1)),
    lambda L, x: x.cumsum(L.tensor(2)),
    lambda L, x: x.transpose(L.tensor(0), L.tensor(2)),
    lambda L, x: x.amax(L.tensor(1)),
])
def test_a_dim_given_as_an_integer_tensor_is_its_value(call):
    """torch reads a dim given as a one-element integer tensor as the int it holds (a DimError before)."""
    x = np.arange(24.0).reshape(2, 3, 4)
    want = call(torch, torch.tensor(x))
    got = call(flame, flame.tensor(x))
    assert got.shape == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_int_arguments_given_as_integer_tensors():
    """topk / kthvalue's k, split's size, chunk's count and roll's shift given as a one-element integer
    tensor are the int it holds, as torch reads them."""
    data = np.array([3.0, 1.0, 2.0, 5.0, 4.0])
    x, tx = flame.tensor(data), torch.tensor(data)
    k, tk = flame.tensor(2), torch.tensor(2)
    assert np.array_equal(x.topk(k).values.numpy(), tx.topk(tk).values.numpy())
    assert np.array_equal(x.kthvalue(k).values.numpy(), tx.kthvalue(tk).values.numpy())
    assert [p.numpy().tolist() for p in x.split(k)] == [p.numpy().tolist() for p in tx.split(tk)]
    assert [p.numpy().tolist() for p in x.chunk(k)] == [p.numpy().tolist() for p in tx.chunk(tk)]
    assert np.array_equal(x.roll(k).numpy(), tx.roll(tk).numpy())
    assert np.array_equal(flame.topk(x, k).indices.numpy(), torch.topk(tx, tk).indices.numpy())
