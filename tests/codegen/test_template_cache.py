"""The kernel templates' compiled code kept in the cache directory (codegen/template_cache.py): a new
environment (a new process's) loads each template's code from its signed entry instead of compiling it,
and renders the same source; a forged or damaged entry is deleted and the template compiled again; an
unusable directory is no cache; `flame cache` counts and clears the entries."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest

from flame import cli
from flame.codegen import kernel, nvrtc
from flame.codegen.template_cache import MAGIC, SignedTemplates

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = "fused_rows_fold.cu.j2"


def _env() -> jinja2.Environment:
    """An environment as codegen/kernel.py's, with nothing compiled yet (a new process's)."""
    env = jinja2.Environment(loader=kernel._ENV.loader, undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True, bytecode_cache=SignedTemplates())
    env.filters.update(kernel._ENV.filters)
    return env


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.jinja"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("FLAME_CACHE_DIR", str(folder))
    return folder


def _compiles(env: jinja2.Environment, monkeypatch) -> list[str]:
    """The names of the templates env compiles from source from here on."""
    seen: list[str] = []
    compile_source = env.compile

    def counted(source, name=None, filename=None, raw=False, defer_init=False):
        seen.append(name)
        return compile_source(source, name, filename, raw, defer_init)

    monkeypatch.setattr(env, "compile", counted)
    return seen


def test_a_new_environment_loads_the_compiled_template(cache, monkeypatch):
    first = _env()
    made = _compiles(first, monkeypatch)
    code = first.get_template(TEMPLATE)
    assert made == [TEMPLATE] and len(_entries(cache)) == 1
    second = _env()
    made = _compiles(second, monkeypatch)
    again = second.get_template(TEMPLATE)
    assert made == []  # loaded from the entry, not compiled
    assert _code(again) == _code(code) and len(_entries(cache)) == 1


def _code(template: jinja2.Template) -> tuple:
    """What a compiled template runs: its render function's bytecode and constants."""
    c = template.root_render_func.__code__
    return c.co_code, tuple(x for x in c.co_consts if not hasattr(x, "co_code"))


@pytest.mark.parametrize("how", ["forged", "damaged", "another magic"])
def test_a_bad_entry_is_deleted_and_compiled_again(cache, monkeypatch, how):
    _env().get_template(TEMPLATE)
    (entry,) = _entries(cache)
    data = entry.read_bytes()
    head = len(MAGIC) + 65
    if how == "forged":  # a payload of someone's choosing under the old signature
        data = data[:head] + b"\xe3" + os.urandom(64)
    elif how == "damaged":
        data = data[:-7]
    else:
        data = b"FLAMECUBIN2\n" + data[len(MAGIC):]
    entry.write_bytes(data)
    env = _env()
    made = _compiles(env, monkeypatch)
    env.get_template(TEMPLATE)
    assert made == [TEMPLATE]  # compiled again, and stored anew
    (fresh,) = _entries(cache)
    assert fresh.read_bytes().startswith(MAGIC) and fresh.read_bytes() != data


def test_an_unusable_directory_is_no_cache(cache, monkeypatch):
    cache.mkdir(mode=0o777)
    os.chmod(cache, 0o777)  # others may write: not used (nvrtc.cache_dir), with a warning
    monkeypatch.setattr(nvrtc, "_warned", set())
    env = _env()
    made = _compiles(env, monkeypatch)
    with pytest.warns(RuntimeWarning, match="compiling without the kernel and plan caches"):
        env.get_template(TEMPLATE)
    assert made == [TEMPLATE] and _entries(cache) == []


def test_a_new_process_loads_what_the_last_one_compiled(tmp_path):
    """Two processes, one cache directory: the second compiles none of the templates the first compiled
    (and stored), and runs the same code for each."""
    script = ("import hashlib, marshal\n"
              "from flame.codegen import kernel\n"
              "made, compile_source = [], kernel._ENV.compile\n"
              "kernel._ENV.compile = lambda source, name=None, *a, **k: made.append(name) or "
              "compile_source(source, name, *a, **k)\n"
              "names = sorted(p.name for p in (kernel.Path(kernel.__file__).parent / 'templates').iterdir())\n"
              "codes = [kernel._ENV.get_template(n).root_render_func.__code__.co_code for n in names]\n"
              "print(len(made), hashlib.sha256(b''.join(codes)).hexdigest())\n")
    env = {**os.environ, "FLAME_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    (first, code1), (second, code2) = (r.stdout.split() for r in runs)
    assert int(first) == len(_entries(tmp_path / "cache")) > 0 and int(second) == 0 and code1 == code2


def test_flame_cache_counts_and_clears_the_templates(cache, capsys):
    _env().get_template(TEMPLATE)
    assert cli.main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert "compiled kernel templates: " + str(cache) in out and "entries: 1" in out.split("compiled kernel")[1]
    assert cli.main(["cache", "clear"]) == 0
    assert "1 compiled template(s)" in capsys.readouterr().out and _entries(cache) == []
