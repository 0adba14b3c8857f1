"""PyTorch's DCGAN tutorial, ported by swapping `torch` for `flame`: a generator of ConvTranspose2d +
BatchNorm2d + ReLU ending in Tanh, a discriminator of Conv2d + LeakyReLU + BatchNorm2d ending in
Sigmoid, `weights_init` through `model.apply` (`m.weight.data.normal_`, `nn.init.normal_`,
`nn.init.constant_`), BCELoss, two Adam optimizers with betas=(0.5, 0.999), labels from
`torch.full(..., dtype=..., device=device)` changed with `label.fill_`, `netD.zero_grad()`, the discriminator's
step on `fake.detach()` and the generator's on `fake`. flame starts from torch's weights and takes
the same images and noise (the tutorial's `torch.randn` noise is passed in, the one change); losses,
D(x), D(G(z)) and every parameter and BatchNorm statistic must agree, eagerly and with the
iteration under @flame.compile. The compiled iteration returns D(x) and D(G(z)) as tensors where the
tutorial calls `.item()` in the loop body (a value read while tracing is refused)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, numpy_of

NZ, NGF, NDF, NC, BATCH, STEPS = 8, 4, 4, 3, 6, 3


def _models(lib):
    """The tutorial's Generator and Discriminator (three layers each, for 16x16 images)."""
    nn = lib.nn

    class Generator(nn.Module):
        def __init__(self, ngpu):
            super(Generator, self).__init__()  # noqa: UP008 (the tutorial's spelling)
            self.ngpu = ngpu
            self.main = nn.Sequential(
                nn.ConvTranspose2d(NZ, NGF * 4, 4, 1, 0, bias=False),
                nn.BatchNorm2d(NGF * 4),
                nn.ReLU(True),
                nn.ConvTranspose2d(NGF * 4, NGF * 2, 4, 2, 1, bias=False),
                nn.BatchNorm2d(NGF * 2),
                nn.ReLU(True),
                nn.ConvTranspose2d(NGF * 2, NC, 4, 2, 1, bias=False),
                nn.Tanh(),
            )

        def forward(self, input):
            return self.main(input)

    class Discriminator(nn.Module):
        def __init__(self, ngpu):
            super(Discriminator, self).__init__()  # noqa: UP008
            self.ngpu = ngpu
            self.main = nn.Sequential(
                nn.Conv2d(NC, NDF, 4, 2, 1, bias=False),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(NDF, NDF * 2, 4, 2, 1, bias=False),
                nn.BatchNorm2d(NDF * 2),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(NDF * 2, 1, 4, 1, 0, bias=False),
                nn.Sigmoid(),
            )

        def forward(self, input):
            return self.main(input)

    def weights_init(m):
        classname = m.__class__.__name__
        if classname.find("Conv") != -1:
            m.weight.data.normal_(0.0, 0.02)
        elif classname.find("BatchNorm") != -1:
            nn.init.normal_(m.weight.data, 1.0, 0.02)
            nn.init.constant_(m.bias.data, 0)

    netG, netD = Generator(1), Discriminator(1)
    netG.apply(weights_init)
    netD.apply(weights_init)
    return netG, netD


def _trainer(lib, netG, netD, dtype, compiled):
    """The tutorial's loop body: (real images, noise) -> (errD, errG, D(x), D(G(z)) before and after)."""
    nn, optim = lib.nn, lib.optim
    criterion = nn.BCELoss()
    real_label, fake_label = 1.0, 0.0
    optimizerD = optim.Adam(netD.parameters(), lr=0.0002, betas=(0.5, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=0.0002, betas=(0.5, 0.999))

    device = lib.device("cuda:0" if lib.cuda.is_available() else "cpu")

    def iteration(data, noise):
        # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
        netD.zero_grad()
        real_cpu = data.to(device)
        b_size = real_cpu.size(0)
        label = lib.full((b_size,), real_label, dtype=dtype, device=device)
        output = netD(real_cpu).view(-1)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean()
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach()).view(-1)
        errD_fake = criterion(output, label)
        errD_fake.backward()
        D_G_z1 = output.mean()
        errD = errD_real + errD_fake
        optimizerD.step()
        # (2) Update G network: maximize log(D(G(z)))
        netG.zero_grad()
        label.fill_(real_label)
        output = netD(fake).view(-1)
        errG = criterion(output, label)
        errG.backward()
        D_G_z2 = output.mean()
        optimizerG.step()
        return errD, errG, D_x, D_G_z1, D_G_z2

    return flame.compile(iteration) if compiled else iteration


def _data(np_dtype):
    r = np.random.default_rng(0)
    return [
        (
            np.tanh(r.standard_normal((BATCH, NC, 16, 16))).astype(np_dtype),
            r.standard_normal((BATCH, NZ, 1, 1)).astype(np_dtype),
        )
        for _ in range(STEPS)
    ]


def test_weights_init_through_apply_draws_the_tutorials_distributions():
    flame.manual_seed(0)
    netG, netD = _models(flame)
    convs = [m for m in [*netG.modules(), *netD.modules()] if type(m).__name__.find("Conv") != -1]
    w = np.concatenate([m.weight.numpy().ravel() for m in convs])
    assert len(convs) == 6 and abs(w.mean()) < 0.004 and 0.017 < w.std() < 0.023
    bns = [m for m in [*netG.modules(), *netD.modules()] if type(m).__name__ == "BatchNorm2d"]
    g = np.concatenate([m.weight.numpy() for m in bns])
    assert len(bns) == 3 and abs(g.mean() - 1) < 0.02 and 0.005 < g.std() < 0.04
    assert all((m.bias.numpy() == 0).all() for m in bns)


@pytest.mark.parametrize(
    "precision,compiled",
    [("f64", False), ("f64", True), ("f32", True)],
    ids=["f64-eager", "f64-compiled", "f32-compiled"],
)  # f32: the tutorial's dtype
def test_dcgan_trains_as_torch(precision, compiled):
    np_dtype = np.float32 if precision == "f32" else np.float64
    torch.manual_seed(0)
    tG, tD = _models(torch)
    flame.manual_seed(0)
    fG, fD = _models(flame)
    if precision == "f64":
        for m in (tG, tD, fG, fD):
            m.double()
    for mine, theirs in ((fG, tG), (fD, tD)):
        mine.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    t_step = _trainer(torch, tG, tD, torch.float if precision == "f32" else torch.float64, False)
    f_step = _trainer(flame, fG, fD, flame.float if precision == "f32" else flame.float64, compiled)
    tol = dict(rtol=2e-4, atol=2e-6) if precision == "f32" else dict(rtol=1e-9, atol=1e-12)
    for i, (real, noise) in enumerate(_data(np_dtype)):
        want = [t.item() for t in t_step(torch.tensor(real), torch.tensor(noise))]
        got = [t.item() for t in f_step(flame.tensor(real), flame.tensor(noise))]
        np.testing.assert_allclose(got, want, **tol, err_msg=f"errD, errG, D(x), D(G(z)) at step {i}")
    # Adam's first steps move each weight by about lr whatever its gradient's size: compare at lr's scale
    ptol = dict(rtol=1e-3, atol=1e-6) if precision == "f32" else dict(rtol=1e-8, atol=1e-12)
    assert_same_params(fG, tG, **ptol, what="generator")
    assert_same_params(fD, tD, **ptol, what="discriminator")
    if compiled:
        assert f_step.stats().traces == 1, f_step.stats()
    assert numpy_of(fG.main[1].running_var).dtype == np_dtype
