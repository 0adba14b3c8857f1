"""The convolutional layers as modules: a torch state_dict (BatchNorm's num_batches_tracked included)
loads and gives torch's outputs; BatchNorm's running statistics after several steps, eager and inside
@flame.compile, equal torch's; a compiled CNN training step tracks torch over several AdamW steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as tnn

import flame
import flame.nn as nn
import flame.nn.functional as F
import flame.optim as optim


class _Net:
    """The same small CNN in both libraries: conv + BN + ReLU, a residual depthwise conv, GroupNorm +
    SiLU, a transposed conv, pooling, nearest upsampling and a linear head."""

    @staticmethod
    def build(lib):
        class Net(lib.Module):
            def __init__(self):
                super().__init__()
                self.conv1 = lib.Conv2d(1, 8, 3, padding=1, bias=False)  # a bias before BN has a zero gradient
                self.bn1 = lib.BatchNorm2d(8)
                self.dw = lib.Conv2d(8, 8, 3, padding="same", groups=8, bias=False)
                self.gn = lib.GroupNorm(4, 8)
                self.down = lib.Conv2d(8, 12, 3, stride=2, padding=1)
                self.up = lib.ConvTranspose2d(12, 6, 2, stride=2, bias=False)
                self.bn2 = lib.BatchNorm2d(6, momentum=None)
                self.pool = lib.MaxPool2d(2)
                self.avg = lib.AdaptiveAvgPool2d(1)
                self.head = lib.Linear(6, 5)

            def forward(self, x):
                fn = F if lib is nn else torch.nn.functional
                h = fn.relu(self.bn1(self.conv1(x)))
                h = h + fn.silu(self.gn(self.dw(h)))
                h = self.up(fn.relu(self.down(h)))
                h = fn.relu(self.bn2(h))
                h = self.pool(h)
                return self.head(self.avg(h).flatten(1))

        return Net()


def _models(seed=0):
    torch.manual_seed(seed)
    th = _Net.build(tnn)
    fl = _Net.build(nn)
    fl.load_state_dict(th.state_dict())
    return fl, th


def _batch(rng, n=6):
    return rng.standard_normal((n, 1, 8, 8)).astype(np.float32), rng.integers(0, 5, n)


def test_torch_state_dict_loads_and_matches_in_train_and_eval():
    fl, th = _models()
    assert list(fl.state_dict()) == list(th.state_dict())
    assert fl.bn1.num_batches_tracked.dtype == flame.i64
    x, _ = _batch(np.random.default_rng(0))
    for mode in ("train", "eval"):
        getattr(fl, mode)()
        getattr(th, mode)()
        np.testing.assert_allclose(fl(flame.tensor(x)).numpy(), th(torch.tensor(x)).detach().numpy(),
                                   rtol=1e-4, atol=1e-5)
    for k, v in th.state_dict().items():  # the train-mode call updated the same running statistics
        np.testing.assert_allclose(fl.state_dict()[k].numpy(), v.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("kw", [{}, {"momentum": None}, {"momentum": 0.3, "affine": False},
                                {"track_running_stats": False}])
def test_batchnorm_running_stats_after_several_steps(compiled, kw):
    rng = np.random.default_rng(1)
    fl, th = nn.BatchNorm2d(3, **kw), tnn.BatchNorm2d(3, **kw)
    fwd = flame.compile(lambda x: fl(x)) if compiled else fl
    for step in range(4):
        x = (rng.standard_normal((5, 3, 4, 3)) * (step + 1) + step).astype(np.float32)
        np.testing.assert_allclose(fwd(flame.tensor(x)).numpy(), th(torch.tensor(x)).detach().numpy(),
                                   rtol=1e-5, atol=1e-5)
    assert list(fl.state_dict()) == list(th.state_dict())
    for k, v in th.state_dict().items():
        np.testing.assert_allclose(fl.state_dict()[k].numpy(), v.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
    fl.eval()
    th.eval()
    x = rng.standard_normal((2, 3, 4, 3)).astype(np.float32)
    fwd = flame.compile(lambda x: fl(x)) if compiled else fl  # the mode is structural: trace the eval step anew
    np.testing.assert_allclose(fwd(flame.tensor(x)).numpy(), th(torch.tensor(x)).detach().numpy(), rtol=1e-5,
                               atol=1e-5)


def test_batchnorm1d_on_2d_and_3d_inputs():
    rng = np.random.default_rng(2)
    fl, th = nn.BatchNorm1d(4), tnn.BatchNorm1d(4)
    for shape in ((8, 4), (3, 4, 5)):
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(fl(flame.tensor(x)).numpy(), th(torch.tensor(x)).detach().numpy(),
                                   rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fl.running_var.numpy(), th.running_var.numpy(), rtol=1e-6)
    with pytest.raises(flame.ShapeError, match="2-D or 3-D"):
        fl(flame.zeros(2, 4, 3, 3))


def test_compiled_cnn_training_tracks_torch_over_adamw_steps():
    fl, th = _models(3)
    opt = optim.AdamW(fl.parameters(), lr=3e-3, weight_decay=0.01)
    opt_t = torch.optim.AdamW(th.parameters(), lr=3e-3, weight_decay=0.01)

    @flame.compile
    def step(x, y):
        loss = F.cross_entropy(fl(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    rng = np.random.default_rng(4)
    for _ in range(5):
        x, y = _batch(rng)
        loss = step(flame.tensor(x), flame.tensor(y))
        loss_t = torch.nn.functional.cross_entropy(th(torch.tensor(x)), torch.tensor(y))
        opt_t.zero_grad()
        loss_t.backward()
        opt_t.step()
        np.testing.assert_allclose(loss.item(), loss_t.item(), rtol=1e-4)
    for (name, p), (_, pt) in zip(fl.state_dict().items(), th.state_dict().items()):
        np.testing.assert_allclose(p.numpy(), pt.detach().numpy(), rtol=2e-4, atol=2e-5, err_msg=name)


def test_layer_constructors_check_their_arguments():
    with pytest.raises(flame.ShapeError, match="groups=3 must divide"):
        nn.Conv2d(4, 6, 3, groups=3)
    with pytest.raises(flame.ShapeError, match="must divide num_channels"):
        nn.GroupNorm(3, 8)
    with pytest.raises(ValueError, match="padding_mode"):
        nn.ConvTranspose2d(2, 2, 3, padding_mode="reflect")
    with pytest.raises(flame.ShapeError, match="8 channels"):
        nn.GroupNorm(2, 8)(flame.zeros(1, 4, 2, 2))


def test_module_layers_match_torch_layers():
    """Upsample / AvgPool2d / ConvTranspose2d(output_size) / Conv1d / Conv3d with torch's weights."""
    rng = np.random.default_rng(5)
    torch.manual_seed(5)
    pairs = [(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
              tnn.Upsample(scale_factor=2, mode="bilinear", align_corners=True), (1, 2, 3, 4)),
             (nn.AvgPool2d(3, 2, 1, count_include_pad=False), tnn.AvgPool2d(3, 2, 1, count_include_pad=False),
              (2, 2, 7, 7)),
             (nn.Conv1d(3, 4, 5, padding="same", dilation=2), tnn.Conv1d(3, 4, 5, padding="same", dilation=2),
              (2, 3, 11)),
             (nn.Conv3d(2, 4, 3, stride=2, padding=1), tnn.Conv3d(2, 4, 3, stride=2, padding=1), (1, 2, 5, 5, 5))]
    for fl, th, shape in pairs:
        fl.load_state_dict(th.state_dict())
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(fl(flame.tensor(x)).numpy(), th(torch.tensor(x)).detach().numpy(), rtol=1e-5,
                                   atol=1e-5, err_msg=type(fl).__name__)
    fl, th = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1), tnn.ConvTranspose2d(3, 2, 3, stride=2, padding=1)
    fl.load_state_dict(th.state_dict())
    x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(fl(flame.tensor(x), output_size=(8, 8)).numpy(),
                               th(torch.tensor(x), output_size=(8, 8)).detach().numpy(), rtol=1e-5, atol=1e-5)
