"""flame.set_default_dtype / flame.get_default_dtype against torch's: which dtypes it takes (and the
TypeError for any other), what the default decides (floating factories without a dtype, a Python float
in promotion, an integer tensor in a floating op, nn layers' parameters and buffers, torch.optim's
scalar state, distributions' numbers) and what keeps its own dtype (a NumPy array, *_like). An f64 MLP
made through the default trains as torch's does, eager and compiled; a compiled function that read the
default traces again when it changes. Every test leaves both defaults as it found them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
import flame.nn.functional as F
import flame.optim as optim

_TORCH = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.bool: "bool",
}
FLOATS = [
    (flame.float64, torch.float64),
    (flame.float16, torch.float16),
    (flame.bfloat16, torch.bfloat16),
    (flame.float32, torch.float32),
]


@pytest.fixture(autouse=True)
def _restore_defaults():
    """The default is one setting of the process, in flame as in torch: each test puts both back."""
    before = flame.get_default_dtype(), torch.get_default_dtype()
    yield
    flame.set_default_dtype(before[0])
    torch.set_default_dtype(before[1])


def _set(fd, td):
    flame.set_default_dtype(fd)
    torch.set_default_dtype(td)


def _same(got: flame.Tensor, want: torch.Tensor, values: bool = True, tol: float | None = None):
    """got has want's dtype (and, with values, its values: to within tol, by default two units of the
    dtype's rounding, as torch's CPU kernels fuse some multiply-adds)."""
    if tol is None:
        tol = 2 * torch.finfo(want.dtype).eps if want.dtype.is_floating_point else 0.0
    assert got.dtype.name == _TORCH[want.dtype], (got.dtype, want.dtype)
    assert tuple(got.shape) == tuple(want.shape)
    if values:
        np.testing.assert_allclose(got.numpy().astype(np.float64), want.double().numpy(), rtol=tol, atol=tol)


def test_the_default_starts_as_torchs_and_set_get_round_trip():
    assert flame.get_default_dtype() is flame.float32 and torch.get_default_dtype() is torch.float32
    for fd, td in FLOATS:
        _set(fd, td)
        assert flame.get_default_dtype() is fd
        assert _TORCH[torch.get_default_dtype()] == fd.name


# ---- factories -------------------------------------------------------------------------------------
# (name, flame call, torch call, compare values): each made without a dtype, so the default decides
FACTORIES = [
    ("zeros", lambda m: m.zeros(2, 3), True),
    ("ones", lambda m: m.ones((2, 3)), True),
    ("empty", lambda m: m.empty(4), False),
    ("full float fill", lambda m: m.full((2, 2), 1.5), True),
    ("arange float end", lambda m: m.arange(5.0), True),
    ("arange float step", lambda m: m.arange(0, 2, 0.25), True),
    ("linspace", lambda m: m.linspace(-1, 1, 7), True),
    ("logspace", lambda m: m.logspace(0, 2, 5), True),
    ("eye", lambda m: m.eye(3, 4), True),
    ("tensor of floats", lambda m: m.tensor([[1.5, -2.0], [0.25, 3.0]]), True),
    ("tensor of a float", lambda m: m.tensor(2.5), True),
    ("tensor of floats and ints", lambda m: m.tensor([1, 2.5, True]), True),
    ("tensor of nothing", lambda m: m.tensor([]), True),
    ("as_tensor of floats", lambda m: m.as_tensor([0.5, 1.5]), True),
    ("as_tensor of a float", lambda m: m.as_tensor(-0.75), True),
    ("rand", lambda m: m.rand(3, 2), False),
    ("randn", lambda m: m.randn(5), False),
]


@pytest.mark.parametrize("fd, td", FLOATS, ids=lambda d: str(d))
@pytest.mark.parametrize("name, make, values", FACTORIES, ids=[f[0] for f in FACTORIES])
def test_floating_factories_take_the_default(fd, td, name, make, values):
    _set(fd, td)
    _same(make(flame), make(torch), values)


# made from something of a known dtype: the default does not decide
KEEPERS = [
    ("zeros_like f32", lambda m, f32: m.zeros_like(m.zeros(2, dtype=f32))),
    ("ones_like f32", lambda m, f32: m.ones_like(m.zeros(2, dtype=f32))),
    ("full_like f32", lambda m, f32: m.full_like(m.zeros(2, dtype=f32), 2.5)),
    ("empty_like f32", lambda m, f32: m.empty_like(m.zeros(2, dtype=f32))),
    ("rand_like f32", lambda m, f32: m.rand_like(m.zeros(2, dtype=f32))),
    ("randn_like f32", lambda m, f32: m.randn_like(m.zeros(2, dtype=f32))),
    ("tensor of a NumPy f32 array", lambda m, f32: m.tensor(np.array([1.5, 2.5], np.float32))),
    ("tensor of a NumPy f32 scalar", lambda m, f32: m.tensor(np.float32(1.5))),
    ("as_tensor of a NumPy f32 array", lambda m, f32: m.as_tensor(np.array([1.5], np.float32))),
    ("from_numpy f32", lambda m, f32: m.from_numpy(np.array([1.5], np.float32))),
    ("full int fill", lambda m, f32: m.full((2,), 3)),
    ("arange ints", lambda m, f32: m.arange(4)),
    ("tensor of ints", lambda m, f32: m.tensor([1, 2])),
    ("tensor of a bool", lambda m, f32: m.tensor(True)),
    ("randint", lambda m, f32: m.randint(0, 5, (3,))),
    ("zeros f32", lambda m, f32: m.zeros(2, dtype=f32)),
    ("float()", lambda m, f32: m.tensor([1, 2]).float()),
]


@pytest.mark.parametrize("name, make", KEEPERS, ids=[k[0] for k in KEEPERS])
def test_what_has_a_dtype_keeps_it(name, make):
    _set(flame.float64, torch.float64)
    _same(make(flame, flame.float32), make(torch, torch.float32), values=False)


def test_a_numpy_f64_array_stays_f64_under_an_f32_default():
    a = np.array([1.0 / 3.0, 2.0])
    _same(flame.tensor(a), torch.tensor(a))
    _same(flame.tensor([np.float64(1 / 3), 2.0]), torch.tensor([np.float64(1 / 3), 2.0]))
    _set(flame.float64, torch.float64)
    _same(flame.tensor([np.float32(1.5), 2.0]), torch.tensor([np.float32(1.5), 2.0]))  # f32 with a float: f64


# ---- promotion -------------------------------------------------------------------------------------
PROMOTIONS = [
    ("int * float", lambda m, x: x * 1.5),
    ("float - int", lambda m, x: 0.25 - x),
    ("int + NumPy f32 scalar", lambda m, x: x + np.float32(1.5)),
    ("bool * float", lambda m, x: (x > 1) * 1.5),
    ("int / int", lambda m, x: x / (x + 1)),
    ("int / python int", lambda m, x: x / 4),
    ("int true_divide", lambda m, x: m.true_divide(x, 3)),
    ("exp of int", lambda m, x: x.exp()),
    ("sqrt of int", lambda m, x: m.sqrt(x)),
    ("sigmoid of int", lambda m, x: m.sigmoid(x)),
    ("log1p of int", lambda m, x: m.log1p(x)),
    ("lgamma of int", lambda m, x: m.lgamma(x + 1)),
    ("asin of int", lambda m, x: m.asin(x - 1)),
    ("atan2 of ints", lambda m, x: m.atan2(x, x + 1)),
    ("copysign of ints", lambda m, x: m.copysign(x, -x)),
    ("where int and float", lambda m, x: m.where(x > 1, x, 0.5)),
    ("pow int ** float", lambda m, x: x**0.5),
    ("int tensor + 0-d f32 tensor", lambda m, x: x + m.tensor(0.5, dtype=m.float32)),
    ("f32 tensor * float", lambda m, x: x.float() * 1.5),
    ("f32 tensor * NumPy f64 scalar", lambda m, x: x.float() * np.float64(1.5)),
    ("f16 tensor * float", lambda m, x: x.half() * 0.5),
]


@pytest.mark.parametrize("fd, td", FLOATS[:1] + FLOATS[-1:], ids=lambda d: str(d))
@pytest.mark.parametrize("name, op", PROMOTIONS, ids=[p[0] for p in PROMOTIONS])
def test_python_floats_and_integer_promotion_take_the_default(fd, td, name, op):
    _set(fd, td)
    want = op(torch, torch.arange(4))
    _same(op(flame, flame.arange(4)), want, tol=1e-15 if want.dtype == torch.float64 else 1e-6)
    compiled = flame.compile(lambda x: op(flame, x))
    _same(compiled(flame.arange(4)), want, tol=1e-15 if want.dtype == torch.float64 else 1e-6)


def test_result_type_follows_the_default():
    _set(flame.float64, torch.float64)
    x = flame.arange(3, dtype=flame.int32)
    assert flame.result_type(x, 1.5).name == _TORCH[torch.result_type(torch.arange(3, dtype=torch.int32), 1.5)]
    assert flame.result_type(x, 1) is flame.int32
    assert flame.result_type(flame.zeros(2, dtype=flame.float16), 1.5) is flame.float16


# ---- nn --------------------------------------------------------------------------------------------
LAYERS = [
    ("Linear", lambda m: m.nn.Linear(3, 4)),
    ("Bilinear", lambda m: m.nn.Bilinear(2, 3, 4)),
    ("Conv1d", lambda m: m.nn.Conv1d(2, 3, 3)),
    ("Conv2d", lambda m: m.nn.Conv2d(2, 3, 3)),
    ("ConvTranspose2d", lambda m: m.nn.ConvTranspose2d(2, 3, 3)),
    ("LayerNorm", lambda m: m.nn.LayerNorm(4)),
    ("RMSNorm", lambda m: m.nn.RMSNorm(4)),
    ("GroupNorm", lambda m: m.nn.GroupNorm(2, 4)),
    ("BatchNorm2d", lambda m: m.nn.BatchNorm2d(3)),
    ("InstanceNorm1d", lambda m: m.nn.InstanceNorm1d(3, affine=True, track_running_stats=True)),
    ("Embedding", lambda m: m.nn.Embedding(5, 3, padding_idx=0)),
    ("EmbeddingBag", lambda m: m.nn.EmbeddingBag(5, 3)),
    ("PReLU", lambda m: m.nn.PReLU()),
    ("GRU", lambda m: m.nn.GRU(3, 4)),
    ("LSTM", lambda m: m.nn.LSTM(3, 4, proj_size=2)),
    ("RNNCell", lambda m: m.nn.RNNCell(3, 4)),
    ("MultiheadAttention", lambda m: m.nn.MultiheadAttention(4, 2, add_bias_kv=True)),
    ("TransformerEncoderLayer", lambda m: m.nn.TransformerEncoderLayer(4, 2, 8)),
]


@pytest.mark.parametrize("name, make", LAYERS, ids=[layer[0] for layer in LAYERS])
def test_layers_make_parameters_and_buffers_in_the_default(name, make):
    _set(flame.float64, torch.float64)
    got, want = make(flame), make(torch)
    got_dtypes = {k: v.dtype.name for k, v in got.state_dict().items()}
    want_dtypes = {k: _TORCH[v.dtype] for k, v in want.state_dict().items()}
    assert got_dtypes == want_dtypes


def test_a_causal_mask_and_nn_init_follow_the_default():
    _set(flame.float64, torch.float64)
    _same(nn.Transformer.generate_square_subsequent_mask(3), torch.nn.Transformer.generate_square_subsequent_mask(3))
    w = flame.empty(3, 4)
    for init in (nn.init.kaiming_uniform_, nn.init.xavier_normal_, nn.init.orthogonal_, nn.init.zeros_):
        assert init(w).dtype is flame.float64 and w.dtype is flame.float64


def test_an_explicit_dtype_beats_the_default():
    _set(flame.float64, torch.float64)
    assert nn.Linear(2, 2, dtype=flame.float32).weight.dtype is flame.float32
    assert flame.zeros(2, dtype=flame.float32).dtype is flame.float32
    assert flame.linspace(0, 1, 3, dtype=flame.float32).dtype is flame.float32


def test_optimizer_scalar_state_and_distributions_follow_the_default():
    """torch.optim keeps ASGD's eta and mu, NAdam's mu_product and a saved step count in f64 under an
    f64 default (f32 otherwise); torch.distributions makes Python numbers default-dtype tensors."""
    _set(flame.float64, torch.float64)
    for make, tmake, keys in (
        (optim.ASGD, torch.optim.ASGD, ("eta", "mu", "step")),
        (optim.NAdam, torch.optim.NAdam, ("mu_product", "step")),
    ):
        p, tp = nn.Parameter(flame.ones(2)), torch.nn.Parameter(torch.ones(2))
        opt, topt = make([p], lr=0.1), tmake([tp], lr=0.1)
        p.grad, tp.grad = flame.ones(2), torch.ones(2)
        opt.step()
        topt.step()
        got, want = opt.state_dict()["state"][0], topt.state_dict()["state"][0]
        assert {k: got[k].dtype.name for k in keys} == {k: _TORCH[want[k].dtype] for k in keys}
        np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=1e-15)
    normal = flame.distributions.Normal(0.0, 1.0)
    assert normal.loc.dtype.name == _TORCH[torch.distributions.Normal(0.0, 1.0).loc.dtype]


# ---- training an f64 MLP made through the default ---------------------------------------------------
def _mlp_pair():
    """An MLP made without dtypes under an f64 default, in flame and in torch, with flame's weights."""
    _set(flame.float64, torch.float64)
    model = nn.Sequential(nn.Linear(5, 16, generator=flame.Generator(3)), nn.Tanh(), nn.Linear(16, 3))
    ref = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    assert all(p.dtype is flame.float64 for p in model.parameters())
    ref.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in model.state_dict().items()})
    return model, ref


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_an_f64_mlp_trains_as_torchs(compiled):
    model, ref = _mlp_pair()
    opt = optim.Adam(model.parameters(), lr=0.05)
    topt = torch.optim.Adam(ref.parameters(), lr=0.05)
    rng = np.random.default_rng(0)
    xs, ys = rng.standard_normal((3, 8, 5)).tolist(), rng.integers(0, 3, (3, 8))  # Python floats: the default

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y) + 0.5 * (model(x) ** 2).mean()
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        opt.step()
        return loss, grads

    run = flame.compile(step) if compiled else step
    for x, y in zip(xs, ys):
        fx, tx = flame.tensor(x), torch.tensor(x)
        assert fx.dtype is flame.float64
        loss, grads = run(fx, flame.tensor(y))
        topt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(ref(tx), torch.tensor(y)) + 0.5 * (ref(tx) ** 2).mean()
        tloss.backward()
        tgrads = [p.grad.clone() for p in ref.parameters()]
        topt.step()
        _same(loss, tloss.detach(), tol=1e-12)
        for g, tg in zip(grads, tgrads):
            _same(g, tg, tol=1e-12)
    for p, tp in zip(model.parameters(), ref.parameters()):
        _same(p.detach(), tp.detach(), tol=1e-12)


