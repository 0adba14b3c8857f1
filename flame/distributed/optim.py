"""ZeRO stage 1: optimizer state sharded over the ranks (torch's ZeroRedundancyOptimizer, with flame's
bucketed collectives). Every bucket of the DistributedDataParallel model is split into whole
parameters per rank (buckets.shard_bucket); from then on

- the backward reduce-scatters each bucket: a rank receives the averaged gradients of its own
  parameters only (the others' .grad become None);
- step() runs the wrapped optimizer (AdamW...) on this rank's parameters: its moments exist for
  them alone, about 1/N of the state (memory_report's `state` shows it), then all-gathers each
  bucket's updated parameters so every rank holds the whole model again.

The result equals the unsharded optimizer's. state_dict() gathers the state into the layout a
single-GPU optimizer writes (a collective: call it on every rank; flame.checkpoint.save_checkpoint
does), and load_state_dict() keeps each rank's part. clip_grad_norm_ must see every rank's gradients:
use this optimizer's clip_grad_norm_ (the sum over ranks), not flame.nn.utils.clip_grad_norm_."""

from __future__ import annotations

import math
from typing import Any

from flame.distributed.buckets import reducer_of
from flame.distributed.collectives import all_reduce, broadcast
from flame.distributed.process_group import get_rank, get_world_size
from flame.distributed.store import DistributedError
from flame.frontend.context import no_grad
from flame.frontend.creation import zeros
from flame.frontend.dispatch import apply
from flame.frontend.tensor import Tensor

__all__ = ["ZeroRedundancyOptimizer"]


