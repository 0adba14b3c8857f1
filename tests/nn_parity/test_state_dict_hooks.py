"""Module state_dict pre- and post-hooks and load_state_dict post-hooks, as torch's: when they run and
with what, changes they make, strict judged after the load hooks, and torch's errors for returned values."""

from __future__ import annotations

import pytest
import torch

import flame


def _run(nn, ones):
    log = []
    m = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    m[0].register_state_dict_pre_hook(lambda mod, prefix, keep_vars: log.append(("pre", prefix, keep_vars)))

    def post(mod, sd, prefix, meta):
        log.append(("post", prefix, sorted(sd), sorted(meta)))
        sd[prefix + "extra"] = ones(1)

    m.register_state_dict_post_hook(post)
    sd = m.state_dict(keep_vars=True)
    target = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))

    def load_post(mod, keys):
        log.append(("load", list(keys.missing_keys), list(keys.unexpected_keys)))
        keys.unexpected_keys.clear()

    handle = target.register_load_state_dict_post_hook(load_post)
    keys = target.load_state_dict(sd)  # the hook clears the unexpected 'extra': no error
    log.append(("keys", list(keys.missing_keys), list(keys.unexpected_keys)))
    partial = {k: v for k, v in sd.items() if k != "0.weight"}
    with pytest.raises(RuntimeError, match="0.weight"):
        target.load_state_dict(partial)
    log.append(("loaded bias", target[0].bias.tolist() == m[0].bias.tolist()))
    handle.remove()
    with pytest.raises(RuntimeError, match="extra"):
        target.load_state_dict(sd)
    return log, list(sd)


def test_hooks_run_as_torch():
    got = _run(flame.nn, flame.ones)
    want = _run(torch.nn, torch.ones)
    assert got == want


def test_returned_values_are_torch_errors():
    for nn in (flame.nn, torch.nn):
        m = nn.Linear(2, 2)
        m.register_state_dict_post_hook(lambda *args: {})
        with pytest.raises(RuntimeError, match="must return None"):
            m.state_dict()
        m = nn.Linear(2, 2)
        m.register_load_state_dict_post_hook(lambda *args: 1)
        with pytest.raises((RuntimeError, AssertionError)):
            m.load_state_dict(nn.Linear(2, 2).state_dict())


def test_without_load_post_hooks_a_failed_strict_load_changes_nothing():
    m = flame.nn.Linear(2, 2)
    before = m.weight.tolist()
    sd = {"weight": flame.zeros(2, 2)}
    with pytest.raises(flame.errors.CheckpointError, match="bias"):
        m.load_state_dict(sd)
    assert m.weight.tolist() == before
