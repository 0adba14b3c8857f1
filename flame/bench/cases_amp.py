"""Mixed precision and memory cases: the GPT block training step of cases_gpt with f32 master weights
under autocast bf16 (flame.autocast vs torch.autocast, eager and torch.compile), and the same step
with a memory budget (a fraction of the unconstrained plan's peak, met by rematerialisation; the peer
is torch.compile with its own selective activation checkpointing, activation_memory_budget=0.5).

BUDGET is 0.95: on one block a budget of 0.5 is out of reach (MemoryBudgetError). Planned for the
reference executor at full size, the unconstrained plan (which already recomputes the free elementwise
work: GELU and LayerNorm outputs from the LayerNorms' inputs and row statistics, the loss's gradient
from the residual stream, and keeps backward work out of forward kernels) peaks at 456.8 MiB, of which
176 MiB are the f32 parameters, AdamW moments and the input; the smallest peak the budget search
reaches is 416.2 MiB, 0.91 (0.90 at the suite's quick sizes, d 64; with d 32 the greedy search stops
at 0.99). The MLP backward holds two [tokens, 4d] values at once, so only splitting the tokens, which
flame does not do, reaches 0.5. Set BUDGET = 0.5 to see the error, which names the floor and what is
live there.
The data and the parameters are f32; the step casts them where autocast says, so the matmuls and the
attention run in bf16, the LayerNorms, softmax and loss in f32. The attention mask is built in the
step, in bf16, as a bf16 model writes it, so flame's rewrite to fused attention sees it."""

from __future__ import annotations

from flame.bench.cases_gpt import (
    CHECKED,
    _block_case_inputs,
    _block_sizes,
    _bytes,
    _flame_block,
    _flame_setup,
    _flops,
    _torch_block,
    _torch_setup,
)
from flame.bench.cases_train import BF16_UPDATE_TOL
from flame.bench.spec import Bound, Case

BUDGET = 0.95  # of the unconstrained plan's peak (see the module docstring)
TORCH_BUDGET = 0.5  # torch.compile's activation_memory_budget: a fraction of the activation memory


def _sizes(quick: bool) -> dict:
    """gpt_block_train's sizes, f32 inputs and master weights. --quick has more tokens than
    gpt_block_train's quick sizes so that activations, not the parameters and AdamW moments, dominate
    the peak (as at full size), which the memory budget needs to be reachable."""
    sizes = {"batch": 4, "T": 64, "d": 64, "heads": 4} if quick else _block_sizes(False)
    return {**sizes, "dtype": "f32"}


def _flame_amp_block(budget: float | None):
    def factory(s, a, wrap):
        import flame

        p, opt = _flame_setup(s, a)

        def step(x):
            with flame.autocast("cuda", dtype=flame.bf16):
                mask = flame.full((s["T"], s["T"]), float("-inf")).triu(1).to(flame.bf16)
                y = _flame_block(x, p, "", s, mask)
                loss = (y.float() ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        call = wrap(step) if budget is None else wrap(step, memory_budget=budget)
        return Bound(call, lambda: [p[n] for n in CHECKED])

    return factory


def _torch_amp_block(activation_budget: float | None = None):
    def factory(s, a, wrap):
        import torch

        p, opt = _torch_setup(s, a)

        def step(x):
            with torch.autocast(x.device.type, dtype=torch.bfloat16):
                loss = (_torch_block(x, p, "", s).float() ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()

        compiled = wrap(step)
        if activation_budget is None:
            return Bound(compiled, lambda: [p[n] for n in CHECKED])
        import torch._functorch.config as functorch_config

        def call(x):  # the partitioner reads the budget when the first call compiles
            with functorch_config.patch(activation_memory_budget=activation_budget):
                return compiled(x)

        return Bound(call, lambda: [p[n] for n in CHECKED])

    return factory


AMP = [
    Case("gpt_block_train_amp", "GPT block training step (as gpt_block_train) with f32 data and master weights under "
         "autocast bf16: matmuls and attention in bf16, LayerNorm, softmax and the loss in f32; flame.autocast vs "
         "torch.autocast", sizes=_sizes, inputs=_block_case_inputs, min_bytes=_bytes(_block_case_inputs),
         min_flops=_flops, flame=_flame_amp_block(None), torch=_torch_amp_block(), tol=2e-2,
         state_tol=BF16_UPDATE_TOL),
    Case("gpt_block_train_budget", f"gpt_block_train_amp with memory_budget={BUDGET}: the planned peak at most "
         f"{BUDGET} of the unconstrained one, by recomputing activations in the backward; peer: torch.compile with "
         f"activation_memory_budget={TORCH_BUDGET} (its selective activation checkpointing)", sizes=_sizes,
         inputs=_block_case_inputs, min_bytes=_bytes(_block_case_inputs), min_flops=_flops,
         flame=_flame_amp_block(BUDGET), torch=_torch_amp_block(),
         extra={f"torch.compile budget {TORCH_BUDGET}": ("torch", _torch_amp_block(TORCH_BUDGET), "compiled")},
         tol=2e-2,
         state_tol=BF16_UPDATE_TOL),
]
