"""Argument validation of flame.distributions: torch's ValueErrors (the same messages, shapes written as
tuples) for bad parameters and for values outside the support; validate_args=False and
Distribution.set_default_validate_args turn it off."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest
import torch
import torch.distributions as TD

import flame
import flame.distributions as FD

NAN = float("nan")

# each: fn(D, lib) that raises; lib is torch or flame
BAD = {
    "normal-scale": lambda D, t: D.Normal(t.zeros(3), -t.ones(3)),
    "normal-nan-loc": lambda D, t: D.Normal(t.tensor([0.0, NAN]), t.ones(2)),
    "normal-value-nan": lambda D, t: D.Normal(t.zeros(3), t.ones(3)).log_prob(t.tensor([1.0, NAN, 2.0])),
    "normal-value-shape": lambda D, t: D.Normal(t.zeros(3), t.ones(3)).log_prob(t.zeros(2)),
    "normal-value-not-tensor": lambda D, t: D.Normal(t.zeros(3), t.ones(3)).log_prob([0.0, 0.0, 0.0]),
    "bernoulli-probs": lambda D, t: D.Bernoulli(t.tensor([0.2, 1.2])),
    "bernoulli-value": lambda D, t: D.Bernoulli(t.tensor([0.2, 0.5])).log_prob(t.tensor([0.0, 0.5])),
    "bernoulli-neither": lambda D, t: D.Bernoulli(),
    "bernoulli-both": lambda D, t: D.Bernoulli(t.tensor([0.5]), t.tensor([0.0])),
    "categorical-probs": lambda D, t: D.Categorical(t.tensor([0.2, -0.5, 0.3])),
    "categorical-value": lambda D, t: D.Categorical(t.tensor([0.2, 0.8])).log_prob(t.tensor([2])),
    "categorical-0d": lambda D, t: D.Categorical(t.tensor(1.0)),
    "categorical-0d-logits": lambda D, t: D.Categorical(logits=t.tensor(1.0)),
    "onehot-value": lambda D, t: D.OneHotCategorical(t.tensor([0.5, 0.5])).log_prob(t.tensor([1.0, 1.0])),
    "uniform-order": lambda D, t: D.Uniform(t.ones(2), t.zeros(2)),
    "uniform-value": lambda D, t: D.Uniform(t.zeros(2), t.ones(2)).log_prob(t.tensor([0.5, 1.5])),
    "laplace-scale": lambda D, t: D.Laplace(t.zeros(2), t.zeros(2)),
    "exponential-rate": lambda D, t: D.Exponential(t.tensor([1.0, -2.0])),
    "exponential-rate-one-element": lambda D, t: D.Exponential(t.tensor([-1.0])),
    "normal-scale-python-number": lambda D, t: D.Normal(0.0, -1.0),
    "uniform-one-element": lambda D, t: D.Uniform(t.tensor([1.0]), t.tensor([0.0])),
    "exponential-value": lambda D, t: D.Exponential(t.ones(2)).log_prob(-t.ones(2)),
    "mvn-tril": lambda D, t: D.MultivariateNormal(t.zeros(2), scale_tril=t.ones(2, 2)),
    "mvn-diag": lambda D, t: D.MultivariateNormal(t.zeros(2), scale_tril=-t.eye(2)),
    "mvn-two": lambda D, t: D.MultivariateNormal(t.zeros(2), covariance_matrix=t.eye(2), scale_tril=t.eye(2)),
    "mvn-none": lambda D, t: D.MultivariateNormal(t.zeros(2)),
    "mvn-all-three": lambda D, t: D.MultivariateNormal(
        t.zeros(2), covariance_matrix=t.eye(2), precision_matrix=t.eye(2), scale_tril=t.eye(2)
    ),
    "mvn-cov-not-pd": lambda D, t: D.MultivariateNormal(t.zeros(2), covariance_matrix=t.tensor([[1.0, 2], [2, 1]])),
    "mvn-cov-not-symmetric": lambda D, t: D.MultivariateNormal(
        t.zeros(2), covariance_matrix=t.tensor([[1.0, 0.5], [0.0, 1.0]])
    ),
    "mvn-cov-not-square": lambda D, t: D.MultivariateNormal(t.zeros(3), covariance_matrix=t.ones(2, 3)),
    "mvn-cov-batch-not-pd": lambda D, t: D.MultivariateNormal(
        t.zeros(2), covariance_matrix=t.stack([t.eye(2), -t.eye(2)])
    ),
    "mvn-prec-not-pd": lambda D, t: D.MultivariateNormal(t.zeros(2), precision_matrix=t.tensor([[1.0, 2], [2, 1]])),
    "mvn-cov-1d": lambda D, t: D.MultivariateNormal(t.zeros(2), covariance_matrix=t.ones(2)),
    "mvn-prec-1d": lambda D, t: D.MultivariateNormal(t.zeros(2), precision_matrix=t.ones(2)),
    "mvn-0d-loc": lambda D, t: D.MultivariateNormal(t.tensor(0.0), scale_tril=t.eye(1)),
    "mvn-1d-tril": lambda D, t: D.MultivariateNormal(t.zeros(2), scale_tril=t.ones(2)),
    "mvn-event-shape": lambda D, t: D.MultivariateNormal(t.zeros(2), scale_tril=t.eye(2)).log_prob(t.zeros(3)),
    "independent-ndims": lambda D, t: D.Independent(D.Normal(t.zeros(2), t.ones(2)), 2),
    "independent-value": lambda D, t: D.Independent(D.Normal(t.zeros(2), t.ones(2)), 1).log_prob(t.tensor([0, NAN])),
    "lognormal-value": lambda D, t: D.LogNormal(t.zeros(2), t.ones(2)).log_prob(t.tensor([1.0, -1.0])),
    "transformed-list": lambda D, t: D.TransformedDistribution(D.Normal(0.0, 1.0), [1]),
}


def _normalised(message: str) -> str:
    message = message.split("but found invalid values")[0]
    message = re.sub(
        r"torch\.Size\(\[([^\]]*)\]\)", lambda m: repr(tuple(int(x) for x in m.group(1).split(",") if x)), message
    )
    return re.sub(r"tensor\([^)]*\)", "T", message)


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_raises_torchs_value_error(case):
    with pytest.raises(ValueError) as want:
        BAD[case](TD, torch)
    with pytest.raises(ValueError) as got:
        BAD[case](FD, flame)
    assert _normalised(str(got.value)) == _normalised(str(want.value))


def test_validation_names_the_parameter_and_shows_the_values():
    with pytest.raises(
        ValueError,
        match=r"(?s)Expected parameter scale \(Tensor of shape \(3,\)\) of distribution "
        r"Normal\(loc: \(3,\), scale: \(3,\)\) to satisfy the constraint "
        r"GreaterThan\(lower_bound=0.0\), but found invalid values:\n.*-1",
    ):
        FD.Normal(flame.zeros(3), -flame.ones(3))


@pytest.mark.parametrize("kw", ["covariance_matrix", "precision_matrix"])
@pytest.mark.parametrize("batched", [False, True], ids=["one", "batched"])
def test_unvalidated_matrix_that_is_not_positive_definite_raises_torchs_linalg_error(kw, batched):
    """With validation off, torch's Cholesky factorisation raises torch.linalg.LinAlgError (a RuntimeError)
    naming the batch element and the failing leading minor; flame raises its LinAlgError, the same words."""

    def make(D, t):
        bad = t.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 2.0], [0.0, 2.0, 1.0]])
        m = t.stack([t.eye(3), bad]) if batched else bad
        return D.MultivariateNormal(t.zeros(3), **{kw: m}, validate_args=False)

    with pytest.raises(torch.linalg.LinAlgError) as want:
        make(TD, torch)
    with pytest.raises(flame.linalg.LinAlgError) as got:
        make(FD, flame)
    assert isinstance(got.value, RuntimeError)
    assert str(got.value).split("\n  at ")[0] == str(want.value)
    assert "test_distributions_validation.py" in str(got.value)


@pytest.mark.parametrize("case", ["normal-scale", "bernoulli-value", "uniform-order", "exponential-value"])
def test_validate_args_false_skips_the_checks_as_torch(case):
    def off(fn):
        def make(D, t):
            real = {n: getattr(D, n) for n in ("Normal", "Bernoulli", "Uniform", "Exponential")}
            patched = type("D", (), {n: functools.partial(c, validate_args=False) for n, c in real.items()})
            return fn(patched, t)

        return make

    off(BAD[case])(TD, torch)
    off(BAD[case])(FD, flame)


def test_set_default_validate_args_turns_validation_off_and_on():
    try:
        FD.Distribution.set_default_validate_args(False)
        FD.Normal(flame.zeros(2), -flame.ones(2))
        FD.Distribution.set_default_validate_args(True)
        with pytest.raises(ValueError, match="Expected parameter scale"):
            FD.Normal(flame.zeros(2), -flame.ones(2))
    finally:
        FD.Distribution.set_default_validate_args(True)
    with pytest.raises(ValueError):
        FD.Distribution.set_default_validate_args("yes")


def test_validate_args_true_checks_even_when_the_default_is_off():
    d = FD.Normal(flame.zeros(2), flame.ones(2), validate_args=True)
    with pytest.raises(ValueError, match="within the support"):
        d.log_prob(flame.tensor([0.0, NAN]))


@pytest.mark.parametrize("case", list(BAD))
def test_bad_constant_input_raises_torchs_value_error_inside_compile(case):
    """Parameters and values made in the compiled function from constants are known while tracing: they
    are checked then, and raise what torch raises, naming the user's line."""
    with pytest.raises(ValueError) as want:
        BAD[case](TD, torch)

    @flame.compile
    def step(x):
        BAD[case](FD, flame)
        return x * 2

    with pytest.raises(ValueError) as got:
        step(flame.ones(2))
    assert _normalised(str(got.value)) == _normalised(str(want.value))
    if "but found invalid values" in str(got.value):
        assert "\n  at test_distributions_validation.py:" in str(got.value)


