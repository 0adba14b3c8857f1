"""nn.utils.parametrize, nn.utils.parametrizations (weight_norm, spectral_norm) and the forward-pre-hook
weight_norm / spectral_norm against torch in f64: the module built in both, flame's loaded from torch's
state_dict, then a few SGD / Adam steps eagerly and inside @flame.compile; the state_dict (originals,
power-iteration buffers), the gradients of every parameter and the outputs agree after each step.
Also right_inverse on registration and on assignment, chaining, cached(), removal, the errors, and
state_dicts moving between torch and flame."""

from __future__ import annotations

import copy
import pickle
import warnings

import numpy as np
import pytest
import torch

import flame
from tests.tail_parity.common import close, rng

RTOL, ATOL = 1e-10, 1e-12


# ---- parametrizations written once against a library namespace ---------------------------------------
def _symmetric(lib):
    class Symmetric(lib.nn.Module):
        def forward(self, x):
            return x.triu() + x.triu(1).transpose(-1, -2)

    return Symmetric()


def _scale(lib, factor=2.0):
    class Scale(lib.nn.Module):
        def forward(self, x):
            return x * factor

        def right_inverse(self, y):
            return y / factor

    return Scale()


def _exp(lib):
    class Exp(lib.nn.Module):  # positive entries; right_inverse is the log
        def forward(self, x):
            return x.exp()

        def right_inverse(self, y):
            return y.log()

    return Exp()


def _low_rank(lib):
    class Product(lib.nn.Module):  # weight = a @ b: right_inverse gives two tensors (original0, original1)
        def forward(self, a, b):
            return a @ b

        def right_inverse(self, w):
            return w, lib.eye(w.shape[1], dtype=w.dtype)

    return Product()


def _weight_norm(lib, m, **kw):
    return lib.nn.utils.parametrizations.weight_norm(m, **kw)


def _spectral_norm(lib, m, **kw):
    return lib.nn.utils.parametrizations.spectral_norm(m, **kw)