# ---- @flame.compile --------------------------------------------------------------------------------
def test_a_compiled_function_that_read_the_default_traces_again_when_it_changes():
    @flame.compile
    def f(x):
        return x * 0.5 + flame.ones(3)  # an integer tensor times a float, and a factory: both read the default

    x = flame.arange(3)
    assert f(x).dtype is flame.float32
    assert f(x).dtype is flame.float32 and f.stats().traces == 1
    flame.set_default_dtype(flame.float64)
    with pytest.warns(flame.RecompileWarning, match=r"the default dtype .*flame.f32 -> flame.f64"):
        out = f(x)
    assert out.dtype is flame.float64 and f.stats().traces == 2
    np.testing.assert_array_equal(out.numpy(), [1.0, 1.5, 2.0])
    flame.set_default_dtype(flame.float32)
    assert f(x).dtype is flame.float32 and f.stats().traces == 2  # the f32 trace is still cached


def test_a_compiled_function_that_never_read_the_default_keeps_its_trace():
    @flame.compile
    def f(x):
        return x * 0.5 + 1  # an f32 tensor: a Python float never decides its dtype

    x = flame.ones(3, dtype=flame.float32)
    f(x)
    flame.set_default_dtype(flame.float64)
    assert f(x).dtype is flame.float32 and f.stats().traces == 1


