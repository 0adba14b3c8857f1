"""examples/train_gpt.py's GPT trained with its Linear GEMMs in FP8 (flame.autocast with a Float8Recipe)
on the reference executor learns as the bf16 model does: the same steps on the same batches reach a
validation loss close to bf16's (benchmarks/scripts/fp8_gpt_loss.py runs the longer comparison)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

import flame
from tests.conftest import on_device

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from train_gpt import GPT, TINY, batch, encode, stdlib_text  # noqa: E402

STEPS = 40


def _validation_loss(fp8, data, vocab: str) -> float:
    cfg = TINY
    split = int(0.9 * len(data))
    model = GPT(len(vocab), cfg["d"], cfg["layers"], cfg["heads"], cfg["T"], flame.bf16, 0, fp8=fp8)
    opt = flame.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.1, betas=(0.9, 0.95))

    @flame.compile
    def step(x, y):
        loss = model.loss(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    rng = np.random.default_rng(0)
    for _ in range(STEPS):
        step(*batch(data[:split], cfg["T"], cfg["batch"], rng))
    rv = np.random.default_rng(1234)
    return float(np.mean([model.loss(*batch(data[split:], cfg["T"], cfg["batch"], rv)).item() for _ in range(4)]))


@pytest.fixture
def reference():
    with on_device("reference"):
        yield


def test_fp8_gpt_learns_like_bf16(reference):
    text = stdlib_text(TINY["chars"])
    vocab = "".join(sorted(set(text) | {"?"}))
    data = encode(text, vocab)
    bf16 = _validation_loss(False, data, vocab)
    fp8 = _validation_loss(flame.amp.Float8Recipe(scaling="delayed"), data, vocab)
    assert fp8 < math.log(len(vocab)) - 1.0  # it learned (uniform guessing is ln(vocabulary))
    assert abs(fp8 - bf16) / bf16 < 0.05, (fp8, bf16)
