"""The module methods model code calls on torch's layers: reset_parameters (norm layers, Embedding,
EmbeddingBag, PReLU, Bilinear, the RNN cells) puts what torch's puts (ones / zeros / the init slope, a
fresh draw with the padding row zero, the uniform bound); Embedding / EmbeddingBag.from_pretrained hold
the given table, frozen or not; the RNNs' flatten_parameters and all_weights; EmbeddingBag's padding row
starts at zero and a negative padding_idx counts from the end."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame

NORMS = [("BatchNorm1d", (3,), {}), ("BatchNorm2d", (3,), dict(bias=False)),
         ("InstanceNorm1d", (3,), dict(affine=True)), ("SyncBatchNorm", (3,), {}), ("GroupNorm", (1, 3), {}),
         ("LayerNorm", ((2, 3),), {}), ("RMSNorm", (3,), {}),
         ("PReLU", (3, 0.1), {})]


@pytest.mark.parametrize("name,args,kw", NORMS, ids=[n for n, _, _ in NORMS])
def test_reset_parameters_restores_torchs_start(name, args, kw):
    theirs, mine = getattr(torch.nn, name)(*args, **kw), getattr(flame.nn, name)(*args, **kw)
    for lib, m in ((torch, theirs), (flame, mine)):
        with lib.no_grad():
            for t in [*m.parameters(), *m.buffers()]:
                t.add_(3)  # moved away from the start, num_batches_tracked too
        m.reset_parameters()
    want = {k: v.numpy() for k, v in theirs.state_dict().items()}
    got = {k: v.numpy() for k, v in mine.state_dict().items()}
    assert list(got) == list(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@pytest.mark.parametrize("name,args", [("Embedding", (50, 4, 3)), ("EmbeddingBag", (50, 4)), ("Bilinear", (30, 2, 3)),
                                       ("RNNCell", (2, 25)), ("LSTMCell", (2, 25)), ("GRUCell", (2, 25))])
def test_reset_parameters_draws_again(name, args):
    kw = dict(padding_idx=-2) if name == "EmbeddingBag" else {}
    m = getattr(flame.nn, name)(*args, **kw)
    before = [p.numpy().copy() for p in m.parameters()]
    m.reset_parameters()
    for b, p in zip(before, m.parameters()):
        assert not np.array_equal(b, p.numpy())
        if name == "Bilinear":
            assert np.abs(p.numpy()).max() <= 1 / np.sqrt(args[0])
        elif "Cell" in name:
            assert np.abs(p.numpy()).max() <= 1 / np.sqrt(args[1])
    if name.startswith("Embedding"):
        w = m.weight.numpy()
        assert not w[m.padding_idx].any() and w[np.arange(len(w)) != m.padding_idx].std() > 0.5


def test_embedding_bag_padding_row_and_negative_index_as_torch():
    theirs, mine = torch.nn.EmbeddingBag(6, 3, padding_idx=-2), flame.nn.EmbeddingBag(6, 3, padding_idx=-2)
    assert mine.padding_idx == theirs.padding_idx == 4
    assert not mine.weight.numpy()[4].any()
    for attr in ("max_norm", "norm_type", "scale_grad_by_freq", "sparse", "mode", "include_last_offset"):
        assert getattr(mine, attr) == getattr(theirs, attr), attr


@pytest.mark.parametrize("freeze", [True, False])
@pytest.mark.parametrize("name", ["Embedding", "EmbeddingBag"])
def test_from_pretrained(name, freeze):
    table = np.random.default_rng(0).standard_normal((5, 3))
    kw = dict(padding_idx=1) if name == "Embedding" else dict(mode="sum")
    theirs = getattr(torch.nn, name).from_pretrained(torch.tensor(table), freeze=freeze, **kw)
    mine = getattr(flame.nn, name).from_pretrained(flame.tensor(table), freeze=freeze, **kw)
    assert mine.weight.requires_grad == theirs.weight.requires_grad == (not freeze)
    np.testing.assert_array_equal(mine.weight.numpy(), table)
    idx = np.array([[0, 1, 4], [2, 2, 3]])
    np.testing.assert_array_equal(mine(flame.tensor(idx)).numpy(), theirs(torch.tensor(idx)).detach().numpy())
    with pytest.raises(AssertionError, match="2-dimensional"):
        getattr(flame.nn, name).from_pretrained(flame.tensor(table[0]))


@pytest.mark.parametrize("kind,kw", [("LSTM", dict(num_layers=2, bidirectional=True, proj_size=2)),
                                     ("GRU", dict(bias=False)), ("RNN", dict(num_layers=2))])
def test_rnn_all_weights_and_flatten_parameters(kind, kw):
    theirs, mine = getattr(torch.nn, kind)(3, 4, **kw), getattr(flame.nn, kind)(3, 4, **kw)
    mine.flatten_parameters()
    names = {id(p): n for n, p in mine.named_parameters()}
    want = [[tuple(p.shape) for p in group] for group in theirs.all_weights]
    assert [[tuple(p.shape) for p in group] for group in mine.all_weights] == want
    assert [names[id(p)] for group in mine.all_weights for p in group] == [n for n, _ in theirs.named_parameters()]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("first,then", [(None, 1), (0, 2), (3, -1)])
def test_embedding_padding_idx_set_after_construction(first, then, compiled):
    """The row that gets no gradient is the one padding_idx names when the layer is called."""
    from tests.nn_parity.common import check

    def build(lib):
        m = lib.nn.Embedding(5, 3, padding_idx=first)
        m.padding_idx = then
        return m

    idx = np.array([[0, 1, 4], [2, 3, 1]])

    def call(m, w):
        lib = torch if isinstance(w, torch.Tensor) else flame
        return m(lib.tensor(idx)) * w

    check(build, call, [np.random.default_rng(1).standard_normal((2, 3, 3))], compiled)