def _legacy_weight_norm(lib, m, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return lib.nn.utils.weight_norm(m, **kw)


def _legacy_spectral_norm(lib, m, **kw):
    return lib.nn.utils.spectral_norm(m, **kw)


def _register(*makers):
    def apply(lib, m, name="weight"):
        for make in makers:
            lib.nn.utils.parametrize.register_parametrization(m, name, make(lib))
        return m

    return apply


def _linear(lib):
    return lib.nn.Linear(4, 4)


def _linear_positive(lib):
    m = lib.nn.Linear(4, 3)
    with lib.no_grad():
        m.weight.copy_(m.weight.abs() + 0.1)
    return m


# (name, build module, apply parametrization, input shape)
CASES = {
    "symmetric": (_linear, _register(_symmetric), (2, 4)),
    "scale_right_inverse": (_linear, _register(_scale), (2, 4)),
    "chain_symmetric_scale": (_linear, _register(_symmetric, _scale), (2, 4)),
    "chain_exp_scale": (_linear_positive, _register(_exp, _scale), (2, 4)),
    "tuple_right_inverse": (_linear, _register(_low_rank), (2, 4)),
    "weight_norm_linear": (lambda L: L.nn.Linear(5, 3), _weight_norm, (2, 5)),
    "weight_norm_dim1": (lambda L: L.nn.Linear(5, 3), lambda L, m: _weight_norm(L, m, dim=1), (2, 5)),
    "weight_norm_dim_none": (lambda L: L.nn.Linear(5, 3), lambda L, m: _weight_norm(L, m, dim=None), (2, 5)),
    "weight_norm_conv1d": (lambda L: L.nn.Conv1d(3, 4, 3), _weight_norm, (2, 3, 9)),
    "weight_norm_convT1d": (lambda L: L.nn.ConvTranspose1d(3, 4, 3), lambda L, m: _weight_norm(L, m, dim=1), (2, 3, 6)),
    "spectral_norm_linear": (lambda L: L.nn.Linear(5, 3), _spectral_norm, (2, 5)),
    "spectral_norm_conv2d_3iter": (
        lambda L: L.nn.Conv2d(2, 3, 3),
        lambda L, m: _spectral_norm(L, m, n_power_iterations=3),
        (2, 2, 5, 5),
    ),
    "spectral_norm_convT2d": (lambda L: L.nn.ConvTranspose2d(2, 3, 3), _spectral_norm, (1, 2, 4, 4)),
    "spectral_norm_bias_1d": (lambda L: L.nn.Linear(5, 3), lambda L, m: _spectral_norm(L, m, name="bias"), (2, 5)),
    "weight_and_spectral": (
        lambda L: L.nn.Linear(5, 3),
        lambda L, m: _spectral_norm(L, _weight_norm(L, m), name="bias", dim=0),
        (2, 5),
    ),
    "legacy_weight_norm": (lambda L: L.nn.Conv1d(3, 4, 3), _legacy_weight_norm, (2, 3, 9)),
    "legacy_weight_norm_dim_none": (
        lambda L: L.nn.Linear(5, 3),
        lambda L, m: _legacy_weight_norm(L, m, dim=None),
        (2, 5),
    ),
    "legacy_spectral_norm": (lambda L: L.nn.Linear(5, 3), _legacy_spectral_norm, (2, 5)),
    "legacy_spectral_norm_convT2d": (
        lambda L: L.nn.ConvTranspose2d(2, 3, 3),
        lambda L, m: _legacy_spectral_norm(L, m, n_power_iterations=2),
        (1, 2, 4, 4),
    ),
}


def _to_flame(sd) -> dict:
    return {k: flame.tensor(v.detach().numpy()) for k, v in sd.items()}


def _to_torch(sd) -> dict:
    return {k: torch.tensor(v.numpy()) for k, v in sd.items()}


def _twin(case: str, seed: int = 0):
    build, apply, shape = CASES[case]
    torch.manual_seed(seed)
    theirs = apply(torch, build(torch).double())
    mine = apply(flame, build(flame).double())
    assert list(mine.state_dict()) == list(theirs.state_dict())
    mine.load_state_dict(_to_flame(theirs.state_dict()))
    return theirs, mine, shape


def _compare_state(mine, theirs, what: str) -> None:
    sd = mine.state_dict()
    for k, v in theirs.state_dict().items():
        close(sd[k], v, f"{what}: state {k}", RTOL, ATOL)
    mp = dict(mine.named_parameters())
    assert list(mp) == [k for k, _ in theirs.named_parameters()]
    for k, p in theirs.named_parameters():
        close(mp[k].grad, p.grad, f"{what}: grad of {k}", RTOL, ATOL)


def _loss(lib, y):
    w = np.cos(np.arange(y.numel()) * 0.37).reshape(tuple(y.shape))
    return (y * lib.tensor(w)).sum() + (y * y).sum() * 0.1


OPTIMIZERS = {
    "sgd": lambda L, ps: L.optim.SGD(ps, lr=0.05, momentum=0.9),
    "adam": lambda L, ps: L.optim.Adam(ps, lr=0.05),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("opt", list(OPTIMIZERS))
@pytest.mark.parametrize("case", list(CASES))
def test_training_steps_match_torch(case, opt, compiled):
    """Three optimizer steps: outputs, gradients of every original (g and v), the originals and the
    power-iteration buffers agree with torch's after each."""
    theirs, mine, shape = _twin(case)
    t_opt, f_opt = OPTIMIZERS[opt](torch, theirs.parameters()), OPTIMIZERS[opt](flame, mine.parameters())
    x = rng(1).standard_normal(shape)

    def f_step(x):
        f_opt.zero_grad()
        y = mine(x)
        _loss(flame, y).backward()
        f_opt.step()
        return y

    step = flame.compile(f_step) if compiled else f_step
    for i in range(3):
        t_opt.zero_grad()
        y_t = theirs(torch.tensor(x))
        _loss(torch, y_t).backward()
        t_opt.step()
        close(step(flame.tensor(x)), y_t, f"step {i}: output", RTOL, ATOL)
        _compare_state(mine, theirs, f"step {i}")


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("case", [c for c in CASES if "spectral" in c])
def test_spectral_norm_eval_keeps_buffers(case, compiled):
    """In eval mode the power iteration does not run: the buffers stay, the weight is original / sigma
    of the stored u, v (as torch's)."""
    theirs, mine = _twin(case)[:2]
    theirs.eval()
    mine.eval()
    before = {k: v.numpy().copy() for k, v in mine.state_dict().items()}
    x = rng(2).standard_normal(CASES[case][2])
    run = flame.compile(lambda x: mine(x)) if compiled else mine
    for _ in range(2):
        close(run(flame.tensor(x)), theirs(torch.tensor(x)), "eval output", RTOL, ATOL)
    for k, v in mine.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k], err_msg=k)