def test_python_number_parameters_are_checked_inside_compile():
    """Normal(x, -1.0) broadcasts the number against a traced x; the scale is still known while tracing."""

    @flame.compile
    def log_prob(x):
        return FD.Normal(x, -1.0).log_prob(x)

    with pytest.raises(ValueError, match=r"(?s)Expected parameter scale .*GreaterThan\(lower_bound=0.0\).*-1\."):
        log_prob(flame.zeros(3))


def test_captured_tensors_are_checked_with_their_values_at_tracing():
    scale = flame.tensor([1.0, -2.0])

    @flame.compile
    def log_prob(x):
        return FD.Normal(x, scale).log_prob(x)

    with pytest.raises(ValueError, match=r"(?s)Expected parameter scale .*tensor\(\[ 1., -2.\]"):
        log_prob(flame.zeros(2))


def test_matrix_not_positive_definite_raises_inside_compile_when_known():
    @flame.compile
    def log_prob(x):
        cov = flame.tensor([[1.0, 2.0], [2.0, 1.0]])
        return FD.MultivariateNormal(x, covariance_matrix=cov, validate_args=False).log_prob(x)

    with pytest.raises(flame.linalg.LinAlgError, match="leading minor of order 2"):
        log_prob(flame.zeros(2))


def test_values_computed_from_the_arguments_are_not_checked_inside_compile():
    """Inside @flame.compile a value read from the function's arguments does not exist while tracing, and
    flame has no check that runs with the step: such a parameter or value is not checked, and the result
    is torch's with validate_args=False (NaN for a negative scale)."""

    @flame.compile
    def log_prob(scale, x):
        return FD.Normal(flame.zeros_like(scale), scale).log_prob(x)

    scale, x = [1.0, -1.0], [0.0, 1.0]
    out = log_prob(flame.tensor(scale, dtype=flame.f64), flame.tensor(x, dtype=flame.f64))
    want = TD.Normal(0.0, torch.tensor(scale, dtype=torch.float64), validate_args=False).log_prob(
        torch.tensor(x, dtype=torch.float64)
    )
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-12, equal_nan=True)
    assert np.isnan(out.numpy()[1])


def test_a_subclass_without_a_support_warns_and_skips_the_value_check_as_torch():
    """A user's Distribution that defines no support: validating a value warns torch's UserWarning and
    goes on (log_prob runs) rather than raising NotImplementedError."""
    results = []
    for lib, t in ((TD, torch), (FD, flame)):

        class Scaled(lib.Distribution):
            arg_constraints = {}

            def __init__(self, x):
                self.x = x
                super().__init__(tuple(x.shape), validate_args=True)

            def log_prob(self, value):
                self._validate_sample(value)
                return value * self.x

        with pytest.warns(UserWarning) as record:
            out = Scaled(t.tensor([1.0, 2.0])).log_prob(t.tensor([3.0, 4.0]))
        results.append((out.numpy(), [str(w.message) for w in record]))
    (want, want_messages), (got, got_messages) = results
    np.testing.assert_array_equal(got, want)
    assert got_messages == want_messages
    assert "does not define `support` to enable sample validation" in got_messages[0]
