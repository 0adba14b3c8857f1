"""nn.Module's API against torch.nn.Module's: the same model built in both libraries, the same calls,
the same results (dtypes, names, order, errors, which overrides run)."""

import pytest
import torch

import flame
import flame.nn as nn
from flame.ir.dtypes import dtype_of


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return type(e)
    return None


def _both(build):
    """build(lib, T) for torch (torch.nn, torch) and flame (flame.nn, flame)."""
    return build(torch.nn, torch), build(nn, flame)


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_to_a_non_floating_dtype_raises_and_leaves_the_parameters(dtype):
    def run(lib, T):
        m = lib.Linear(2, 2)
        err = _error(lambda: m.to(getattr(T, dtype)))
        return err, dtype_of(str(m.weight.dtype).removeprefix("torch."))

    (t_err, t_dtype), (f_err, f_dtype) = _both(run)
    assert t_err is TypeError and f_err is TypeError
    assert f_dtype == t_dtype


def test_to_dtype_error_names_the_dtype():
    with pytest.raises(TypeError, match="floating point.*i32"):
        nn.Linear(2, 2).to(dtype=flame.int32)


def test_train_and_eval_call_each_childs_own_train():
    def run(lib, T):
        class Frozen(lib.Module):
            """A child that keeps itself in eval mode, overriding train() (a common fine-tuning idiom)."""

            def __init__(self):
                super().__init__()
                self.calls = []
                self.bn = lib.BatchNorm1d(2)

            def train(self, mode=True):
                self.calls.append(mode)
                super().train(False)
                return self

        root = lib.Sequential(lib.Linear(2, 2), lib.Sequential(Frozen()))
        root.eval()
        root.train()
        frozen = root[1][0]
        return frozen.calls, frozen.training, frozen.bn.training, root.training, root[1].training

    t, f = _both(run)
    assert f == t