@pytest.mark.parametrize("case", list(CASES))
def test_state_dict_from_flame_into_torch(case):
    """A state_dict of flame's (after training steps) loads into torch's module, whose outputs and
    parametrized tensor then agree with flame's."""
    theirs, mine, shape = _twin(case, seed=3)
    opt = flame.optim.Adam(mine.parameters(), lr=0.1)
    x = flame.tensor(rng(4).standard_normal(shape))
    for _ in range(2):
        opt.zero_grad()
        _loss(flame, mine(x)).backward()
        opt.step()
    theirs.load_state_dict(_to_torch(mine.state_dict()))
    mine.eval()
    theirs.eval()
    close(mine(x), theirs(torch.tensor(x.numpy())), "output", RTOL, ATOL)
    close(mine.weight, theirs.weight, "weight", RTOL, ATOL)


# ---- right_inverse, assignment, chaining ----------------------------------------------------------------
@pytest.mark.parametrize(
    "case", ["scale_right_inverse", "chain_exp_scale", "tuple_right_inverse", "weight_norm_linear"]
)
def test_assignment_runs_right_inverse(case):
    """module.weight = value sets the originals through right_inverse (the last parametrization first),
    as torch's; the original objects stay (an optimizer holding them keeps them)."""
    theirs, mine, _ = _twin(case)
    originals = [id(p) for p in mine.parameters()]
    value = np.abs(rng(5).standard_normal(tuple(theirs.weight.shape))) + 0.5
    with torch.no_grad():
        theirs.weight = torch.tensor(value)
    mine.weight = flame.tensor(value)
    assert [id(p) for p in mine.parameters()] == originals
    _compare_state(mine, theirs, "after assignment")
    close(mine.weight, theirs.weight, "weight", RTOL, ATOL)


def test_assignment_inside_compile():
    """Assigning the parametrized tensor inside @flame.compile copies into the original (a state update)."""
    theirs, mine, _ = _twin("chain_exp_scale")
    value = np.abs(rng(6).standard_normal((3, 4))) + 0.5

    @flame.compile
    def assign(v):
        mine.weight = v
        return mine.weight * 1

    with torch.no_grad():
        theirs.weight = torch.tensor(value)
    close(assign(flame.tensor(value)), theirs.weight, "weight", RTOL, ATOL)
    _compare_state(mine, theirs, "after compiled assignment")


def test_no_right_inverse_assignment_raises_like_torch():
    """Assigning a tensor parametrized without right_inverse raises torch's RuntimeError."""
    lin = flame.nn.utils.parametrize.register_parametrization(flame.nn.Linear(3, 3), "weight", _symmetric(flame))
    with pytest.raises(RuntimeError, match="does not implement right_inverse"):
        lin.weight = flame.zeros(3, 3)


def test_buffer_parametrized():
    """A buffer can be parametrized too: its original stays a buffer (state_dict key as torch's)."""
    mods = []
    for lib in (torch, flame):
        m = lib.nn.BatchNorm1d(3).double()
        lib.nn.utils.parametrize.register_parametrization(m, "running_var", _scale(lib, 3.0))
        mods.append(m)
    theirs, mine = mods
    assert list(mine.state_dict()) == list(theirs.state_dict())
    assert "running_var" not in dict(mine.named_buffers())
    assert "parametrizations.running_var.original" in dict(mine.named_buffers())
    close(mine.running_var, theirs.running_var, "running_var", RTOL, ATOL)


def test_names_and_classes():
    """is_parametrized, type_before_parametrizations, the injected class's name, the originals."""
    P = flame.nn.utils.parametrize
    lin = flame.nn.Linear(4, 4)
    assert not P.is_parametrized(lin)
    P.register_parametrization(lin, "weight", _symmetric(flame))
    P.register_parametrization(lin, "weight", _scale(flame))
    assert type(lin).__name__ == "ParametrizedLinear" and isinstance(lin, flame.nn.Linear)
    assert P.type_before_parametrizations(lin) is flame.nn.Linear
    assert P.is_parametrized(lin) and P.is_parametrized(lin, "weight") and not P.is_parametrized(lin, "bias")
    assert isinstance(lin.parametrizations.weight, P.ParametrizationList)
    assert len(lin.parametrizations.weight) == 2
    assert isinstance(lin.parametrizations.weight.original, flame.nn.Parameter)
    assert [k for k, _ in lin.named_parameters()] == ["bias", "parametrizations.weight.original"]
    assert P.type_before_parametrizations(flame.nn.Linear(2, 2)) is flame.nn.Linear


