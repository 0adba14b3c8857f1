"""Codegen's on/off switches: each is read from Config first, else its environment variable, else its
default, and is part of codegen_settings (so compiled plans and rendered kernels are kept per setting)."""

from __future__ import annotations

import pytest

from flame.codegen import kernel
from flame.codegen.kernel import Config, codegen_settings

SWITCHES = [  # (environment variable, Config field and reader, default)
    ("FLAME_TILED_MAP", "tiled_maps", True),
    ("FLAME_WIDE_BYTE_TILES", "wide_byte_tiles", False),
    ("FLAME_BYTE_WORDS", "byte_words", True),
    ("FLAME_SPLAT_LOADS", "splat_loads", True),
    ("FLAME_MERGE_ROW_PASSES", "merge_row_passes", True),
    ("FLAME_BALANCED_SCALARS", "balanced_scalars", True),
]


@pytest.mark.parametrize("env,name,default", SWITCHES)
def test_config_then_environment_then_default(monkeypatch, env, name, default):
    read = getattr(kernel, name)
    monkeypatch.delenv(env, raising=False)
    assert read() is default
    before = codegen_settings()
    monkeypatch.setenv(env, "0" if default else "1")
    assert read() is (not default)
    assert read(Config(**{name: default})) is default  # Config wins over the environment
    assert codegen_settings() != before and codegen_settings(Config(**{name: default})) == before