class ZeroRedundancyOptimizer:
    """optimizer_class(this rank's parameters, **defaults), over the parameters of a
    DistributedDataParallel model (module docstring). In a world of one rank it is the plain optimizer."""

    def __init__(self, params, optimizer_class, **defaults: Any):
        self.params = [p for p in params]
        if any(isinstance(p, dict) for p in self.params):
            raise DistributedError("ZeroRedundancyOptimizer takes a list of parameters (no parameter groups)")
        self.optimizer_class, self.defaults = optimizer_class, dict(defaults)
        self.world_size, self.rank = get_world_size(), get_rank()
        self.ddp = None
        if self.world_size > 1:
            owners = {id(reducer_of(p)) for p in self.params}
            ddp = reducer_of(self.params[0]) if self.params else None
            same = ddp is not None and {id(p) for p in ddp.parameters_reduced} == {id(p) for p in self.params}
            if len(owners) != 1 or not same:
                raise DistributedError(
                    "ZeroRedundancyOptimizer: pass the parameters of ONE DistributedDataParallel "
                    "model (wrap the model first: opt = ZeroRedundancyOptimizer(ddp.parameters(), "
                    "flame.optim.AdamW, lr=...))"
                )
            self.ddp = ddp
            self.shards = ddp.shard_for_zero()
            self.buckets = ddp.buckets
            mine = {i for s in self.shards for i in s.owners[self.rank]}
            owned = [p for i, p in enumerate(ddp.parameters_reduced) if i in mine]
            self._order = {id(p): k for k, p in enumerate(self.params)}
            self.owned = sorted(owned, key=lambda p: self._order[id(p)])
        else:
            self.owned = list(self.params)
            self._order = {id(p): k for k, p in enumerate(self.params)}
        self.optim = optimizer_class(self.owned, **defaults) if self.owned else None

    # ---- what a torch optimizer offers ------------------------------------------------------------

    @property
    def param_groups(self) -> list[dict]:
        """The wrapped optimizer's groups (learning-rate schedulers change lr here)."""
        if self.optim is None:
            if not hasattr(self, "_empty_groups"):
                self._empty_groups = [dict(self.defaults, params=[])]
            return self._empty_groups
        return self.optim.param_groups

    @property
    def state(self) -> dict:
        return {} if self.optim is None else self.optim.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad.zero_()

    def step(self, closure=None):
        """Update this rank's parameters, then all-gather every bucket's parameters from their owners."""
        loss = closure() if closure is not None else None
        if self.optim is not None:
            self.optim.step()
        if self.ddp is not None:
            with no_grad():
                for bucket, shard in zip(self.buckets, self.shards):
                    self._all_gather(bucket, shard)
        return loss

    def _all_gather(self, bucket, shard) -> None:
        params = self.ddp.parameters_reduced
        numel = {i: params[i].numel() for i in bucket.params}
        ins = [params[i].reshape(-1) for i in shard.owners[self.rank]]
        pad = shard.padding(self.rank, numel)
        if pad:
            ins.append(zeros(pad, dtype=bucket.dtype))
        flat = apply("all_gather", *ins, world_size=self.world_size)
        for r, owned in enumerate(shard.owners):
            at = r * shard.chunk
            for i in owned:
                n = numel[i]
                if r != self.rank:
                    params[i].copy_(flat[at : at + n].reshape(params[i].shape))
                at += n

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> Tensor:
        """flame.nn.utils.clip_grad_norm_ over the gradients of every rank (each holds its parameters')."""
        norm_type = float(norm_type)
        grads = [p.grad for p in self.owned if p.grad is not None]
        with no_grad():
            if math.isinf(norm_type):
                parts = [g.abs().amax().float() for g in grads]
                local = parts[0] if parts else zeros(())
                for x in parts[1:]:
                    local = local.maximum(x)
                local = local.reshape(1)
                all_reduce(local, "max")
                total = local.reshape(())
            else:
                parts = [(g.abs().float() ** norm_type).sum() for g in grads]
                local = zeros(()) if not parts else parts[0]
                for x in parts[1:]:
                    local = local + x
                local = local.reshape(1)
                all_reduce(local, "sum")
                total = local.reshape(()) ** (1.0 / norm_type)
            coef = (float(max_norm) / (total + 1e-6)).clamp(max=1.0)
            for g in grads:
                g.copy_(g * coef.to(g.dtype))
        return total

    # ---- checkpoints: the single-GPU layout --------------------------------------------------------

    def _template(self, p: Tensor) -> dict[str, Tensor]:
        """Zero state tensors shaped as the wrapped optimizer keeps for p."""
        opt = self.optim or self.optimizer_class([p], **self.defaults)
        return opt._init_state(p, opt.param_groups[0])

    def state_dict(self) -> dict[str, Any]:
        """The whole optimizer's state, as optimizer_class over every parameter would give it (a
        collective: every rank calls it and gets it)."""
        mine = {id(p) for p in self.owned}
        owner = self._owners()
        state = {}
        with no_grad():
            for k, p in enumerate(self.params):
                st = self.optim.state[p] if id(p) in mine else self._template(p)
                got = {}
                for name, t in st.items():
                    buf = Tensor._concrete(t._data.copy(), t.dtype)  # the owner's own state stays as it is
                    if self.world_size > 1:
                        broadcast(buf, src=owner[k])
                    got[name] = buf
                state[k] = got
        groups = [
            {
                **{k: v for k, v in self.param_groups[0].items() if k != "params"},
                "params": list(range(len(self.params))),
            }
        ]
        return {"state": state, "param_groups": groups}

    def _owners(self) -> list[int]:
        if self.ddp is None:
            return [0] * len(self.params)
        index = {id(p): i for i, p in enumerate(self.ddp.parameters_reduced)}
        owner_of = {i: r for s in self.shards for r, owned in enumerate(s.owners) for i in owned}
        return [owner_of[index[id(p)]] for p in self.params]

    def _local(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """The part of a whole-optimizer state_dict that this rank's optimizer holds."""
        saved = {int(k): v for k, v in state_dict["state"].items()}
        ids = [self._order[id(p)] for p in self.owned]
        groups = [
            {
                **{k: v for k, v in state_dict["param_groups"][0].items() if k != "params"},
                "params": list(range(len(ids))),
            }
        ]
        return {"state": {j: saved.get(k, {}) for j, k in enumerate(ids)}, "param_groups": groups}

    def plan_load(self, state_dict: dict[str, Any]) -> list:
        if self.optim is None:
            return []
        return self.optim.plan_load(self._local(state_dict))

    def apply_load(self, pairs: list, state_dict: dict[str, Any]) -> None:
        if self.optim is not None:
            self.optim.apply_load(pairs, self._local(state_dict))

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a whole-optimizer state_dict (from state_dict() or a single-GPU run): each rank keeps its part."""
        self.apply_load(self.plan_load(state_dict), state_dict)
