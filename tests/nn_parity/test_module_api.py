"""The Module API against torch's on the same architecture: Sequential indexing, slicing, append,
insert, extend, del; ModuleList / ModuleDict / ParameterList / ParameterDict; named_modules with
remove_duplicate; state_dict names and shapes; load_state_dict(strict=False)'s result; buffers;
children / modules / parameters order; train() / eval() propagation; zero_grad; requires_grad_."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame


def _net(lib):
    nn = lib.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(2, 3, 3, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(3)
            self.heads = nn.ModuleDict({"b": nn.Linear(3, 2), "a": nn.Linear(3, 1)})
            self.extra = nn.ParameterList([nn.Parameter(lib.ones(2)), nn.Parameter(lib.zeros(3, 1))])
            self.pd = nn.ParameterDict({"z": nn.Parameter(lib.ones(1)), "y": nn.Parameter(lib.ones(2))})
            self.register_buffer("scale", lib.ones(1))
            self.register_buffer("tmp", lib.ones(1), persistent=False)
            self.stack = nn.ModuleList([nn.LayerNorm(3), nn.GELU(), nn.Sequential(nn.Linear(3, 3), nn.ReLU())])
            self.rnn = nn.LSTM(3, 4, 1, batch_first=True)
            self.attn = nn.MultiheadAttention(4, 2)

    return nn.Sequential(Block(), nn.Flatten(), nn.Dropout(0.1))


def _shapes(sd):
    return [(k, tuple(v.shape)) for k, v in sd.items()]


def test_state_dict_names_shapes_and_order():
    t, f = _net(torch), _net(flame)
    assert _shapes(f.state_dict()) == _shapes(t.state_dict())
    assert [n for n, _ in f.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert [n for n, _ in f.named_buffers()] == [n for n, _ in t.named_buffers()]
    assert [n for n, _ in f.named_modules()] == [n for n, _ in t.named_modules()]
    assert [type(m).__name__ for m in f.children()] == [type(m).__name__ for m in t.children()]
    assert [type(m).__name__ for m in f.modules()] == [type(m).__name__ for m in t.modules()]
    f.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})


def test_load_state_dict_not_strict_result():
    t, f = _net(torch), _net(flame)
    sd = {k: v.detach().numpy() for k, v in t.state_dict().items()}
    del sd["0.bn.running_var"], sd["0.heads.a.weight"]
    sd["0.bogus"] = np.ones(2)
    rt = t.load_state_dict({k: torch.tensor(v) for k, v in sd.items()}, strict=False)
    rf = f.load_state_dict({k: flame.tensor(v) for k, v in sd.items()}, strict=False)
    assert sorted(rf.missing_keys) == sorted(rt.missing_keys)
    assert sorted(rf.unexpected_keys) == sorted(rt.unexpected_keys)
    mk, uk = rf
    assert (mk, uk) == (rf.missing_keys, rf.unexpected_keys)


def test_sequential_operations():
    ts, fs = ([lib.nn.Linear(2, 2), lib.nn.ReLU(), lib.nn.Linear(2, 3), lib.nn.Tanh()] for lib in (torch, flame))
    t, f = torch.nn.Sequential(*ts), flame.nn.Sequential(*fs)

    def names(m):
        return [(k, type(v).__name__) for k, v in m.named_children()]

    assert names(f[1:3]) == names(t[1:3])
    assert names(f[::-2]) == names(t[::-2])
    assert type(f[-1]).__name__ == type(t[-1]).__name__
    assert len(f) == len(t)
    for m, lib in ((t, torch), (f, flame)):
        m.append(lib.nn.Sigmoid())
        m.insert(1, lib.nn.Identity())
        m.insert(-1, lib.nn.GELU())
        m.extend([lib.nn.Identity()])
        del m[0]
        m[0] = lib.nn.ELU()
    assert names(f) == names(t)
    assert list(f.state_dict()) == list(t.state_dict())
    from collections import OrderedDict

    od = [(n, lib.nn.Linear(1, 1)) for lib in (flame,) for n in ("first", "second")]
    assert list(flame.nn.Sequential(OrderedDict(od)).state_dict()) == [
        "first.weight",
        "first.bias",
        "second.weight",
        "second.bias",
    ]


def test_module_list_and_dict_operations():
    for lib in (torch, flame):
        ml = lib.nn.ModuleList([lib.nn.ReLU(), lib.nn.Tanh()])
        ml.append(lib.nn.GELU())
        ml.insert(0, lib.nn.Identity())
        ml.extend([lib.nn.SiLU()])
        ml += [lib.nn.ELU()]
        del ml[1]
        if lib is torch:
            want = [type(m).__name__ for m in ml] + [type(m).__name__ for m in ml[1:3]]
        else:
            assert [type(m).__name__ for m in ml] + [type(m).__name__ for m in ml[1:3]] == want
        md = lib.nn.ModuleDict({"x": lib.nn.ReLU()})
        md["y"] = lib.nn.Tanh()
        md.update({"z": lib.nn.GELU()})
        popped = md.pop("x")
        got = (list(md.keys()), type(popped).__name__, "y" in md, len(md))
        if lib is torch:
            want_d = got
        else:
            assert got == want_d


def test_named_modules_remove_duplicate():
    for lib in (torch, flame):
        shared = lib.nn.Linear(2, 2)
        m = lib.nn.Sequential(shared, lib.nn.ReLU(), shared)
        got = (
            [n for n, _ in m.named_modules()],
            [n for n, _ in m.named_modules(remove_duplicate=False)],
            [n for n, _ in m.named_parameters()],
            [n for n, _ in m.named_parameters(remove_duplicate=False)],
            list(m.state_dict()),
        )
        if lib is torch:
            want = got
        else:
            assert got == want


def test_train_eval_zero_grad_requires_grad():
    t, f = _net(torch), _net(flame)
    for m in (t, f):
        m.eval()
        m[0].stack.train()
        m[0].requires_grad_(False)
        m[0].heads.requires_grad_()
    assert [x.training for x in f.modules()] == [x.training for x in t.modules()]
    assert [p.requires_grad for p in f.parameters()] == [p.requires_grad for p in t.parameters()]
    for m, lib in ((t, torch), (f, flame)):
        for p in m.parameters():
            p.grad = lib.ones(*p.shape) if p.requires_grad else None
        m.zero_grad(set_to_none=False)
    for pt, pf in zip(t.parameters(), f.parameters()):
        assert (pt.grad is None) == (pf.grad is None)
        if pt.grad is not None:
            np.testing.assert_array_equal(pf.grad.numpy(), pt.grad.numpy())
    for m in (t, f):
        m.zero_grad()
    assert all(p.grad is None for p in f.parameters())


def test_buffers_persistence_and_assignment():
    for lib in (torch, flame):
        m = lib.nn.Module()
        m.register_buffer("a", lib.ones(2))
        m.register_buffer("b", lib.ones(1), persistent=False)
        m.register_buffer("c", None)
        m.a = lib.zeros(2)  # assigning a tensor to a buffer's name keeps it a buffer
        got = (list(m.state_dict()), [n for n, _ in m.named_buffers()], m.a.numpy().tolist())
        if lib is torch:
            want = got
        else:
            assert got == want


def test_parameter_containers():
    for lib in (torch, flame):
        pl = lib.nn.ParameterList([lib.nn.Parameter(lib.ones(2))])
        pl.append(lib.nn.Parameter(lib.zeros(3)))
        pl.extend([lib.nn.Parameter(lib.ones(1))])
        pd = lib.nn.ParameterDict({"w": lib.nn.Parameter(lib.ones(2))})
        pd["v"] = lib.nn.Parameter(lib.zeros(1))
        pd.update({"u": lib.nn.Parameter(lib.ones(3))})
        m = lib.nn.Module()
        m.pl, m.pd = pl, pd
        got = (_shapes(m.state_dict()), len(pl), list(pd.keys()), tuple(pl[-1].shape))
        if lib is torch:
            want = got
        else:
            assert got == want


@pytest.mark.parametrize("compiled", [False, True])
def test_whole_net_forward_matches(compiled):
    """The container-heavy net above, loaded from torch's weights, computes torch's forward."""
    from tests.nn_parity.common import compare, twin

    def call(m, x):
        b = m[0]
        h = b.bn(b.conv(x)).mean((2, 3))
        h = b.stack[2](b.stack[1](b.stack[0](h)))
        y = b.heads["a"](h) + b.heads["b"](h).sum(-1, keepdim=True) + b.extra[0].sum() + b.pd["y"].sum() * b.scale
        return y

    theirs, mine = twin(_net)
    for m in (theirs, mine):
        m.eval()
    compare(theirs, mine, call, [np.random.default_rng(0).standard_normal((2, 2, 4, 4))], compiled)


def _outcome(call):
    """(type name, message) of what call() raised, or ("ok", a description of what it returned)."""
    try:
        got = call()
    except (AttributeError, ValueError) as e:
        return type(e).__name__, str(e)
    return "ok", type(got).__name__ if not hasattr(got, "shape") else tuple(got.shape)


@pytest.mark.parametrize("method,target", [
    ("get_submodule", ""), ("get_submodule", "0.heads.a"), ("get_submodule", "0.stack.2.0"),
    ("get_submodule", "0.nope"), ("get_submodule", "0.conv.weight"), ("get_submodule", "0.rnn.hidden_size"),
    ("get_parameter", "0.bn.weight"), ("get_parameter", "0.extra.1"), ("get_parameter", "0.bn.running_mean"),
    ("get_parameter", "0.bn.gone"), ("get_parameter", "0.conv.bias"), ("get_buffer", "0.bn.running_var"),
    ("get_buffer", "0.tmp"), ("get_buffer", "0.bn.weight"), ("get_buffer", "0.missing.x"),
])
def test_lookups_by_dotted_name(method, target):
    t, f = _net(torch), _net(flame)
    assert _outcome(lambda: getattr(f, method)(target)) == _outcome(lambda: getattr(t, method)(target))


@pytest.mark.parametrize("target,strict", [("0.heads.c", False), ("0.heads.c", True), ("0.heads.a", True),
                                           ("0.scale", False), ("", False), ("0.nope.x", False)])
def test_set_submodule(target, strict):
    t, f = _net(torch), _net(flame)
    want = _outcome(lambda: t.set_submodule(target, torch.nn.Tanh(), strict=strict))
    assert _outcome(lambda: f.set_submodule(target, flame.nn.Tanh(), strict=strict)) == want
    if want[0] == "ok":
        assert type(f.get_submodule(target)).__name__ == "Tanh"
        assert [n for n, _ in f.named_modules()] == [n for n, _ in t.named_modules()]
    assert _outcome(lambda: f.set_submodule("0.x", flame.ones(1)))[0] == "ValueError"  # not a module


@pytest.mark.parametrize("name,args,kw", [
    ("BatchNorm1d", (3,), {}), ("BatchNorm2d", (3,), dict(bias=False)), ("SyncBatchNorm", (3,), {}),
    ("InstanceNorm1d", (3,), {}), ("InstanceNorm2d", (3,), dict(affine=True, bias=False)),
    ("LazyBatchNorm1d", (), {}), ("GroupNorm", (1, 3), {}), ("GroupNorm", (1, 3), dict(bias=False)),
    ("LayerNorm", (3,), {}), ("LayerNorm", ((2, 3),), dict(bias=False)), ("RMSNorm", (3,), {}),
])
def test_norm_reprs_name_their_bias(name, args, kw):
    assert repr(getattr(flame.nn, name)(*args, **kw)) == repr(getattr(torch.nn, name)(*args, **kw))


@pytest.mark.parametrize("name,args,attr,new", [
    ("LeakyReLU", (0.2,), "negative_slope", 0.5), ("Softmax", (0,), "dim", 1), ("ELU", (), "alpha", 2.0),
    ("Hardtanh", (-2.0, 2.0), "max_val", 0.5), ("PixelShuffle", (2,), "upscale_factor", 1),
    ("GELU", (), "approximate", "tanh"),
])
def test_activation_arguments_are_attributes_as_torchs(name, args, attr, new):
    """A layer's arguments read as torch's attributes, and one set after construction is the one the next
    call uses (as torch's modules read them in forward)."""
    theirs, mine = getattr(torch.nn, name)(*args), getattr(flame.nn, name)(*args)
    assert getattr(mine, attr) == getattr(theirs, attr)
    setattr(theirs, attr, new)
    setattr(mine, attr, new)
    x = np.random.default_rng(0).standard_normal((2, 4, 2, 3)) * 3
    np.testing.assert_allclose(mine(flame.tensor(x)).numpy(), theirs(torch.tensor(x)).numpy(), rtol=1e-12)
    assert repr(mine) == repr(theirs)


@pytest.mark.parametrize("make", [lambda nn: nn.Fold((4, 5), 2, padding=1), lambda nn: nn.Unfold((2, 3), stride=2),
                                  lambda nn: nn.Upsample(size=3), lambda nn: nn.Upsample(scale_factor=(2.0, 1.5)),
                                  lambda nn: nn.Upsample()])
def test_resampling_layer_reprs(make):
    assert repr(make(flame.nn)) == repr(make(torch.nn))


@pytest.mark.parametrize("make", [
    lambda n: n.Linear(3, 3),
    lambda n: n.Module(),
    lambda n: n.Sequential(n.Linear(2, 3), n.ReLU(), n.Sequential(n.Conv2d(1, 2, 3))),
    lambda n: n.MultiheadAttention(8, 2),
    lambda n: n.LSTM(3, 4),
    lambda n: n.utils.parametrizations.weight_norm(n.Linear(3, 3)),
    lambda n: n.ModuleList([n.Linear(2, 2), n.Linear(2, 2), n.ReLU(), n.Linear(2, 2), n.Linear(2, 2), n.Linear(2, 2)]),
    lambda n: n.ModuleList([n.Sequential(n.ReLU(), n.Tanh())] * 2),
    lambda n: n.ModuleList(),
    lambda n: n.Conv2d(4, 6, 3, padding="same", padding_mode="reflect", dilation=2, groups=2, bias=False),
    lambda n: n.Conv1d(4, 6, 3, padding=1, padding_mode="circular"),
    lambda n: n.ConvTranspose2d(4, 6, 3, stride=2, output_padding=1),
    lambda n: n.ConvTranspose3d(4, 6, 3, stride=2, output_padding=(0, 1, 0), groups=2),
    lambda n: n.Upsample(scale_factor=2, mode="bilinear"),
    lambda n: n.UpsamplingNearest2d(scale_factor=3),
    lambda n: n.AvgPool1d(3), lambda n: n.AvgPool1d(3, 2, 1, ceil_mode=True),
    lambda n: n.Flatten(), lambda n: n.Flatten(0, 2), lambda n: n.Unflatten(1, (2, 2)),
    lambda n: n.ConstantPad2d(1, 2.0), lambda n: n.ConstantPad1d((1, 2), 0.0), lambda n: n.ZeroPad2d(1),
], ids=["leaf", "empty", "nested", "extra and child", "rnn", "parametrized", "module list runs",
        "module list same object", "empty module list", "conv padding_mode", "conv1d circular",
        "conv transpose output_padding", "conv transpose 3d", "upsample float factor", "upsampling nearest",
        "avg pool 1d", "avg pool 1d args", "flatten", "flatten dims", "unflatten", "constant pad",
        "constant pad zero", "zero pad"])
def test_module_repr_lays_out_extra_repr_and_children_as_torch(make):
    """A module with both an extra_repr and children puts the extra_repr on its own line, as torch's."""
    assert repr(make(flame.nn)) == repr(make(torch.nn))


def test_identity_ignores_constructor_arguments():
    # PyTorch's Identity accepts any arguments so it can replace a layer in code that builds one
    for lib in (torch, flame):
        m = lib.nn.Identity(54, unused_argument=0.1)
        assert list(m.parameters()) == []
        x = lib.tensor(np.arange(3.0))
        assert m(x) is x


@pytest.mark.parametrize("strict", [True, False])
def test_norm_state_without_num_batches_tracked_loads(strict):
    """A state dict without num_batches_tracked (PyTorch's norms before its version 2, or one built by hand)
    loads as torch's does: the module keeps its own count, no key is missing."""
    results = []
    for lib in (torch, flame):
        mine, src = (lib.nn.Sequential(lib.nn.Linear(3, 3), lib.nn.BatchNorm1d(3),
                                       lib.nn.InstanceNorm1d(3, track_running_stats=True)) for _ in range(2))
        mine[1].num_batches_tracked.fill_(7)
        src[1].running_mean.fill_(0.5)
        sd = {k: v for k, v in src.state_dict().items() if "num_batches_tracked" not in k}
        keys = mine.load_state_dict(sd, strict=strict)
        results.append((list(keys.missing_keys), list(keys.unexpected_keys), int(mine[1].num_batches_tracked),
                        int(mine[2].num_batches_tracked), float(mine[1].running_mean[0])))
    assert results[1] == results[0] == ([], [], 7, 0, 0.5)


@pytest.mark.parametrize("make", [
    lambda n: n.EmbeddingBag(5, 3, padding_idx=0, include_last_offset=True),
    lambda n: n.EmbeddingBag(5, 3, mode="max", padding_idx=-1),
    lambda n: n.TripletMarginWithDistanceLoss(margin=0.5),
], ids=["embedding bag padding_idx", "embedding bag negative padding_idx", "triplet loss default distance"])
def test_reprs_name_what_torchs_name(make):
    """EmbeddingBag's repr names padding_idx; TripletMarginWithDistanceLoss's default distance is a
    PairwiseDistance child, as torch's."""
    assert repr(make(flame.nn)) == repr(make(torch.nn))


@pytest.mark.parametrize("kind", ["ParameterList", "ParameterDict"])
def test_parameter_container_reprs_list_their_parameters_as_torchs(kind):
    """One line per parameter, `(key): Parameter containing: [<dtype> of size 3x4]`, as torch's (flame's
    dtype and tensor-type names in the place of torch's)."""
    def build(lib):
        values = [lib.ones(2), lib.zeros(3, 4, dtype=lib.float64)]
        container = getattr(lib.nn, kind)(values if kind == "ParameterList" else {"a": values[0], "b": values[1]})
        outer = lib.nn.Module()
        outer.p = container
        return repr(outer)

    names = {"torch.float32": "flame.f32", "torch.float64": "flame.f64", "torch.FloatTensor": "flame.FloatTensor",
             "torch.DoubleTensor": "flame.DoubleTensor"}
    want = build(torch)
    for theirs, ours in names.items():
        want = want.replace(theirs, ours)
    assert build(flame) == want