# ---- removal -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("leave", [True, False])
@pytest.mark.parametrize("case", ["chain_exp_scale", "weight_norm_linear", "spectral_norm_linear"])
def test_remove_parametrizations(case, leave):
    """remove_parametrizations gives the class back and a plain parameter holding the parametrized value
    (leave_parametrized) or the original, as torch's; a sequence of originals cannot be left."""
    theirs, mine, shape = _twin(case)
    P, TP = flame.nn.utils.parametrize, torch.nn.utils.parametrize
    if "weight_norm" in case and not leave:
        with pytest.raises(ValueError, match="Cannot leave unparametrized"):
            P.remove_parametrizations(mine, "weight", leave_parametrized=False)
        return
    TP.remove_parametrizations(theirs, "weight", leave_parametrized=leave)
    P.remove_parametrizations(mine, "weight", leave_parametrized=leave)
    assert type(mine) is type(mine).__mro__[0] and type(mine).__name__ == type(theirs).__name__
    assert not P.is_parametrized(mine)
    assert list(mine.state_dict()) == list(theirs.state_dict())
    assert isinstance(mine.weight, flame.nn.Parameter)
    _compare_state(mine, theirs, "after removal")


def test_remove_one_of_two():
    """Removing one parametrized name keeps the other and the injected class."""
    P = flame.nn.utils.parametrize
    lin = flame.nn.Linear(3, 3)
    P.register_parametrization(lin, "weight", _symmetric(flame))
    P.register_parametrization(lin, "bias", _scale(flame))
    P.remove_parametrizations(lin, "weight")
    assert P.is_parametrized(lin, "bias") and not P.is_parametrized(lin, "weight")
    assert type(lin).__name__ == "ParametrizedLinear"
    P.remove_parametrizations(lin, "bias")
    assert type(lin) is flame.nn.Linear and "parametrizations" not in dict(lin.named_children())


@pytest.mark.parametrize("which", ["weight_norm", "spectral_norm"])
def test_legacy_remove(which):
    """remove_weight_norm / remove_spectral_norm leave a parameter with the normalised value, as torch's."""
    case = "legacy_" + which
    theirs, mine, shape = _twin(case)
    getattr(torch.nn.utils, "remove_" + which)(theirs)
    getattr(flame.nn.utils, "remove_" + which)(mine)
    assert list(mine.state_dict()) == list(theirs.state_dict())
    assert isinstance(mine.weight, flame.nn.Parameter)
    _compare_state(mine, theirs, "after removal")
    with pytest.raises(ValueError, match=f"{which} of 'weight' not found"):
        getattr(flame.nn.utils, "remove_" + which)(mine)


# ---- cached --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_cached_computes_once(compiled):
    """Within cached() the parametrization runs once per tensor (reads give the same tensor); outside it
    runs at each read. Gradients through a cached weight read twice are torch's."""
    calls = []

    def make(lib):
        class Counted(lib.nn.Module):
            def forward(self, x):
                calls.append(lib)
                return x * 3.0

        return Counted()

    lins = []
    for lib in (torch, flame):
        torch.manual_seed(0)
        m = lib.nn.Linear(3, 3).double()
        lib.nn.utils.parametrize.register_parametrization(m, "weight", make(lib))
        lins.append(m)
    theirs, mine = lins
    mine.load_state_dict(_to_flame(theirs.state_dict()))
    x = rng(7).standard_normal((2, 3))

    def run(lib, m, x):
        with lib.nn.utils.parametrize.cached():
            assert m.weight is m.weight
            y = m(m(x))
        _loss(lib, y).backward()
        return y

    y_t = run(torch, theirs, torch.tensor(x))
    calls.clear()
    f = flame.compile(lambda x: run(flame, mine, x)) if compiled else (lambda x: run(flame, mine, x))
    close(f(flame.tensor(x)), y_t, "output", RTOL, ATOL)
    assert len(calls) == 1
    _compare_state(mine, theirs, "cached")
    calls.clear()
    assert mine.weight is not mine.weight
    assert len(calls) == 2


