"""F.embedding_bag and nn.EmbeddingBag with mode="max" and offsets against torch: bags of several entries,
an empty bag, repeated indices, include_last_offset (entries past the last offset join the last bag, in
every mode), padding_idx; values and the weight's gradient in f64, eagerly and inside @flame.compile."""

import numpy as np
import pytest
import torch

import flame

RNG = np.random.default_rng(0)
WEIGHT = RNG.standard_normal((10, 4))
INPUT = np.array([1, 2, 4, 5, 4, 3, 2, 9, 9, 0])
CASES = {
    "bags": dict(offsets=[0, 3, 3, 7]),  # an empty bag
    "one bag": dict(offsets=[0]),
    "include_last_offset": dict(offsets=[0, 2, 5, 8], include_last_offset=True),
    "padding_idx": dict(offsets=[0, 2, 4, 7, 9], padding_idx=9),  # a bag holding only padding
}


def _run(L, case, compiled=False, mode="max"):
    kw = dict(CASES[case])
    offsets = L.tensor(np.array(kw.pop("offsets")))
    g = np.cos(np.arange(40.0))

    def body(w):
        return L.nn.functional.embedding_bag(L.tensor(INPUT), w, offsets, mode=mode, **kw)

    if L is flame:
        def step(w):
            y = body(w)
            return y, flame.grad(lambda v: (body(v) * flame.tensor(g[: y.numel()].reshape(y.shape))).sum())(w)
        y, gw = (flame.compile(step) if compiled else step)(flame.tensor(WEIGHT))
        return y.numpy(), gw.numpy()
    w = torch.tensor(WEIGHT, requires_grad=True)
    y = body(w)
    (y * torch.tensor(g[: y.numel()].reshape(y.shape))).sum().backward()
    return y.detach().numpy(), w.grad.numpy()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mode", ["max", "sum", "mean"])
def test_bags_match_torch(mode, case, compiled):
    want, want_grad = _run(torch, case, mode=mode)
    got, got_grad = _run(flame, case, compiled, mode=mode)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-12, atol=0)


def test_the_module():
    torch.manual_seed(0)
    t = torch.nn.EmbeddingBag(10, 4, mode="max").double()
    f = flame.nn.EmbeddingBag(10, 4, mode="max")
    f.weight = flame.nn.Parameter(flame.tensor(t.weight.detach().numpy()))
    offsets = [0, 3, 3, 7]
    want = t(torch.tensor(INPUT), torch.tensor(offsets)).detach().numpy()
    got = f(flame.tensor(INPUT), flame.tensor(np.array(offsets))).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("offsets", [[1, 2], [0, 3, 2], [0, 2, 6]], ids=["first", "decreasing", "past the end"])
def test_offsets_torch_refuses_raise(offsets):
    """A first offset other than 0, a decreasing one and one past the input's length raise (flame read them);
    torch refuses the first and the last, and a decreasing one fails an internal check or reads garbage."""
    weight, indices = np.random.default_rng(0).standard_normal((5, 2)), np.array([1, 2, 3, 4, 0])
    if offsets != [0, 3, 2]:
        with pytest.raises(RuntimeError):
            torch.nn.functional.embedding_bag(torch.tensor(indices), torch.tensor(weight), torch.tensor(offsets))
    with pytest.raises(IndexError, match=r"offsets(.|\n)*test_embedding_bag_max"):
        flame.nn.functional.embedding_bag(flame.tensor(indices), flame.tensor(weight), flame.tensor(offsets))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("cotangent", [np.inf, np.nan])
@pytest.mark.parametrize("offsets", [None, [0, 3]], ids=["2-D input", "offsets"])
def test_an_infinite_or_nan_cotangent_reaches_only_the_max(offsets, cotangent, compiled):
    """torch's max backward gives the cotangent to each bag's max and 0 to its other entries whatever the
    cotangent (a select): flame's scattered it through a product with 0, an infinite one giving NaN to
    them (an inf var fed to embedding_bag, found by the random-program fuzzer)."""
    index = np.array([[1, 1, 0, 1], [2, 3, 3, 5]]) if offsets is None else np.array([1, 1, 0, 1, 1, 4, 2])
    grads = []
    for L in (torch, flame):
        def step(w, g, L=L):
            out = L.nn.functional.embedding_bag(L.tensor(index), w, None if offsets is None else L.tensor(offsets),
                                                mode="max")
            return L.autograd.grad(out, [w], grad_outputs=g)[0]

        run = flame.compile(step) if L is flame and compiled else step
        grads.append(run(L.tensor(WEIGHT, requires_grad=True), L.tensor(np.full((2, 4), cotangent))).numpy())
    np.testing.assert_array_equal(grads[1], grads[0])
