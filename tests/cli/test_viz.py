"""`flame viz`: one picture per compiled function, one box per kernel, repeated layers drawn once,
and an HTML view when Graphviz is missing (write_viz in-process; the CLI itself is in test_cli.py)."""

import re
import shutil

import numpy as np
import pytest

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame import debug
from flame.runtime.stepwise import units
from flame.viz import boxes, kernel_dot, repeats, write_viz


@pytest.mark.parametrize("keys, runs", [
    ("abcabcabcd", [(0, 3, 3), (9, 1, 1)]),
    ("xabab", [(0, 1, 1), (1, 2, 2)]),
    ("abcd", [(0, 1, 1), (1, 1, 1), (2, 1, 1), (3, 1, 1)]),
    ("aab" * 4, [(0, 3, 4)]),  # the longer cover wins over the run of two a's
])
def test_repeats_cover_the_sequence(keys, runs):
    got = repeats(list(keys))
    assert got == runs
    assert sum(p * r for _, p, r in got) == len(keys)
    for start, p, r in got:  # every run really repeats
        assert all(keys[start + k] == keys[start + k % p] for k in range(p * r))


def _records():
    """Two compiled functions: a training step of 4 identical hidden layers, and an evaluation."""
    flame.manual_seed(0)
    layers = [nn.Linear(8, 16), nn.ReLU()]
    for _ in range(4):
        layers += [nn.Linear(16, 16), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(16, 4))
    opt = flame.optim.SGD(model.parameters(), lr=0.1)

    @flame.compile
    def train_step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    @flame.compile
    def evaluate(x):
        return model(x).argmax(-1)

    rng = np.random.default_rng(0)
    x = flame.tensor(rng.standard_normal((32, 8)).astype(np.float32))
    y = flame.tensor(rng.integers(0, 4, 32))
    records = []
    with debug.observe(records.append):
        train_step(x, y)
        evaluate(x)
        evaluate(x[:16])  # a second trace of evaluate
    return debug.titled(records)


def test_boxes_follow_the_data_and_repeated_layers_collapse():
    titled = _records()
    title, rec = titled[0]
    bxs = boxes(rec.graph, rec.plan)
    assert len(bxs) == len(units(rec.plan))
    for b in bxs:
        assert all(q < b.index for q in b.preds)  # edges follow launch order
    assert any("x0 f32[32,8]" in r for b in bxs for r in b.reads)
    dot = kernel_dot(title, rec.graph, rec.plan)
    runs = re.findall(r'label="x (\d+): kernels \[(\d+)\]\.\.\[(\d+)\], the same (\d+) kernel', dot)
    assert runs, dot
    # the 4 identical hidden layers: their forward kernels are drawn once, framed "x 4" (or x 3 when the
    # first differs), and fewer boxes are drawn than there are kernels
    assert max(int(n) for n, *_ in runs) >= 3
    drawn = len(re.findall(r"^\s*k\d+ \[", dot, flags=re.M))
    assert drawn < len(bxs)


def test_every_function_gets_a_picture_and_html_without_graphviz(tmp_path, monkeypatch):
    titled = _records()
    monkeypatch.setattr(shutil, "which", lambda name: None)  # no Graphviz
    msgs = write_viz(titled, str(tmp_path / "g.svg"))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["g.evaluate.1.dot", "g.evaluate.2.dot", "g.html", "g.train_step.dot"], names
    assert any("Graphviz `dot` is not installed" in m for m in msgs)
    page = (tmp_path / "g.html").read_text()
    for title, _ in titled:  # one section per compiled function, headed by its title
        assert f"<h2>{title.replace('>', '&gt;')}</h2>" in page
    assert "the same" in page and "reads results of [" in page


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed")
def test_graphviz_renders_each_function(tmp_path):
    titled = _records()
    write_viz(titled[:1], str(tmp_path / "one.svg"))
    assert (tmp_path / "one.svg").read_text().lstrip().startswith(("<?xml", "<svg"))
    write_viz(titled, str(tmp_path / "all.html"))
    page = (tmp_path / "all.html").read_text()
    assert page.count("<svg") == 3
