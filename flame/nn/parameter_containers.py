"""The Parameter containers of flame.nn (torch.nn.ParameterList, torch.nn.ParameterDict): modules whose
entries are registered Parameters (a tensor stored is wrapped in one)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from flame.frontend.tensor import Tensor
from flame.nn.module import Module, _Registry
from flame.nn.module_repr import parameter_lines
from flame.nn.parameter import Parameter

__all__ = ["ParameterDict", "ParameterList"]


def _as_parameter(value: Any) -> Parameter:
    return value if isinstance(value, Parameter) else Parameter(value if isinstance(value, Tensor) else Tensor(value))


class ParameterList(Module):
    """A list of Parameters, registered as "0", "1", ... (torch.nn.ParameterList); tensors appended are
    wrapped in Parameter."""

    def __init__(self, values: Iterable[Any] | None = None):
        super().__init__()
        for v in values or ():
            self.append(v)

    def append(self, value: Any) -> ParameterList:
        self.register_parameter(str(len(self._parameters)), _as_parameter(value))
        return self

    def extend(self, values: Iterable[Any]) -> ParameterList:
        for v in values:
            self.append(v)
        return self

    def __getitem__(self, i: int | slice):
        items = list(self._parameters.values())
        return ParameterList(items[i]) if isinstance(i, slice) else items[i]

    def __setitem__(self, i: int, value: Any) -> None:
        key = list(self._parameters)[i]
        self.register_parameter(key, _as_parameter(value))

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[Parameter]:
        return iter(self._parameters.values())

    def extra_repr(self) -> str:
        return parameter_lines(enumerate(self), lambda p: repr(p.dtype))


class ParameterDict(_Registry):
    """An ordered dict of Parameters (torch.nn.ParameterDict); tensors set are wrapped in Parameter."""

    _store = "_parameters"

    def __init__(self, parameters: Any = None):
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def update(self, entries: Any) -> None:
        """As PyTorch's: a plain dict's entries are added in sorted key order, an OrderedDict's,
        ParameterDict's or pairs' in their own."""
        if isinstance(entries, Mapping) and not isinstance(entries, (OrderedDict, ParameterDict)):
            entries = sorted(entries.items())
        super().update(entries)

    def _add(self, key: str, value: Any) -> None:
        self.register_parameter(key, _as_parameter(value))

    def extra_repr(self) -> str:
        return parameter_lines(self.items(), lambda p: p.type())
