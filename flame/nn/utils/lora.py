"""LoRA: low-rank adapters on a frozen model (Hu et al., 2021), with PEFT's conventions.

    from flame.nn.utils import lora
    lora.apply_lora(model, lora.LoraConfig(r=16, lora_alpha=32, target_modules=["qkv", "proj"]))
    ...train: only the adapters (lora_A, lora_B) have requires_grad...
    lora.save_lora(model, "adapters.safetensors")     # the adapters only, PEFT's names
    lora.load_lora(fresh_model, "adapters.safetensors")   # wraps fresh_model as the file says, loads
    lora.merge_lora(model)                             # W += (alpha / r) B A: inference at the base's cost

Each targeted `nn.Linear` becomes a `lora.Linear` holding it as `base_layer` plus `lora_A`
(in -> r, kaiming-uniform as PEFT) and `lora_B` (r -> out, zeros, so training starts from the base
model), `lora_dropout` on the adapter's input and `scaling = lora_alpha / r`:
y = base_layer(x) + scaling * lora_B(lora_A(dropout(x))). Everything else is frozen
(requires_grad=False), so autodiff builds no gradient for it: a frozen Linear's backward computes
the input's gradient (when something before it trains) and never its weight gradient.

Saved files are safetensors written atomically (flame.checkpoint.save) with PEFT's names,
`base_model.model.<module path>.lora_A.weight`, and PEFT's adapter_config fields as JSON in the
header's `adapter_config` metadata.

Inside @flame.compile the module structure is read at trace time: wrap, merge or unmerge before
compiling a function (a function compiled earlier keeps the structure it traced, as it keeps
train()/eval())."""

from __future__ import annotations

import json
import os
import re
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

from flame.checkpoint import copy_pairs, load, load_metadata, save
from flame.errors import CheckpointError, FlameError
from flame.frontend.context import no_grad
from flame.frontend.creation import Generator
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import bf16, f16, f32
from flame.nn import init
from flame.nn.layers import Dropout, Identity
from flame.nn.layers import Linear as _Linear
from flame.nn.module import Module
from flame.nn.module_state import match_state

__all__ = ["Linear", "LoraConfig", "apply_lora", "load_lora", "lora_layers", "lora_state_dict",
           "mark_only_lora_as_trainable", "merge_and_unload", "merge_lora", "save_lora", "unmerge_lora"]

PREFIX = "base_model.model."  # PEFT's name prefix of every saved tensor
_BIAS = ("none", "all", "lora_only")


