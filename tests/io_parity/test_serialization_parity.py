"""Serialization against torch: flame.save / flame.load of tensors, state_dicts and nested containers
(what comes back, with which dtypes and structure, as torch.save / torch.load's round trip gives);
files crossing between the libraries (safetensors both ways; a torch.save pickle refused with what to
do); Module.load_state_dict's strict / non-strict results, errors and assign=True; an optimizer
loading torch's state_dict (param ids, 'step' / 'exp_avg' / 'exp_avg_sq' dtypes and shapes) and
flame's own through a file, then continuing exactly as an uninterrupted torch run; schedulers;
map_location."""

from __future__ import annotations

import io

import ml_dtypes
import numpy as np
import pytest
import safetensors.torch
import torch

import flame


def _np(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        t = t.detach()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return t.numpy()
    return t.numpy()


def _form(obj):
    """A library-neutral description: container types, keys, and each tensor's dtype, shape and values."""
    if isinstance(obj, (torch.Tensor, flame.Tensor)):
        a = _np(obj)
        return ("tensor", str(a.dtype), a.shape, a.astype(np.float64).tolist())
    if isinstance(obj, dict):
        return ("dict", [(k, _form(v)) for k, v in obj.items()])
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, [_form(v) for v in obj])
    return (type(obj).__name__, obj)


def _round_trip(lib, obj):
    buf = io.BytesIO()
    lib.save(obj, buf)
    buf.seek(0)
    return lib.load(buf)


DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "int8", "uint8", "bool"]


def _objects(lib):
    def t(values, dtype="float32"):
        return lib.tensor(values, dtype=getattr(lib, dtype))

    base = lib.arange(12, dtype=lib.float32).reshape(3, 4)
    return {
        "tensor": t([[1.5, -2.0], [3.25, 4.0]]),
        "scalar tensor": t(3.5, "float64"),
        "empty tensor": lib.zeros(0, 3),
        "transposed view": base.t(),
        "sliced view": base[1:, ::2],
        "every dtype": {d: t([1, 0, 1], d) for d in DTYPES},
        "nested": {
            "model": {"w": t([1.0, 2.0])},
            "epoch": 3,
            "loss": 0.25,
            "name": "run",
            "done": False,
            "none": None,
            "hist": [1, 2.5, "x"],
            "pair": (t([1.0]), 7),
            5: "int key",
        },
        "list of tensors": [t([1.0]), t([2.0, 3.0], "float64")],
        "tuple": (t([1, 2], "int64"), "a", (1, (2.0,))),
    }


@pytest.mark.parametrize("what", list(_objects(torch)))
def test_save_load_round_trip_gives_what_torch_gives(what):
    theirs = _form(_round_trip(torch, _objects(torch)[what]))
    mine = _form(_round_trip(flame, _objects(flame)[what]))
    assert mine == theirs


def test_a_path_round_trip_and_loaded_tensors_are_independent_of_the_saved_ones(tmp_path):
    x = flame.tensor([1.0, 2.0])
    flame.save({"x": x, "y": x}, tmp_path / "f.safetensors")
    back = flame.load(tmp_path / "f.safetensors")
    back["x"].add_(1.0)
    tx = torch.tensor([1.0, 2.0])
    tback = _round_trip(torch, {"x": tx, "y": tx})
    tback["x"].add_(1.0)
    assert x.tolist() == tx.tolist()  # the saved tensor is untouched
    assert back["y"].tolist() == tback["y"].tolist()  # x and y were one tensor, and still are


# ---- files across the two libraries ---------------------------------------------------------------


def _twin_mlps():
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 2))
    mine = flame.nn.Sequential(flame.nn.Linear(4, 5), flame.nn.BatchNorm1d(5), flame.nn.Linear(5, 2))
    theirs.train()
    theirs(torch.randn(8, 4))  # running stats and num_batches_tracked that are not the initial ones
    theirs.eval()
    mine.eval()
    return theirs, mine


def test_a_flame_state_dict_file_loads_into_torch(tmp_path):
    theirs, mine = _twin_mlps()
    mine.load_state_dict(theirs.state_dict())
    flame.save(mine.state_dict(), tmp_path / "m.safetensors")
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 2)).eval()
    loaded = safetensors.torch.load_file(tmp_path / "m.safetensors")
    assert {k: (v.dtype, v.shape) for k, v in loaded.items()} == {
        k: (v.dtype, v.shape) for k, v in theirs.state_dict().items()
    }
    assert str(fresh.load_state_dict(loaded)) == "<All keys matched successfully>"
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(fresh(torch.tensor(x)).detach().numpy(), theirs(torch.tensor(x)).detach().numpy())


def test_a_torch_safetensors_file_loads_into_flame(tmp_path):
    theirs, mine = _twin_mlps()
    safetensors.torch.save_file(theirs.state_dict(), tmp_path / "t.safetensors")
    loaded = flame.load(tmp_path / "t.safetensors")
    assert {k: (str(_np(v).dtype), tuple(v.shape)) for k, v in loaded.items()} == {
        k: (str(_np(v).dtype), tuple(v.shape)) for k, v in theirs.state_dict().items()
    }
    assert repr(mine.load_state_dict(loaded)) == "<All keys matched successfully>"
    assert mine[1].num_batches_tracked.dtype == flame.int64 and mine[1].num_batches_tracked.item() == 1
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(mine(flame.tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), rtol=1e-6)