# ---- weight_norm specifics --------------------------------------------------------------------------------
def test_weight_norm_keys_and_shapes():
    """g is original0 (norm over every dim but dim, kept), v is original1: torch's keys and shapes."""
    for dim, g_shape in ((0, (4, 1, 1)), (1, (1, 3, 1)), (None, ())):
        mods = [lib.nn.utils.parametrizations.weight_norm(lib.nn.Conv1d(3, 4, 2), dim=dim) for lib in (torch, flame)]
        t_sd, f_sd = (m.state_dict() for m in mods)
        assert (
            list(f_sd)
            == list(t_sd)
            == ["bias", "parametrizations.weight.original0", "parametrizations.weight.original1"]
        )
        assert (
            tuple(f_sd["parametrizations.weight.original0"].shape)
            == g_shape
            == tuple(t_sd["parametrizations.weight.original0"].shape)
        )


def test_weight_norm_loads_legacy_state_dict():
    """A state_dict of the hook form (weight_g, weight_v) loads into the parametrization form, as torch's
    compatibility hook does; nested modules too."""
    torch.manual_seed(0)
    old = _legacy_weight_norm(torch, torch.nn.Conv1d(3, 4, 3).double())
    old_sd = {f"net.0.{k}": v for k, v in old.state_dict().items()}
    mine = flame.nn.Sequential()
    mine.add_module(
        "net", flame.nn.Sequential(flame.nn.utils.parametrizations.weight_norm(flame.nn.Conv1d(3, 4, 3).double()))
    )
    mine.load_state_dict(_to_flame(old_sd))
    x = rng(8).standard_normal((1, 3, 6))
    close(mine(flame.tensor(x)), old(torch.tensor(x)), "output", RTOL, ATOL)


def test_legacy_weight_norm_warns_future_warning():
    """torch.nn.utils.weight_norm warns FutureWarning (deprecated); flame's too, naming the replacement."""
    with pytest.warns(FutureWarning) as theirs:
        torch.nn.utils.weight_norm(torch.nn.Linear(2, 2))
    with pytest.warns(FutureWarning, match="parametrizations.weight_norm") as mine:
        flame.nn.utils.weight_norm(flame.nn.Linear(2, 2))
    assert theirs[0].category is mine[0].category is FutureWarning
    assert mine[0].filename == __file__


@pytest.mark.parametrize("which", ["weight_norm", "spectral_norm"])
def test_legacy_twice_raises(which):
    """A second hook on the same parameter raises torch's RuntimeError."""
    m = (_legacy_weight_norm if which == "weight_norm" else _legacy_spectral_norm)(flame, flame.nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match=f"Cannot register two {which} hooks"):
        (_legacy_weight_norm if which == "weight_norm" else _legacy_spectral_norm)(flame, m)


def test_legacy_weight_attribute_after_registration():
    """The hook form sets module.weight at registration and at each forward (a plain attribute, not a
    parameter), as torch's."""
    m = _legacy_weight_norm(flame, flame.nn.Linear(3, 2).double())
    w = m.weight_g * m.weight_v / m.weight_v.norm(dim=1, keepdim=True)
    close(m.weight, torch.tensor(w.detach().numpy()), "weight at registration", RTOL, ATOL)
    theirs, mine, shape = _twin("legacy_weight_norm")
    assert "weight" not in dict(mine.named_parameters())
    x = rng(9).standard_normal(shape)
    close(mine(flame.tensor(x)), theirs(torch.tensor(x)), "output", RTOL, ATOL)
    close(mine.weight, theirs.weight, "weight after forward", RTOL, ATOL)


# ---- errors ------------------------------------------------------------------------------------------------
def test_shape_change_needs_unsafe():
    """A parametrization changing the shape raises torch's ValueError; unsafe=True allows it."""

    def make(lib):
        class Half(lib.nn.Module):
            def forward(self, x):
                return x[:2]

        return Half()

    for lib in (torch, flame):
        m = lib.nn.Linear(3, 4)
        with pytest.raises(ValueError, match="may not change the shape"):
            lib.nn.utils.parametrize.register_parametrization(m, "weight", make(lib))
        lib.nn.utils.parametrize.register_parametrization(m, "weight", make(lib), unsafe=True)
        assert tuple(m.weight.shape) == (2, 3)


def test_dtype_change_raises():
    def make(lib):
        class Half(lib.nn.Module):
            def forward(self, x):
                return x.float()

        return Half()

    for lib in (torch, flame):
        with pytest.raises(ValueError, match="may not change the dtype"):
            lib.nn.utils.parametrize.register_parametrization(lib.nn.Linear(3, 4).double(), "weight", make(lib))


