"""Signature parity with torch: every public flame callable under a torch name (flame.*, F.*, nn module
constructors, Tensor methods, optim, lr_scheduler, utils.data, nn.init, nn.utils, autograd, cuda, linalg)
takes its positional parameters in torch's order and under torch's names, so a call written for torch
never hands a value to the wrong parameter. tests/frontend/torch_signatures.py reads both signatures."""

from __future__ import annotations

import fnmatch

import pytest

from tests.frontend.torch_signatures import all_findings, compare, flame_signature, torch_class

# Differences on purpose, each with its reason: (the callable, glob allowed; the kind of difference).
ALLOWED = {
    ("flame.compile", "order"): "flame's tracer (compile_model.md), compile(fn, ...), not torch.compile's options",
    ("flame.randint", "varargs"): "randint(*args) takes torch's (high, size) and (low, high, size) forms",
    ("Tensor.to", "varargs"): "to(*args) takes torch's to(dtype), to(device, dtype), to(tensor) forms",
    ("Tensor.uniform_", "order"): "torch's first parameter is `from`, a Python keyword; the positions agree",
    ("flame.optim.*", "swallowed"): "**flags go to Optimizer.__init__, which takes torch's flags by name and "
                                    "raises TypeError for any other",
}
CHECKED = ("order", "varargs", "swallowed")


def _allowed(name: str, kind: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pat) and kind == k for pat, k in ALLOWED)


@pytest.fixture(scope="module")
def findings():
    return all_findings()


def test_positional_parameters_match_torch(findings):
    bad = [str(f) for f in findings if f.kind in CHECKED and not _allowed(f"{f.where}.{f.name}", f.kind)]
    assert not bad, "signatures that differ from torch's:\n" + "\n".join(bad)


def test_every_allowed_difference_still_exists(findings):
    seen = {(f"{f.where}.{f.name}", f.kind) for f in findings}
    stale = [key for key in ALLOWED if not any(fnmatch.fnmatchcase(n, key[0]) and k == key[1] for n, k in seen)]
    assert not stale, f"allow-list entries with nothing left to allow: {stale}"


def test_the_walk_covers_every_namespace(findings):
    """The comparison reaches each namespace (a broken import would otherwise pass silently)."""
    from tests.frontend import torch_signatures as ts

    labels = {label for label, *_ in ts.namespaces()}
    assert {"flame", "flame.nn.functional", "flame.nn", "flame.optim", "flame.optim.lr_scheduler",
            "flame.utils.data", "flame.nn.init", "flame.nn.utils", "flame.nn.utils.prune", "flame.autograd",
            "flame.autograd.functional", "flame.optim.swa_utils", "flame.func", "flame.nn.utils.stateless",
            "flame.cuda", "flame.linalg"} <= labels
    pairs = {label: sum(1 for _ in ts.namespace_pairs(f, t, label, stubs)) for label, f, t, stubs in ts.namespaces()}
    assert all(pairs[label] for label in labels - {"flame.fft"}), pairs
    assert sum(1 for _ in ts.tensor_pairs()) > 150


def test_the_check_sees_a_reduction_in_torch_weight_place():
    """The comparison catches the mistake it is for: cross_entropy(input, target, reduction) against
    torch's (input, target, weight, ...)."""
    import torch

    def cross_entropy(input, target, reduction="mean", weight=None):  # noqa: A002
        return input

    got = compare("F", "cross_entropy", flame_signature(cross_entropy),
                  [flame_signature(torch.nn.functional.cross_entropy)])
    assert "order" in [f.kind for f in got]
    assert torch_class(torch.nn.Linear)[0].positional[:5] == ("in_features", "out_features", "bias", "device",
                                                              "dtype")
