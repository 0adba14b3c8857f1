"""PyTorch's "Training a Classifier" tutorial (CIFAR-10), ported by swapping `torch` for `flame`, on
random CIFAR-sized data: its Net (conv / max-pool / linear with `torch.flatten(x, 1)`), a
TensorDataset in a DataLoader of batch 4, CrossEntropyLoss, SGD(lr=0.001, momentum=0.9), the
running_loss printed through `.item()` every few batches, the test loop with `torch.max(outputs.data,
1)` and `(predicted == labels).sum().item()` under torch.no_grad(), and the save / load round trip
`torch.save(net.state_dict(), PATH)` then `net.load_state_dict(torch.load(PATH, weights_only=True))`.
flame starts from torch's weights (f64) and must print the same running losses, count the same
correct answers and end with the same parameters, eagerly and with the training step under
@flame.compile; flame's file must load back into flame and, through safetensors, into torch's Net."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import flame
from tests.training_idioms.common import assert_same_params, numpy_of

BATCHES, PRINT_EVERY = 6, 2


def _net(lib):
    nn, F = lib.nn, lib.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 6, 5)
            self.pool = nn.MaxPool2d(2, 2)
            self.conv2 = nn.Conv2d(6, 16, 5)
            self.fc1 = nn.Linear(16 * 5 * 5, 120)
            self.fc2 = nn.Linear(120, 84)
            self.fc3 = nn.Linear(84, 10)

        def forward(self, x):
            x = self.pool(F.relu(self.conv1(x)))
            x = self.pool(F.relu(self.conv2(x)))
            x = lib.flatten(x, 1)  # flatten all dimensions except batch
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            x = self.fc3(x)
            return x

    return Net


def _loaders(lib):
    r = np.random.default_rng(0)
    images = r.standard_normal((4 * BATCHES, 3, 32, 32)) * 0.5
    labels = r.integers(0, 10, 4 * BATCHES)
    data = lib.utils.data
    trainset = data.TensorDataset(lib.tensor(images), lib.tensor(labels))
    testset = data.TensorDataset(lib.tensor(images[:8] + 0.1), lib.tensor(labels[:8]))
    return data.DataLoader(trainset, batch_size=4, shuffle=False), data.DataLoader(testset, batch_size=4)


def _test(lib, net, testloader):
    correct = 0
    total = 0
    # since we're not training, we don't need to calculate the gradients for our outputs
    with lib.no_grad():
        for data in testloader:
            images, labels = data
            # calculate outputs by running images through the network
            outputs = net(images)
            # the class with the highest energy is what we choose as prediction
            _, predicted = lib.max(outputs.data, 1)
            total += labels.size(0)
            correct += (predicted == labels).sum().item()
    return correct, total, numpy_of(outputs)


def _train(lib, net, trainloader, compiled):
    criterion = lib.nn.CrossEntropyLoss()
    optimizer = lib.optim.SGD(net.parameters(), lr=0.001, momentum=0.9)

    def step(inputs, labels):
        # zero the parameter gradients
        optimizer.zero_grad()
        # forward + backward + optimize
        outputs = net(inputs)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()
        return loss

    step = flame.compile(step) if compiled else step
    printed = []
    running_loss = 0.0
    for i, data in enumerate(trainloader, 0):
        # get the inputs; data is a list of [inputs, labels]
        inputs, labels = data
        running_loss += step(inputs, labels).item()
        if i % PRINT_EVERY == PRINT_EVERY - 1:
            printed.append(f"[1, {i + 1:5d}] loss: {running_loss / PRINT_EVERY:.9f}")
            running_loss = 0.0
    return printed, step


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_cifar_classifier_trains_saves_and_loads_as_torch(compiled, tmp_path):
    torch.manual_seed(0)
    theirs = _net(torch)().double()
    flame.manual_seed(0)
    mine = _net(flame)().double()
    mine.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    t_train, t_test = _loaders(torch)
    f_train, f_test = _loaders(flame)
    want, _ = _train(torch, theirs, t_train, False)
    got, step = _train(flame, mine, f_train, compiled)
    assert got == want and len(got) == BATCHES // PRINT_EVERY
    assert_same_params(mine, theirs, rtol=1e-9, atol=1e-13)
    if compiled:
        assert step.stats().traces == 1, step.stats()

    PATH = str(tmp_path / "cifar_net.pth")
    flame.save(mine.state_dict(), PATH)
    net = _net(flame)().double()
    net.load_state_dict(flame.load(PATH, weights_only=True))
    assert_same_params(net, mine, rtol=0, atol=0, what="reloaded")
    t_net = _net(torch)().double()
    t_net.load_state_dict(load_file(PATH))  # flame's file, read by safetensors into torch's Net
    assert_same_params(t_net, theirs, rtol=1e-9, atol=1e-13, what="torch's Net from flame's file")

    t_correct = _test(torch, theirs, t_test)
    f_correct = _test(flame, net, f_test)
    assert f_correct[:2] == t_correct[:2] and f_correct[1] == 8
    np.testing.assert_allclose(f_correct[2], t_correct[2], rtol=1e-9, atol=1e-12)


def test_utils_data_is_reached_from_the_package_as_torchs():
    """`flame.utils.data.DataLoader` after a plain `import flame` (in a fresh interpreter: here another
    test may have imported flame.utils.data already)."""
    code = "import flame; print(flame.utils.data.DataLoader.__name__, flame.utils.data.TensorDataset.__name__)"
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "FLAME_DEVICE": "reference"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["DataLoader", "TensorDataset"]
