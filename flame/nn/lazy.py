"""Lazy modules (torch.nn.modules.lazy): a module whose parameters' shapes come from its first input.
It holds UninitializedParameter / UninitializedBuffer placeholders until its first call, which
materialises them from the input's shape (then initialises them as the eager module does, drawing from
the same generator) and turns the module into its `cls_to_become` (LazyLinear into Linear).

Inside @flame.compile the first call materialises the parameters outside the trace (the shapes are
known while tracing) and the trace goes on with them as ordinary parameters. An optimizer needs the
materialised parameters (flame creates optimizer state at construction): run one batch through the
model before building it, as torch's documentation asks. load_state_dict materialises the placeholders
from the saved shapes, as torch's."""

from __future__ import annotations

from typing import Any

from flame.frontend.context import current_trace, no_grad
from flame.nn.parameter import UninitializedParameter, is_lazy


class LazyModuleMixin:
    """Mixed in before the eager module class: `initialize_parameters(*args)` materialises the
    placeholders from the first call's arguments; `cls_to_become` is the class the module becomes."""

    cls_to_become: type | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._register_load_state_dict_pre_hook(self._lazy_load_hook)

    def has_uninitialized_params(self) -> bool:
        """Whether a parameter or buffer of this module is still a placeholder."""
        return any(is_lazy(t) for t in (*self._parameters.values(), *self._buffers.values()))

    def _lazy_weight_and_bias(self, bias: bool, dtype: Any) -> None:
        """Placeholders of dtype for the weight and, with bias, the bias (the eager layer made them; its
        bias is None without)."""
        self.weight = UninitializedParameter(dtype=dtype)
        if bias:
            self.bias = UninitializedParameter(dtype=dtype)

    def initialize_parameters(self, *args, **kwargs) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not define initialize_parameters()")

    def __call__(self, *args, **kwargs):
        self._infer_parameters(args, kwargs)  # (nothing to infer after load_state_dict: it only changes class)
        if not isinstance(self, LazyModuleMixin):  # it became cls_to_become: that class's call
            return self(*args, **kwargs)
        return super().__call__(*args, **kwargs)

    def _infer_parameters(self, args: tuple, kwargs: dict) -> None:
        if self.has_uninitialized_params():
            token = current_trace.set(None)  # the parameters are concrete tensors even when a trace calls
            try:
                with no_grad():
                    self.initialize_parameters(*args, **kwargs)
            finally:
                current_trace.reset(token)
        if self.has_uninitialized_params():
            raise RuntimeError(f"module {type(self).__name__} has not been fully initialized")
        if self.cls_to_become is not None:
            self.__class__ = self.cls_to_become

    def _lazy_load_hook(self, state_dict: dict, prefix: str, *rest: Any) -> None:
        """Materialise each placeholder that the state_dict being loaded holds, with the saved shape (and
        set the sizes the first call would have, in_features or in_channels or num_features, from them)."""
        done = False
        for store in (self._parameters, self._buffers):
            for name, t in store.items():
                saved = state_dict.get(prefix + name)
                if is_lazy(t) and saved is not None and not is_lazy(saved):
                    t.materialize(tuple(saved.shape))
                    done = True
        if done:
            self._sizes_from_parameters()

    def _sizes_from_parameters(self) -> None:
        """Set the input size the module's forward checks from its materialised parameters."""