def test_a_torch_save_pickle_is_refused_with_what_to_do(tmp_path):
    theirs, _ = _twin_mlps()
    torch.save(theirs.state_dict(), tmp_path / "t.pt")
    with pytest.raises(flame.CheckpointError, match=r"torch\.save.*safetensors\.torch\.save_file") as e:
        flame.load(tmp_path / "t.pt")
    assert isinstance(e.value, RuntimeError)


def test_loading_a_torch_state_dict_of_torch_tensors_directly():
    theirs, mine = _twin_mlps()
    assert repr(mine.load_state_dict(theirs.state_dict())) == "<All keys matched successfully>"
    for k, v in theirs.state_dict().items():
        np.testing.assert_array_equal(_np(mine.state_dict()[k]), _np(v))


# ---- load_state_dict: strict, non-strict, errors, assign ---------------------------------------------


def _model(lib):
    return lib.nn.Sequential(lib.nn.Linear(3, 2), lib.nn.BatchNorm1d(2))


def _edited(lib, edit):
    sd = dict(_model(lib).state_dict())
    if edit in ("missing", "both"):
        sd.pop("0.bias")
        sd.pop("1.running_var")
    if edit in ("unexpected", "both"):
        sd["extra.weight"] = lib.zeros(1)
    if edit == "shape":
        sd["0.weight"] = lib.zeros(4, 3)
    return sd


@pytest.mark.parametrize("edit", ["none", "missing", "unexpected", "both", "shape"])
@pytest.mark.parametrize("strict", [True, False])
def test_load_state_dict_results_and_errors_as_torch(edit, strict):
    def run(lib):
        try:
            r = _model(lib).load_state_dict(_edited(lib, edit), strict=strict)
        except RuntimeError as e:  # torch's type; flame.CheckpointError is one
            return "RuntimeError", [k for k in ("0.bias", "1.running_var", "extra.weight", "0.weight") if k in str(e)]
        return "ok", (r.missing_keys, r.unexpected_keys, repr(r) == "<All keys matched successfully>")

    assert run(flame) == run(torch)


@pytest.mark.parametrize("assign", [False, True])
def test_load_state_dict_dtype_and_assign_as_torch(assign):
    def run(lib):
        m = _model(lib)
        before = m[0].weight
        sd = {k: v.double() if v.is_floating_point() else v for k, v in m.state_dict().items()}
        sd["0.weight"] = lib.full((2, 3), 0.5, dtype=lib.float64)
        m.load_state_dict(sd, assign=assign)
        w = m[0].weight
        return (
            str(w.dtype).split(".")[-1].replace("f64", "float64").replace("f32", "float32"),
            w is before,
            w.requires_grad,
            type(w).__name__,
            _np(w).tolist(),
        )

    assert run(flame) == run(torch)


# ---- optimizers -------------------------------------------------------------------------------------

