"""PyTorch's examples/vae (main.py), ported by swapping `torch` for `flame`: fc1 -> (fc21, fc22) encoder,
`reparameterize` with `std = torch.exp(0.5*logvar)` and `eps = torch.randn_like(std)`, a sigmoid decoder,
`forward` on `x.view(-1, 784)`, `loss_function` = `F.binary_cross_entropy(..., reduction='sum')` plus
`KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())`, Adam(lr=1e-3), train() summing
`loss.item()` and test() under `torch.no_grad()` building the comparison image with `torch.cat` of
`recon_batch.view(args.batch_size, 1, 28, 28)[:n]`, then a sample decoded from `torch.randn(64, 20)`.
Images are 8x8 and the layers narrow; `torch.randn_like` / `torch.randn` give both libraries the same
draws (the one change: a namespace whose randn_like and randn hand out pre-drawn noise). flame starts
from torch's weights (f64) and must give the same losses, gradients, parameters and images, eagerly
and with the training step under @flame.compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, numpy_of

PIXELS, HIDDEN, LATENT, BATCH, STEPS = 64, 16, 3, 5, 4


class _SameNoise:
    """`lib` with randn_like / randn answering the noise drawn for this step: both libraries see the
    same eps. `advance()` (outside the training step) writes the next draws into one buffer per shape,
    which a compiled step reads as an input at every call."""

    def __init__(self, lib, draws):
        self._lib, self._draws = lib, {}
        for a in draws:
            self._draws.setdefault(a.shape, []).append(a)
        self._draws = {k: iter(v) for k, v in self._draws.items()}
        self._bufs = {k: lib.zeros(*k, dtype=lib.float64) for k in self._draws}

    def __getattr__(self, name):
        return getattr(self._lib, name)

    def advance(self):
        with self._lib.no_grad():
            for shape, buf in self._bufs.items():
                buf.copy_(self._lib.tensor(next(self._draws[shape])))

    def randn_like(self, t):
        return self._bufs[tuple(t.shape)]

    def randn(self, *shape):
        return self._bufs[shape]


def _vae(lib):
    nn, F, torch = lib.nn, lib.nn.functional, lib

    class VAE(nn.Module):
        def __init__(self):
            super(VAE, self).__init__()  # noqa: UP008 (the example's spelling)
            self.fc1 = nn.Linear(PIXELS, HIDDEN)
            self.fc21 = nn.Linear(HIDDEN, LATENT)
            self.fc22 = nn.Linear(HIDDEN, LATENT)
            self.fc3 = nn.Linear(LATENT, HIDDEN)
            self.fc4 = nn.Linear(HIDDEN, PIXELS)

        def encode(self, x):
            h1 = F.relu(self.fc1(x))
            return self.fc21(h1), self.fc22(h1)

        def reparameterize(self, mu, logvar):
            std = torch.exp(0.5 * logvar)
            eps = torch.randn_like(std)
            return mu + eps * std

        def decode(self, z):
            h3 = F.relu(self.fc3(z))
            return torch.sigmoid(self.fc4(h3))

        def forward(self, x):
            mu, logvar = self.encode(x.view(-1, PIXELS))
            z = self.reparameterize(mu, logvar)
            return self.decode(z), mu, logvar

    return VAE()


def _run(lib, model, images, compiled):
    """main.py's train() for each batch, then test() and the sample: (losses, first gradients, test
    loss, comparison image, sample)."""
    torch, F = lib, lib.nn.functional
    optimizer = lib.optim.Adam(model.parameters(), lr=1e-3)

    def loss_function(recon_x, x, mu, logvar):
        BCE = F.binary_cross_entropy(recon_x, x.view(-1, PIXELS), reduction="sum")
        KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        return BCE + KLD

    def train_step(data):
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        optimizer.step()
        return loss, grads

    step = flame.compile(train_step) if compiled else train_step
    model.train()
    train_loss, losses, first_grads = 0, [], None
    for data in images[:-1]:
        lib.advance()
        loss, grads = step(lib.tensor(data))
        train_loss += loss.item()
        losses.append(loss.item())
        first_grads = first_grads or [numpy_of(g) for g in grads]
    model.eval()
    test_loss = 0
    lib.advance()
    with torch.no_grad():
        data = lib.tensor(images[-1])
        recon_batch, mu, logvar = model(data)
        test_loss += loss_function(recon_batch, data, mu, logvar).item()
        n = min(data.size(0), 8)
        comparison = torch.cat([data[:n], recon_batch.view(BATCH, 1, 8, 8)[:n]])
        sample = torch.randn(64, LATENT)
        sample = model.decode(sample).cpu()
    if compiled:
        assert step.stats().traces == 1, step.stats()
    return losses, first_grads, train_loss, test_loss, numpy_of(comparison), numpy_of(sample)


def _draws():
    r = np.random.default_rng(0)
    images = [r.uniform(0, 1, (BATCH, 1, 8, 8)) for _ in range(STEPS + 1)]
    noise = [r.standard_normal((BATCH, LATENT)) for _ in range(STEPS + 1)]
    noise += [r.standard_normal((64, LATENT)) for _ in range(STEPS + 1)]  # the sample's, read once at the end
    return images, noise


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_vae_trains_as_torch(compiled):
    images, noise = _draws()
    tlib, flib = _SameNoise(torch, noise), _SameNoise(flame, noise)
    torch.manual_seed(0)
    theirs = _vae(tlib).double()
    mine = _vae(flib).double()
    mine.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    want = _run(tlib, theirs, images, False)
    got = _run(flib, mine, images, compiled)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10, err_msg="training losses")
    for g, w, (name, _) in zip(got[1], want[1], theirs.named_parameters()):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12, err_msg=f"first gradient of {name}")
    np.testing.assert_allclose(got[2:4], want[2:4], rtol=1e-10, err_msg="train and test loss sums")
    np.testing.assert_allclose(got[4], want[4], rtol=1e-10, atol=1e-13, err_msg="comparison image")
    assert got[4].shape == (2 * BATCH, 1, 8, 8)
    np.testing.assert_allclose(got[5], want[5], rtol=1e-10, atol=1e-13, err_msg="decoded sample")
    assert_same_params(mine, theirs, rtol=1e-8, atol=1e-11)


def test_reparameterize_draws_standard_normal_noise_like_std():
    """Unpatched, flame's randn_like is a fresh N(0, 1) draw of std's shape and dtype."""
    flame.manual_seed(0)
    model = _vae(flame).double()
    mu, logvar = flame.zeros(4000, LATENT, dtype=flame.float64), flame.zeros(4000, LATENT, dtype=flame.float64)
    z = model.reparameterize(mu, logvar).numpy()
    assert z.dtype == np.float64 and z.shape == (4000, LATENT)
    assert abs(z.mean()) < 0.05 and abs(z.std() - 1) < 0.05
    assert not np.allclose(z, model.reparameterize(mu, logvar).numpy())
