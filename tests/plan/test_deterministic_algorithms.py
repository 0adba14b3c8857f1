"""flame.use_deterministic_algorithms (runtime/determinism.py): a GPU plan holding a kernel that adds
floating-point values with atomics is refused (or warned about) when it is made, naming the op and the
user's line; the settings are part of a compiled step's key; the reference executor is unaffected."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

import flame
import flame.nn.functional as F
from flame import compiler
from flame.codegen.indexing import lower_scatter_add, lower_segment_sum
from flame.errors import DeterminismError
from flame.runtime import determinism

HERE = "test_deterministic_algorithms.py"


@pytest.fixture
def cuda_plan(monkeypatch, determinism_settings):
    """Plan for the CUDA target (its kernels, under the determinism mode set at compile time) on any host."""
    cuda = compiler.capabilities("cuda")
    monkeypatch.setattr(compiler, "_target", lambda *s: dataclasses.replace(cuda, deterministic=determinism.mode()))
    monkeypatch.setattr(compiler, "_CACHE", type(compiler._CACHE)())


def _embedding_step():
    w = flame.nn.Parameter(flame.tensor(np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)))

    @flame.compile
    def step(idx):
        loss = F.embedding(idx, w).square().sum()  # the weight's gradient: a segment_sum of the rows
        loss.backward()
        return loss

    return step, flame.tensor(np.array([1, 3, 1, 7]))


def test_the_settings_read_back_as_torchs(determinism_settings):
    assert not flame.are_deterministic_algorithms_enabled()
    flame.use_deterministic_algorithms(True, warn_only=True)
    assert flame.are_deterministic_algorithms_enabled() and flame.is_deterministic_algorithms_warn_only_enabled()
    assert determinism.cudnn()
    flame.use_deterministic_algorithms(False)
    assert not flame.are_deterministic_algorithms_enabled() and not determinism.cudnn()
    flame.backends.cudnn.deterministic = True
    assert flame.backends.cudnn.deterministic and determinism.cudnn() and determinism.mode() == ""
    with pytest.raises(TypeError):
        flame.use_deterministic_algorithms("yes")


def test_an_atomic_segment_sum_is_refused_naming_the_op_and_the_line(cuda_plan):
    flame.use_deterministic_algorithms(True)
    step, idx = _embedding_step()
    with pytest.raises(DeterminismError, match=rf"(?s)segment_sum does not have a deterministic .*{HERE}:"):
        step(idx)
    assert isinstance(DeterminismError("x"), RuntimeError)  # torch raises a RuntimeError


def test_warn_only_warns_and_runs(cuda_plan):
    flame.use_deterministic_algorithms(True, warn_only=True)
    step, idx = _embedding_step()
    with pytest.warns(UserWarning, match="segment_sum does not have a deterministic implementation"):
        loss = step(idx)
    assert np.isfinite(loss.item())


def test_off_plans_the_same_kernels_and_deterministic_kernels_pass(cuda_plan):
    step, idx = _embedding_step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step(idx)  # off: no error, no warning
    (op,) = [o for o in step.optimized(idx).ops if o.name == "segment_sum"]
    assert [k.deterministic for k in lower_segment_sum(op)] == [True, False]  # the zeros, the atomic adds

    flame.use_deterministic_algorithms(True)
    w = flame.nn.Parameter(flame.ones(4, 3))

    @flame.compile
    def dense(x):  # matmuls, reductions and elementwise kernels only: deterministic
        loss = (x @ w).relu().sum()
        loss.backward()
        return loss

    assert dense(flame.ones(2, 4)).item() == 24.0


def test_integer_scatter_add_is_deterministic():
    x = flame.zeros(5, dtype=flame.int64)
    g = flame.compile(lambda x, i, s: x.scatter_add(0, i, s)).optimized(
        x, flame.tensor(np.array([1, 1, 2])), flame.tensor(np.array([4, 5, 6])))
    (op,) = [o for o in g.ops if o.name == "scatter_add"]
    assert all(k.deterministic for k in lower_scatter_add(op))


def test_the_reference_executor_ignores_the_mode(determinism_settings):
    flame.use_deterministic_algorithms(True)
    step, idx = _embedding_step()
    assert np.isfinite(step(idx).item())  # the reference target plans no atomics check


def test_the_flash_backward_main_kernel_is_the_nondeterministic_one():
    from benchmarks.scripts.flash_kernels import kernels

    fwd, prep, main, dq = kernels(1, 2, 32, 64)
    assert [k.deterministic for k in (fwd, prep, main, dq)] == [True, True, False, True]
