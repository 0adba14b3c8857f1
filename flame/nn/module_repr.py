"""How modules print, torch's layout: `Name(extra)` for a module whose extra_repr is one line and that has
no children; otherwise each extra_repr line, then each child as `(name): child`, indented by two spaces.
A ModuleList folds a run of children that print the same into one line, `(0-2): 3 x Linear(...)`."""

from __future__ import annotations


def _indented(child: str) -> str:
    return child.replace("\n", "\n  ")


def module_repr(module) -> str:
    """repr(module), as torch.nn.Module.__repr__."""
    extra = module.extra_repr()
    extra_lines = extra.split("\n") if extra else []
    child_lines = [f"({name}): " + _indented(repr(m)) for name, m in module._modules.items()]
    if len(extra_lines) == 1 and not child_lines:
        return f"{type(module).__name__}({extra_lines[0]})"
    lines = extra_lines + child_lines
    return f"{type(module).__name__}(" + ("\n  " + "\n  ".join(lines) + "\n" if lines else "") + ")"


def module_list_repr(modules) -> str:
    """repr(ModuleList), as torch's: consecutive children with the same repr share one line."""
    reprs = [repr(m) for m in modules]
    if not reprs:
        return f"{type(modules).__name__}()"
    runs: list[list] = []  # [first index, last index, repr]
    for i, r in enumerate(reprs):
        if runs and runs[-1][2] == r:
            runs[-1][1] = i
        else:
            runs.append([i, i, r])
    lines = [_indented(f"({a}): {r}" if a == b else f"({a}-{b}): {b - a + 1} x {r}") for a, b, r in runs]
    return f"{type(modules).__name__}(\n  " + "\n  ".join(lines) + "\n)"


def parameter_lines(entries, type_name) -> str:
    """The extra_repr of a ParameterList / ParameterDict, as torch's: one line per (key, entry),
    `  (key): Parameter containing: [<type_name(p)> of size 2x3]` (its device after a GPU tensor's size)."""
    lines = []
    for key, p in entries:
        if not hasattr(p, "shape"):
            lines.append(f"  ({key}): Object of type: {type(p).__name__}")
            continue
        device = getattr(p, "device", None)
        where = f" ({device})" if getattr(device, "type", "cpu") == "cuda" else ""
        kind = "Parameter" if type(p).__name__ == "Parameter" else "Tensor"
        lines.append(f"  ({key}): {kind} containing: [{type_name(p)} of size {'x'.join(map(str, p.shape))}{where}]")
    return "\n".join(lines)