def test_setting_the_default_inside_a_compiled_function_raises():
    @flame.compile
    def f(x):
        flame.set_default_dtype(flame.float64)
        return x + 1

    with pytest.raises(flame.TraceError, match="set the default before calling"):
        f(flame.ones(2))
    assert flame.get_default_dtype() is flame.float32


# ---- bad arguments ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fd, td",
    [
        (flame.int32, torch.int32),
        (flame.int64, torch.int64),
        (flame.bool, torch.bool),
        (flame.float8_e4m3fn, torch.float8_e4m3fn),
    ],
    ids=lambda d: str(d),
)
def test_a_non_floating_dtype_is_a_type_error(fd, td):
    with pytest.raises(TypeError):
        torch.set_default_dtype(td)
    with pytest.raises(TypeError, match="only floating-point types are supported as the default type"):
        flame.set_default_dtype(fd)
    assert flame.get_default_dtype() is flame.float32


@pytest.mark.parametrize("bad", ["float64", float, np.float64, None, 1], ids=repr)
def test_what_is_not_a_dtype_is_a_type_error(bad):
    with pytest.raises(TypeError, match="invalid dtype object: only floating-point types"):
        torch.set_default_dtype(bad)
    with pytest.raises(TypeError, match="invalid dtype object .*only floating-point types"):
        flame.set_default_dtype(bad)
    assert flame.get_default_dtype() is flame.float32
