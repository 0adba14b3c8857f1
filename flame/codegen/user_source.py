"""The CUDA text around user code (flame.cuda.kernel, flame.cuda.elementwise; the op's `user` trait,
flame.ir.ops.user.UserCode), and NVRTC's errors in it told in the user's own lines.

The user's text is copied verbatim between two marker comments (`BEGIN` / `END`, naming the op), so
an NVRTC error at line N of a generated source that falls between them is line N - (the begin marker's
line) of the user's text; nvrtc.py calls `user_errors` when a compile fails."""

from __future__ import annotations

import re

from flame.ir.ops.user import UserCode

BEGIN = "// flame user code begin:"
END = "// flame user code end:"
_LOG_LINE = re.compile(r"^.*?\((\d+)\): (.*)$")


def function_name(op: str) -> str:
    """The device function of a user elementwise op."""
    return f"flame_{op}"


def call(op: str, code: UserCode) -> str:
    """The snippet (codegen/snippets.py's form) of a user elementwise op: a call of its device function in
    the compute type ({ctype})."""
    return f"{function_name(op)}<{{ctype}}>(" + ", ".join(f"{{{k}}}" for k in range(len(code.params))) + ")"


def _quoted(op: str, code: UserCode, indent: str = "") -> str:
    """The user's text between the markers (the begin marker's line + k is the user's line k)."""
    return f"{indent}{BEGIN} {op}: {code.what}\n{code.source.rstrip()}\n{indent}{END} {op}\n"


def device_function(op: str, code: UserCode) -> str:
    """The prelude of a user elementwise op: its expression as a device function of the inputs, named
    as the user named them, in the compute type T (the result is rounded to T once)."""
    args = ", ".join(f"const T {p}" for p in code.params)
    return (
        f"template <typename T> __device__ __forceinline__ T {function_name(op)}({args}) {{\n"
        f"  return (T)(\n{_quoted(op, code)}  );\n}}"
    )


def kernel_body(op: str, code: UserCode, named: list[tuple[str, str, tuple]]) -> str:
    """The inside of a raw user kernel: for each parameter (name, C type, shape) a `<name>_t` type, its
    `<name>_numel` and `<name>_shape[]` (rank >= 1) as constants, then the user's body."""
    lines = []
    for name, ctype, shape in named:
        numel = 1
        for s in shape:
            numel *= s
        lines.append(f"  typedef {ctype} {name}_t;")
        lines.append(f"  const long long {name}_numel = {numel};")
        if shape:
            lines.append(f"  const long long {name}_shape[{len(shape)}] = {{{', '.join(str(s) for s in shape)}}};")
        lines.append(f"  (void){name}_numel;" + (f" (void){name}_shape;" if shape else ""))
    return "\n".join(lines) + "\n" + _quoted(op, code, "")


def _regions(source: str) -> list[tuple[int, int, str, list[str]]]:
    """(first line, last line, what, user lines) of each stretch of user code in `source` (1-based)."""
    lines = source.splitlines()
    out = []
    for i, text in enumerate(lines):
        if text.lstrip().startswith(BEGIN):
            what = text.split(":", 2)[2].strip() if text.count(":") >= 2 else ""
            end = next((j for j in range(i + 1, len(lines)) if lines[j].lstrip().startswith(END)), len(lines))
            out.append((i + 2, end, what, lines[i + 1 : end]))
    return out


def user_errors(source: str, log: str) -> str:
    """NVRTC's errors in user code, each with the user's line (number and text); '' when the source holds
    no user code. An error outside the user's lines of a source that holds some (an unbalanced bracket
    shows up in the code after it) is told as near the user's code."""
    regions = _regions(source)
    if not regions:
        return ""
    told, outside = [], []
    for entry in log.splitlines():
        m = _LOG_LINE.match(entry)
        if not m or "error" not in m.group(2):
            continue
        n, msg = int(m.group(1)), m.group(2).strip()
        hit = next((r for r in regions if r[0] <= n <= r[1]), None)
        if hit is None:
            outside.append(msg)
            continue
        k = n - hit[0] + 1
        told.append(f"{hit[2]}: line {k} of its CUDA code: {hit[3][k - 1].strip()}\n    {msg}")
    if not told:
        names = "; ".join(dict.fromkeys(r[2] for r in regions))
        first = outside[0] if outside else "see the NVRTC log below"
        told.append(
            f"{names}: its CUDA code does not compile (the error shows in the code flame wraps around "
            f"it: check its brackets, quotes and semicolons)\n    {first}"
        )
    return "\n".join(told)
