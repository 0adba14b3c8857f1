"""The balanced form for horizontal kernels of scalar (0-d) segments (Config.balanced_scalars,
$FLAME_BALANCED_SCALARS; on by default): an optimizer's per-parameter bias corrections as one body
per class of alike segments instead of a branch per segment. The structure and the compile with
NVRTC are checked here; (marked gpu) the kernel computes what the side-by-side one does."""

from __future__ import annotations

import re

import numpy as np
import pytest

import flame
from flame.codegen import Config, lower
from flame.codegen.fused import group_inputs
from flame.codegen.kernel import balanced_scalars, codegen_settings
from flame.codegen.nvrtc import compile_many
from flame.passes.fuse import fuse
from flame.runtime.reference import run_graph
from tests.codegen.test_multi_tensor import _launch
from tests.passes.fuse_cases import GPT_SHAPES, multi_adamw

ON, OFF = Config(balanced_scalars=True), Config(balanced_scalars=False)


def _scalar_group(shapes=GPT_SHAPES):
    """The group of the AdamW step's 0-d work (the per-parameter bias corrections), and the graph."""
    g, inputs = multi_adamw(shapes)
    fused = fuse(g)
    (grp,) = [grp for grp in fused.groups if len(grp.ops) > 1 and all(not op.out.shape for op in grp.ops)]
    return grp, g, fused, inputs


def test_scalar_segments_share_one_body_per_class_when_asked():
    grp, *_ = _scalar_group(GPT_SHAPES * 4)  # four blocks' parameters
    (side,) = lower(grp, OFF)
    (bal,) = lower(grp, ON)
    n = int(re.search(r"_x(\d+)_", side.name).group(1))
    assert n > 8 and f"_x{n}_" in bal.name
    assert "struct row0" in bal.source and "balanced" in bal.source.splitlines()[2]
    assert side.source.count("pow(") >= n  # a body per segment (the bias corrections are f64, as torch's)
    assert bal.source.count("pow(") <= 2 * 3  # a body per class (at most three classes of bias corrections)
    code = lambda k: [line for line in k.source.splitlines() if not line.startswith("//")]  # noqa: E731
    assert len(code(bal)) < len(code(side)) / 4
    assert all(c[:4] == b"\x7fELF" for c in compile_many([side.source, bal.source], "sm_90"))


def test_on_unless_turned_off(monkeypatch):
    monkeypatch.delenv("FLAME_BALANCED_SCALARS", raising=False)
    assert balanced_scalars() is True and codegen_settings()[1] is True
    assert balanced_scalars(OFF) is False  # a Config's own choice wins
    grp, *_ = _scalar_group()
    (k,) = lower(grp)
    assert "struct row0" in k.source
    monkeypatch.setenv("FLAME_BALANCED_SCALARS", "0")
    assert balanced_scalars() is False and codegen_settings()[1] is False
    (k,) = lower(grp)
    assert "struct row0" not in k.source
    monkeypatch.setenv("FLAME_BALANCED_SCALARS", "maybe")
    with pytest.raises(flame.ArgumentError, match=r"FLAME_BALANCED_SCALARS='maybe': expected 1 \(on\) or 0 \(off\)"):
        balanced_scalars()


def test_the_setting_is_part_of_the_compile_cache_key(monkeypatch):
    """A plan compiled with the setting off is not handed out with it on (compile_graph's key)."""
    from flame import compiler

    monkeypatch.setattr(compiler, "_CACHE", type(compiler._CACHE)())
    monkeypatch.setenv("FLAME_BALANCED_SCALARS", "0")
    _, g, _, _ = _scalar_group()
    off = compiler.compile_graph(g)
    monkeypatch.delenv("FLAME_BALANCED_SCALARS")
    on = compiler.compile_graph(g)
    assert on is not off
    sources = lambda c: [k.source for k in c.plan.kernels() if "_f32_x" in k.name]  # noqa: E731
    assert any("struct row0" in s for s in sources(on)) and not any("struct row0" in s for s in sources(off))


@pytest.mark.gpu
@pytest.mark.parametrize("misalign", [False, True])
def test_gpu_balanced_scalars_match_side_by_side_and_reference(misalign):
    """Bias corrections of a GPT's AdamW step: the balanced kernel writes what the side-by-side one
    does, bit for bit (scalar arithmetic: no contraction differs), and what the reference computes."""
    grp, g, fused, inputs = _scalar_group()
    r = np.random.default_rng(3)
    values = {v: np.asarray(r.uniform(0.5, 0.99), dtype=v.dtype.np_dtype).reshape(v.shape) for v in group_inputs(grp)}
    (side,) = lower(grp, OFF)
    (bal,) = lower(grp, ON)
    got_side, got_bal = _launch(grp, side, values, misalign), _launch(grp, bal, values, misalign)
    for a, b in zip(got_side, got_bal):
        assert np.isfinite(a).all() and np.array_equal(a.view(np.uint32), b.view(np.uint32))
    want = run_graph(g, inputs)
    got = _launch(grp, bal, dict(zip(fused.inputs, inputs)), misalign)
    for v, h in zip(grp.outputs, got):
        if v in fused.outputs:
            np.testing.assert_allclose(h, want[fused.outputs.index(v)], rtol=1e-6)