def test_unknown_name_raises():
    for lib in (torch, flame):
        with pytest.raises(ValueError, match="does not have a parameter, a buffer, or a parametrized element"):
            lib.nn.utils.parametrize.register_parametrization(lib.nn.Linear(3, 4), "nope", _symmetric(lib))
        with pytest.raises(ValueError, match="does not have a parametrization on"):
            lib.nn.utils.parametrize.remove_parametrizations(lib.nn.Linear(3, 4), "weight")


def test_assigning_parameter_raises_key_error():
    """A Parameter assigned to a parametrized name raises KeyError, as torch's."""
    for lib in (torch, flame):
        m = lib.nn.utils.parametrizations.weight_norm(lib.nn.Linear(3, 4))
        with pytest.raises(KeyError, match="already exists"):
            m.weight = lib.nn.Parameter(lib.zeros(4, 3))


def test_spectral_norm_bad_arguments():
    for lib in (torch, flame):
        with pytest.raises(ValueError, match="n_power_iterations to be positive"):
            lib.nn.utils.parametrizations.spectral_norm(lib.nn.Linear(3, 4), n_power_iterations=0)
        with pytest.raises(IndexError, match="Dimension out of range"):
            lib.nn.utils.parametrizations.spectral_norm(lib.nn.Linear(3, 4), dim=2)
        with pytest.raises(ValueError, match="no parameter or buffer with name"):
            lib.nn.utils.parametrizations.spectral_norm(lib.nn.Linear(3, 4), name="nope")


def test_deepcopy_and_pickle():
    """A parametrized module deep-copies (its own originals); pickling raises, as torch's (save the
    state_dict instead)."""
    m = flame.nn.utils.parametrizations.weight_norm(flame.nn.Linear(3, 4))
    c = copy.deepcopy(m)
    assert type(c) is type(m)
    g, g2 = m.parametrizations.weight.original0, c.parametrizations.weight.original0
    assert g is not g2
    np.testing.assert_array_equal(g.numpy(), g2.numpy())
    np.testing.assert_array_equal(c.weight.numpy(), m.weight.numpy())
    with pytest.raises(RuntimeError, match="state_dict"):
        pickle.dumps(m)


def test_load_state_dict_pre_hook_like_torch():
    """register_load_state_dict_pre_hook: the hook gets (module, state_dict, prefix, ...), may rename keys
    before they are matched, and its handle removes it; an error message it appends makes the load raise."""

    def build(lib):
        net = lib.nn.Sequential(lib.nn.Linear(2, 3), lib.nn.Linear(3, 1))
        seen = []

        def rename(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
            seen.append((type(module).__name__, prefix))
            if prefix + "w" in state_dict:
                state_dict[prefix + "weight"] = state_dict.pop(prefix + "w")

        handle = net[1].register_load_state_dict_pre_hook(rename)
        return net, seen, handle

    (theirs, t_seen, _), (mine, f_seen, f_handle) = build(torch), build(flame)
    sd = {k.replace("1.weight", "1.w"): v.detach().numpy() + 1.0 for k, v in theirs.state_dict().items()}
    theirs.load_state_dict({k: torch.tensor(v) for k, v in sd.items()})
    mine.load_state_dict({k: flame.tensor(v) for k, v in sd.items()})
    assert f_seen == t_seen == [("Linear", "1.")]
    for k, v in theirs.state_dict().items():
        close(mine.state_dict()[k], v, k, RTOL, ATOL)
    f_handle.remove()
    with pytest.raises(RuntimeError, match="unexpected"):
        mine.load_state_dict({k: flame.tensor(v) for k, v in sd.items()})

    def refuse(module, state_dict, prefix, *rest):
        rest[-1].append("refused by the hook")

    mine[0].register_load_state_dict_pre_hook(refuse)
    with pytest.raises(RuntimeError, match="refused by the hook"):
        mine.load_state_dict(mine.state_dict())


@pytest.mark.parametrize("form", ["weight_norm", "spectral_norm"])
def test_removing_a_hook_form_retraces_compiled_steps(form):
    """After remove_weight_norm / remove_spectral_norm a compiled step reads the plain parameter again."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        m = getattr(flame.nn.utils, form)(flame.nn.Linear(3, 2))
    step = flame.compile(lambda x: m(x).sum())
    x = flame.randn(4, 3)
    step(x)
    getattr(flame.nn.utils, "remove_" + form)(m)
    with flame.no_grad():
        m.weight.copy_(flame.zeros(2, 3))
    np.testing.assert_allclose(step(x).item(), m(x).sum().item(), rtol=1e-6)
