"""flame.tensor copies its data as torch.tensor does; as_tensor / from_numpy share (issue 14 item 4);
flame.ones / zeros take requires_grad= (item 12)."""

import numpy as np
import pytest

import flame


def test_tensor_copies_the_callers_array():
    a = np.zeros(3, np.float32)
    t = flame.tensor(a)
    a[0] = 42
    assert t.numpy()[0] == 0
    t2 = flame.tensor(t)
    t.add_(1)
    assert t2.numpy()[0] == 0


def test_sgd_step_leaves_the_initial_array_alone():
    w0 = np.ones(3, np.float32)
    p = flame.nn.Parameter(flame.tensor(w0))
    opt = flame.optim.SGD([p], lr=0.5)
    (p * 2.0).sum().backward()
    opt.step()
    np.testing.assert_array_equal(w0, np.ones(3, np.float32))
    np.testing.assert_array_equal(p.numpy(), np.zeros(3, np.float32))


def test_read_only_array_can_be_updated_in_place_after_tensor():
    a = np.zeros(2, np.float32)
    a.flags.writeable = False
    t = flame.tensor(a)
    t.add_(1)
    np.testing.assert_array_equal(t.numpy(), np.ones(2, np.float32))


def test_from_numpy_and_as_tensor_share_on_the_reference_executor():
    if flame.get_device() != "reference":
        pytest.skip("on a GPU from_numpy copies to the device")
    a = np.zeros(3, np.float32)
    t, u = flame.from_numpy(a), flame.as_tensor(a)
    a[1] = 7
    assert t.numpy()[1] == 7 and u.numpy()[1] == 7
    assert flame.as_tensor(t) is t


def test_ones_and_zeros_take_requires_grad():
    assert flame.ones(2, requires_grad=True).requires_grad
    assert flame.zeros(2, 3, requires_grad=True).requires_grad
    assert not flame.zeros(2).requires_grad
