"""torch.random's names: the default generator's seed and state, and fork_rng. flame has one default
generator per device (flame/frontend/creation.py), each a counter-based stream (a seed and an offset),
so a state is 16 bytes (Generator.get_state)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from flame.frontend import creation
from flame.frontend.creation import get_rng_state, initial_seed, manual_seed, seed, set_rng_state

__all__ = ["fork_rng", "get_rng_state", "initial_seed", "manual_seed", "seed", "set_rng_state"]


@contextlib.contextmanager
def fork_rng(devices=None, enabled: bool = True, _caller: str = "fork_rng", _devices_kw: str = "devices",
             device_type: str = "cuda") -> Iterator[None]:
    """Random draws inside the block leave the default generators as they found them (torch's
    fork_rng): their states are saved on entry and restored on exit, whatever the block did (draws,
    manual_seed). devices and device_type are accepted for torch's signature: flame forks the default
    generator of every device it has one for. enabled=False does nothing."""
    if not enabled:
        yield
        return
    default = creation._default
    saved_seed = default.seed
    saved = {device: (gen, gen.get_state()) for device, gen in default.gens.items()}
    try:
        yield
    finally:
        default.seed = saved_seed
        default.gens = {device: gen for device, (gen, _) in saved.items()}
        for gen, state in saved.values():
            gen.set_state(state)