OPTIMIZERS = [
    ("Adam", dict(lr=0.05)),
    ("AdamW", dict(lr=0.05, amsgrad=True, weight_decay=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("RMSprop", dict(lr=0.01, momentum=0.5)),
    ("Adagrad", dict(lr=0.1)),
]
DATA = [
    (np.random.default_rng(i).standard_normal((6, 4)), np.random.default_rng(i + 9).standard_normal((6, 2)))
    for i in range(6)
]


def _setup(lib, name, kw, model=None):
    model = model or lib.nn.Sequential(lib.nn.Linear(4, 5), lib.nn.Tanh(), lib.nn.Linear(5, 2)).double()
    groups = [{"params": list(model[0].parameters())}, {"params": list(model[2].parameters()), "lr": 0.02}]
    return model, getattr(lib.optim, name)(groups, **kw)


def _steps(lib, model, opt, data):
    for x, y in data:
        loss = ((model(lib.tensor(x)) - lib.tensor(y)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def _state_form(sd):
    return {
        "state": {i: {k: (str(_np(v).dtype), tuple(v.shape)) for k, v in s.items()} for i, s in sd["state"].items()},
        "params": [g["params"] for g in sd["param_groups"]],
        "lr": [g["lr"] for g in sd["param_groups"]],
    }


@pytest.mark.parametrize("name,kw", OPTIMIZERS)
def test_optimizer_state_dict_structure_as_torch(name, kw):
    forms = []
    for lib in (torch, flame):
        model, opt = _setup(lib, name, kw)
        _steps(lib, model, opt, DATA[:2])
        forms.append(_state_form(opt.state_dict()))
    theirs, mine = forms
    if name == "SGD":  # flame's SGD also keeps a 'step' count per parameter; torch's keeps none
        mine["state"] = {i: {k: v for k, v in s.items() if k != "step"} for i, s in mine["state"].items()}
    assert mine == theirs


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name,kw", OPTIMIZERS)
def test_optimizer_continues_from_torchs_state_dict(name, kw, compiled):
    """torch trains 3 steps; flame loads its weights and optimizer state_dict (torch tensors, torch's
    param ids) and does the next 3 steps as torch does them."""
    torch.manual_seed(0)
    tmodel, topt = _setup(torch, name, kw)
    _steps(torch, tmodel, topt, DATA[:3])
    fmodel, fopt = _setup(flame, name, kw)
    fmodel.load_state_dict(tmodel.state_dict())
    fopt.load_state_dict(topt.state_dict())
    _steps(torch, tmodel, topt, DATA[3:])
    if compiled:

        @flame.compile
        def step(x, y):
            loss = ((fmodel(x) - y) ** 2).mean()
            fopt.zero_grad()
            loss.backward()
            fopt.step()
            return loss

        for x, y in DATA[3:]:
            step(flame.tensor(x), flame.tensor(y))
    else:
        _steps(flame, fmodel, fopt, DATA[3:])
    for k, v in tmodel.state_dict().items():
        np.testing.assert_allclose(_np(fmodel.state_dict()[k]), _np(v), rtol=1e-10, atol=1e-12, err_msg=k)
    for i, s in topt.state_dict()["state"].items():
        for k, v in s.items():
            np.testing.assert_allclose(_np(fopt.state_dict()["state"][i][k]), _np(v), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name,kw", OPTIMIZERS[:3])
def test_flame_optimizer_state_through_a_file_continues_identically(name, kw, tmp_path):
    flame.manual_seed(0)
    model, opt = _setup(flame, name, kw)
    _steps(flame, model, opt, DATA[:3])
    flame.save({"model": model.state_dict(), "opt": opt.state_dict()}, tmp_path / "ck.safetensors")
    _steps(flame, model, opt, DATA[3:])
    m2, o2 = _setup(flame, name, kw)
    ck = flame.load(tmp_path / "ck.safetensors")
    m2.load_state_dict(ck["model"])
    o2.load_state_dict(ck["opt"])
    assert o2.param_groups[1]["lr"] == 0.02 and list(ck["opt"]["state"]) == list(opt.state_dict()["state"])
    _steps(flame, m2, o2, DATA[3:])
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(m2.state_dict()[k].numpy(), v.numpy(), err_msg=k)


def test_flame_optimizer_state_dict_loads_into_torch():
    fmodel, fopt = _setup(flame, "Adam", dict(lr=0.05))
    _steps(flame, fmodel, fopt, DATA[:3])
    tmodel, topt = _setup(torch, "Adam", dict(lr=0.05))
    tmodel.load_state_dict({k: torch.tensor(v.numpy()) for k, v in fmodel.state_dict().items()})
    sd = fopt.state_dict()
    topt.load_state_dict(
        {
            "state": {i: {k: torch.tensor(v.numpy()) for k, v in s.items()} for i, s in sd["state"].items()},
            "param_groups": sd["param_groups"],
        }
    )
    _steps(torch, tmodel, topt, DATA[3:])
    _steps(flame, fmodel, fopt, DATA[3:])
    for k, v in tmodel.state_dict().items():
        np.testing.assert_allclose(fmodel.state_dict()[k].numpy(), _np(v), rtol=1e-10, atol=1e-12, err_msg=k)


def test_scheduler_state_dict_as_torch_and_through_a_file(tmp_path):
    forms = []
    for lib in (torch, flame):
        model, opt = _setup(lib, "SGD", dict(lr=0.1))
        sched = lib.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        for _ in range(3):
            opt.step()
            sched.step()
        sd = sched.state_dict()
        if lib is flame:
            sd = _round_trip(flame, sd)
        model2, opt2 = _setup(lib, "SGD", dict(lr=0.1))
        sched2 = lib.optim.lr_scheduler.StepLR(opt2, step_size=2, gamma=0.5)
        sched2.load_state_dict(sd)
        lrs = []
        for _ in range(3):
            opt2.step()
            sched2.step()
            lrs.append(sched2.get_last_lr())
        forms.append((sd["last_epoch"], sd["base_lrs"], sd["_last_lr"], lrs))
    assert forms[1] == forms[0]


@pytest.mark.parametrize("where", ["cpu", torch.device("cpu"), {"cuda:0": "cpu"}, lambda storage, loc: storage])
def test_map_location_loads_on_the_process_device(where):
    buf = io.BytesIO()
    flame.save({"w": flame.ones(2, dtype=flame.float64)}, buf)
    buf.seek(0)
    w = flame.load(buf, map_location=where)["w"]
    assert str(w.device) == "cpu" and w.dtype == flame.float64


def test_map_location_naming_no_device_raises():
    buf = io.BytesIO()
    flame.save({"w": flame.ones(2)}, buf)
    buf.seek(0)
    with pytest.raises(Exception, match="unknown device 'meta'"):
        flame.load(buf, map_location="meta")
