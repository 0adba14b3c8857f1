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


def _values(m):
    return {k: v.detach().numpy().tolist() if hasattr(v, "detach") else v.numpy().tolist()
            for k, v in m.state_dict().items()}


def _renaming_model(lib, T):
    """A block whose _load_from_state_dict converts an older checkpoint (weight saved as `w`, a scale saved
    as a plain number), the idiom of torch modules that changed their state."""

    class Block(lib.Module):
        def __init__(self):
            super().__init__()
            self.weight = lib.Parameter(T.zeros(2, 3))
            self.scale = 1.0

        def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
            if prefix + "w" in state_dict:
                state_dict[prefix + "weight"] = state_dict.pop(prefix + "w")
            self.scale = state_dict.pop(prefix + "scale", self.scale)
            super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing, unexpected, errors)

    return lib.Sequential(lib.Linear(3, 3), Block())


@pytest.mark.parametrize("strict", [True, False])
def test_a_modules_own_load_from_state_dict_converts_an_old_checkpoint(strict):
    def run(lib, T):
        m = _renaming_model(lib, T)
        sd = {"0.weight": T.ones(3, 3), "0.bias": T.full((3,), 2.0), "1.w": T.full((2, 3), 3.0), "1.scale": 0.5}
        keys = m.load_state_dict(sd, strict=strict)
        return list(keys.missing_keys), list(keys.unexpected_keys), _values(m), m[1].scale

    t, f = _both(run)
    assert f == t


def test_incompatible_keys_are_listed_module_by_module_as_torchs():
    def run(lib, T):
        m = lib.Sequential(lib.Linear(2, 2), lib.Sequential(lib.Linear(2, 2)))
        sd = dict(m.state_dict())
        del sd["1.0.bias"], sd["0.weight"]
        sd = {"1.0.extra": T.ones(1), **sd, "0.extra": T.ones(1), "extra": T.ones(1), "2.weight": T.ones(1)}
        keys = m.load_state_dict(sd, strict=False)
        return list(keys.missing_keys), list(keys.unexpected_keys)

    t, f = _both(run)
    assert f == t


def test_a_load_pre_hook_sees_the_part_of_the_state_dict_under_its_module():
    def run(lib, T):
        m = lib.Sequential(lib.Linear(2, 2), lib.Sequential(lib.Linear(2, 2)))
        seen = []
        m[1].register_load_state_dict_pre_hook(
            lambda mod, sd, prefix, meta, strict, *lists: seen.append((prefix, sorted(sd), strict)))
        m.load_state_dict(m.state_dict(), strict=False)
        return seen

    t, f = _both(run)
    assert f == t


@pytest.mark.parametrize("prefix", ["model.", "model", ""])
def test_state_dict_prefix_is_used_as_given(prefix):
    def run(lib, T):
        return list(lib.Sequential(lib.Linear(1, 1)).state_dict(prefix=prefix))

    t, f = _both(run)
    assert f == t


def test_state_dict_metadata_records_each_modules_version():
    def run(lib, T):
        m = lib.Sequential(lib.Linear(2, 2), lib.BatchNorm1d(2))
        sd = m.state_dict()
        into = m.state_dict(destination={}, prefix="net.")
        return dict(sd._metadata), list(into), m[1].state_dict(prefix="x.")._metadata

    t, f = _both(run)
    assert f == t


def test_a_modules_own_save_to_state_dict_and_state_dict_are_used():
    def run(lib, T):
        class Packed(lib.Module):
            """Saves its weight as a transposed entry under another name, as a quantized layer would."""

            def __init__(self):
                super().__init__()
                self.weight = lib.Parameter(T.arange(6.0).reshape(2, 3))

            def _save_to_state_dict(self, destination, prefix, keep_vars):
                destination[prefix + "packed"] = self.weight.detach().t()

        class Tagged(lib.Module):
            def __init__(self):
                super().__init__()
                self.lin = lib.Linear(1, 1)

            def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
                out = super().state_dict(destination=destination, prefix=prefix, keep_vars=keep_vars)
                out[prefix + "tag"] = T.ones(1)
                return out

        m = lib.Sequential(Packed(), Tagged())
        sd = m.state_dict()
        return {k: tuple(v.shape) for k, v in sd.items()}, sd["0.packed"].numpy().tolist()

    t, f = _both(run)
    assert f == t


def test_load_state_dict_assign_binds_the_given_tensors_themselves():
    def run(lib, T):
        m = lib.Sequential(lib.Linear(2, 2), lib.BatchNorm1d(2))
        sd = dict(m.state_dict())
        sd["0.weight"] = lib.Parameter(T.ones(2, 2), requires_grad=False)  # takes the module's requires_grad
        sd["0.bias"] = T.full((2,), 3.0)
        sd["1.running_mean"] = T.full((2,), 5.0)
        m.load_state_dict(sd, assign=True)
        return (m[0].weight is sd["0.weight"], m[0].weight.requires_grad, type(m[0].bias).__name__,
                m[0].bias.requires_grad, m[1].running_mean is sd["1.running_mean"])

    t, f = _both(run)
    assert f == t


def test_load_state_dict_result_prints_as_torchs():
    def run(lib, T):
        m = lib.Linear(2, 2)
        return repr(m.load_state_dict({"weight": T.zeros(2, 2), "x": T.zeros(1)}, strict=False)), repr(
            m.load_state_dict(m.state_dict()))

    t, f = _both(run)
    assert f == t


def test_dir_leaves_out_names_starting_with_a_digit():
    def run(lib, T):
        s = lib.Sequential(lib.Linear(1, 1), lib.ReLU())
        s.register_buffer("stat", T.zeros(1))
        names = dir(s)
        return [n for n in names if n[0].isdigit()], "stat" in names, "forward" in names

    t, f = _both(run)
    assert f == t


def test_sequential_insert_returns_the_sequential_and_module_list_insert_none():
    def run(lib, T):
        s = lib.Sequential(lib.ReLU())
        got = s.insert(0, lib.Tanh())
        ml = lib.ModuleList([lib.ReLU()])
        return got is s, ml.insert(0, lib.Tanh()), [type(m).__name__ for m in s]

    t, f = _both(run)
    assert f == t