@dataclass(frozen=True)
class LoraConfig:
    """PEFT's LoraConfig fields. target_modules: module names (a module matches when its dotted path
    equals a name or ends with "." + name) or one regular expression (matched against the whole
    path). bias: which biases train and are saved with the adapters: none, all, or lora_only (those
    of the wrapped layers)."""

    r: int = 8
    lora_alpha: float = 8
    lora_dropout: float = 0.0
    target_modules: list[str] | str = field(default_factory=list)
    bias: str = "none"

    def __post_init__(self):
        if not isinstance(self.r, int) or self.r <= 0:
            raise ValueError(f"LoraConfig: r must be a positive integer, got {self.r!r}")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"LoraConfig: lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if self.bias not in _BIAS:
            raise ValueError(f"LoraConfig: bias must be one of {list(_BIAS)}, got {self.bias!r}")
        if not self.target_modules:
            raise ValueError("LoraConfig: target_modules is empty (name the Linear layers to adapt)")
        if not isinstance(self.target_modules, str):
            object.__setattr__(self, "target_modules", list(self.target_modules))

    def matches(self, path: str) -> bool:
        """Whether the module at dotted `path` is a target (PEFT's rule)."""
        if isinstance(self.target_modules, str):
            return re.fullmatch(self.target_modules, path) is not None
        return any(path == t or path.endswith("." + t) for t in self.target_modules)

    def to_json(self) -> str:
        """PEFT's adapter_config.json fields (the ones flame uses)."""
        return json.dumps({"peft_type": "LORA", **asdict(self)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> LoraConfig:
        d = json.loads(text)
        return cls(**{k: d[k] for k in ("r", "lora_alpha", "lora_dropout", "target_modules", "bias") if k in d})


class Linear(Module):
    """A frozen-or-not `base_layer` (nn.Linear) plus a rank-r adapter:
    y = base_layer(x) + scaling * lora_B(lora_A(lora_dropout(x))), scaling = lora_alpha / r.
    lora_A is kaiming-uniform (a=sqrt(5)) and lora_B zeros, as PEFT initialises them. The adapter
    has the base weight's dtype, except that an f16/bf16 base gets f32 adapters (PEFT's
    autocast_adapter_dtype): they train as master weights, cast to the input's dtype in forward.
    After merge() the adapter is folded into base_layer.weight and forward is the base layer alone."""

    def __init__(self, base_layer: _Linear, r: int, lora_alpha: float = 8, lora_dropout: float = 0.0,
                 generator: Generator | None = None):
        super().__init__()
        if not isinstance(base_layer, _Linear):
            raise TypeError(f"lora.Linear wraps an nn.Linear, got {type(base_layer).__name__}")
        self.base_layer = base_layer
        self.in_features, self.out_features = base_layer.in_features, base_layer.out_features
        self.r, self.lora_alpha, self.scaling = r, lora_alpha, lora_alpha / r
        dt = f32 if base_layer.weight.dtype in (f16, bf16) else base_layer.weight.dtype
        # nn.Linear's own init is PEFT's for lora_A: kaiming_uniform_(a=sqrt(5))
        self.lora_A = _Linear(self.in_features, r, bias=False, dtype=dt, generator=generator)
        self.lora_B = _Linear(r, self.out_features, bias=False, dtype=dt, generator=generator)
        init.zeros_(self.lora_B.weight)
        self.lora_dropout = Dropout(lora_dropout) if lora_dropout > 0 else Identity()
        self.merged = False

    def lora_delta(self, x: Tensor) -> Tensor:
        """scaling * lora_B(lora_A(dropout(x))), computed in x's dtype (the adapter's weights are cast
        to it, as f32 master weights are for bf16 activations)."""
        # cast after the transpose, as examples/train_gpt.py's _linear does (see its note)
        a = self.lora_A.weight.transpose(0, 1).to(x.dtype)
        b = self.lora_B.weight.transpose(0, 1).to(x.dtype)
        return self.lora_dropout(x) @ a @ b * self.scaling

    def forward(self, x: Tensor) -> Tensor:
        y = self.base_layer(x)
        return y if self.merged else y + self.lora_delta(x)

    def delta_weight(self) -> Tensor:
        """scaling * B @ A, [out, in] in f32: what merge() adds to the base weight."""
        with no_grad():
            return (self.lora_B.weight.to(f32) @ self.lora_A.weight.to(f32)) * self.scaling

    def merge(self) -> None:
        """Fold the adapter into base_layer.weight in place (W += scaling * B @ A, in f32)."""
        if self.merged:
            raise FlameError("lora.Linear.merge(): the adapter is merged already")
        self._add_to_base(self.delta_weight())
        self.merged = True

    def unmerge(self) -> None:
        """Undo merge() (W -= scaling * B @ A; exact up to the rounding of the two updates)."""
        if not self.merged:
            raise FlameError("lora.Linear.unmerge(): the adapter is not merged")
        self._add_to_base(-self.delta_weight())
        self.merged = False

    def _add_to_base(self, delta: Tensor) -> None:
        w = self.base_layer.weight
        with no_grad():
            w.copy_((w.to(f32) + delta).to(w.dtype))

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, r={self.r}, "
                f"lora_alpha={self.lora_alpha}, merged={self.merged}")


# ---- wrapping a model -------------------------------------------------------------------------------


def _parent(model: Module, path: str) -> tuple[Module, str]:
    """(the module holding the child at dotted `path`, the child's attribute name)."""
    *outer, leaf = path.split(".")
    parent = model
    for name in outer:
        parent = getattr(parent, name)
    return parent, leaf


def lora_layers(model: Module) -> Iterator[tuple[str, Linear]]:
    """(dotted path, lora.Linear) for every wrapped layer of model."""
    for path, m in model.named_modules():
        if isinstance(m, Linear):
            yield path, m


def apply_lora(model: Module, config: LoraConfig, generator: Generator | None = None) -> Module:
    """Wrap every nn.Linear of model that config.target_modules names in a lora.Linear (in place),
    freeze everything else (mark_only_lora_as_trainable) and record the config as model.lora_config.
    Returns model. ValueError if a target names no module or a module that is not an nn.Linear."""
    if any(True for _ in lora_layers(model)):
        raise FlameError(f"apply_lora: {type(model).__name__} has LoRA adapters already")
    targets = [(p, m) for p, m in model.named_modules() if p and config.matches(p)]
    if not targets:
        raise ValueError(f"apply_lora: target modules {config.target_modules} not found in the model "
                         f"(module paths look like {[p for p, _ in model.named_modules() if p][:4]})")
    for path, m in targets:
        if not isinstance(m, _Linear):
            raise ValueError(f"apply_lora: target module {path!r} is a {type(m).__name__}; LoRA wraps "
                             f"nn.Linear layers only")
    for path, m in targets:
        parent, leaf = _parent(model, path)
        setattr(parent, leaf, Linear(m, config.r, config.lora_alpha, config.lora_dropout, generator))
    model.lora_config = config
    mark_only_lora_as_trainable(model, config.bias)
    return model


def _is_adapter(name: str) -> bool:
    return ".lora_A." in f".{name}" or ".lora_B." in f".{name}"


def _trains_bias(name: str, bias: str, wrapped: set[str]) -> bool:
    """Whether parameter `name` is a bias that trains with the adapters under bias mode `bias`."""
    if bias == "none" or not name.endswith("bias"):
        return False
    return bias == "all" or name.rpartition(".base_layer.")[0] in wrapped


def mark_only_lora_as_trainable(model: Module, bias: str = "none") -> None:
    """requires_grad=True for the adapters (and the biases `bias` names: none, all, lora_only),
    False for every other parameter."""
    if bias not in _BIAS:
        raise ValueError(f"mark_only_lora_as_trainable: bias must be one of {list(_BIAS)}, got {bias!r}")
    wrapped = {p for p, _ in lora_layers(model)}
    for name, p in model.named_parameters():
        p.requires_grad = _is_adapter(name) or _trains_bias(name, bias, wrapped)


# ---- saving and loading the adapters ---------------------------------------------------------------


def _bias_mode(model: Module, bias: str | None) -> str:
    if bias is not None:
        return bias
    config = model.__dict__.get("lora_config")
    return config.bias if config is not None else "none"


def lora_state_dict(model: Module, bias: str | None = None) -> OrderedDict[str, Tensor]:
    """PEFT-named tensors of the adapters (`base_model.model.<path>.lora_A.weight` / `lora_B.weight`)
    and of the biases that train with them (bias: none, all, lora_only; default the model's
    lora_config.bias). The tensors are the model's own parameters (not copies)."""
    bias = _bias_mode(model, bias)
    wrapped = {p for p, _ in lora_layers(model)}
    return OrderedDict((PREFIX + n, p) for n, p in model.named_parameters()
                       if _is_adapter(n) or _trains_bias(n, bias, wrapped))


def save_lora(model: Module, path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    """Write the adapters (lora_state_dict) to a safetensors file, atomically, with the LoRA config
    (PEFT's adapter_config fields) as the header's `adapter_config` metadata."""
    config = model.__dict__.get("lora_config")
    layers = list(lora_layers(model))
    if not layers:
        raise FlameError(f"save_lora: {type(model).__name__} has no LoRA adapters (call apply_lora first)")
    if config is None:  # wrapped by hand: describe what is there
        _, first = layers[0]
        config = LoraConfig(first.r, first.lora_alpha, 0.0, [p for p, _ in layers])
    save(lora_state_dict(model), path, metadata={**(metadata or {}), "adapter_config": config.to_json()})


def load_lora(model: Module, path: str | os.PathLike, strict: bool = True) -> dict[str, str]:
    """Load adapters saved by save_lora (or PEFT-named safetensors) into model in place. A model
    without adapters is first wrapped with the file's adapter_config (apply_lora). Raises
    flame.CheckpointError listing every missing, unexpected and mis-shaped tensor (nothing changes
    then). Returns the file's metadata."""
    meta = load_metadata(path)
    tensors = load(path)
    where = os.fspath(path)
    if not any(True for _ in lora_layers(model)):
        if "adapter_config" not in meta:
            raise CheckpointError(f"{where!r} has no adapter_config metadata; call apply_lora on the model "
                                  f"with the adapters' LoraConfig before load_lora")
        apply_lora(model, LoraConfig.from_json(meta["adapter_config"]))
    merged = [p for p, m in lora_layers(model) if m.merged]
    if merged:
        raise FlameError(f"load_lora: adapters of {merged} are merged into their base weights; unmerge first")
    try:
        pairs, _ = match_state(lora_state_dict(model), tensors, strict, "LoRA adapters")
    except CheckpointError as e:
        raise CheckpointError(f"{where!r}: {e}") from None
    copy_pairs(pairs)
    return meta


# ---- merging -------------------------------------------------------------------------------------------


def merge_lora(model: Module) -> Module:
    """Fold every adapter into its base weight (inference at the base model's cost). Returns model."""
    for _, m in lora_layers(model):
        m.merge()
    return model


def unmerge_lora(model: Module) -> Module:
    """Undo merge_lora. Returns model."""
    for _, m in lora_layers(model):
        m.unmerge()
    return model


def merge_and_unload(model: Module) -> Module:
    """Merge every adapter and put each base nn.Linear back in place of its lora.Linear (PEFT's name):
    a plain model again, with the fine-tuned weights. Returns model."""
    for path, m in list(lora_layers(model)):
        if not m.merged:
            m.merge()
        parent, leaf = _parent(model, path)
        setattr(parent, leaf, m.base_layer)
    model.__dict__.pop("lora_config", None)
    return model
