"""The kernel cache is trusted only when it is the user's own: other people's directories are not used,
forged entries fail their HMAC, writes are best-effort, and `cache clear` leaves other processes'
in-flight temporaries alone (issue 14 item 11)."""

from __future__ import annotations

import hashlib
import hmac
import os
import warnings

import pytest

from flame.codegen import nvrtc
from flame.errors import FlameError
from tests.codegen.test_nvrtc import SRC, _entries


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("FLAME_CACHE_DIR", str(d))
    nvrtc._warned.clear()
    return d


def test_a_planted_entry_with_a_self_consistent_hash_is_rejected(cache):
    good = nvrtc.compile_cubin(SRC, "sm_80")
    (entry,) = _entries(cache)
    evil = good.replace(b"flame_test_k", b"flame_evil_k")
    # what an attacker can compute without the secret: the old scheme, a hash of the payload itself
    entry.write_bytes(nvrtc._MAGIC + hashlib.sha256(evil).hexdigest().encode() + b"\n" + evil)
    assert nvrtc.compile_cubin(SRC, "sm_80") == good
    assert nvrtc._read(entry) == good


def test_an_entry_copied_under_another_name_is_rejected(cache):
    nvrtc.compile_cubin(SRC, "sm_80")
    (entry,) = _entries(cache)
    other = cache / ("0" * 64 + ".cubin")
    other.write_bytes(entry.read_bytes())
    assert nvrtc._read(other) is None


def test_the_secret_is_private(cache):
    nvrtc.compile_cubin(SRC, "sm_80")
    key = cache / ".hmac-key"
    assert oct(os.stat(key).st_mode & 0o777) == "0o600" and len(key.read_bytes()) == 32


def test_a_directory_writable_by_others_is_not_used(cache):
    cache.mkdir(mode=0o700)
    os.chmod(cache, 0o777)
    with pytest.warns(RuntimeWarning, match="writable by others"):
        assert nvrtc.compile_cubin(SRC, "sm_80")[:4] == b"\x7fELF"
    assert _entries(cache) == []
    assert oct(os.stat(cache).st_mode & 0o777) == "0o777"  # left as it is; flame does not chmod it
    with pytest.raises(FlameError, match="writable by others"):
        nvrtc.cache_info()


def test_a_directory_of_another_user_is_not_used(cache, monkeypatch):
    cache.mkdir(mode=0o700)
    monkeypatch.setattr(nvrtc.os, "getuid", lambda: os.stat(cache).st_uid + 1)
    with pytest.raises(FlameError, match="not owned by you"):
        nvrtc.cache_dir()


def test_an_unwritable_cache_still_returns_the_compiled_kernel(cache, monkeypatch):
    def full(*a, **k):
        raise OSError(28, "No space left on device")

    nvrtc.cache_dir()
    monkeypatch.setattr(nvrtc, "_write", full)
    with pytest.warns(RuntimeWarning, match="cannot write"):
        assert nvrtc.compile_cubin(SRC, "sm_80")[:4] == b"\x7fELF"


def test_a_cache_path_that_is_a_file(tmp_path, monkeypatch):
    f = tmp_path / "file"
    f.write_text("x")
    monkeypatch.setenv("FLAME_CACHE_DIR", str(f))
    nvrtc._warned.clear()
    with pytest.warns(RuntimeWarning):
        assert nvrtc.compile_cubin(SRC, "sm_80")[:4] == b"\x7fELF"
    with pytest.raises(FlameError, match="cannot be used"):
        nvrtc.cache_info()


def test_clear_keeps_in_flight_temporaries_of_live_processes(cache):
    nvrtc.compile_cubin(SRC, "sm_80")
    live = cache / f".tmp-{os.getppid()}.abc.part"
    dead = cache / ".tmp-999999999.abc.part"
    legacy = cache / ".tmp-abc.part"
    for p in (live, dead, legacy):
        p.write_bytes(b"half")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert nvrtc.cache_clear() == 1
    assert live.exists() and not dead.exists() and not legacy.exists()


def _kernel(i: int) -> str:
    return SRC.replace("flame_test_k", f"flame_test_k{i}")


@pytest.mark.parametrize("short", [b"", b"k", b"x" * 31])
def test_an_empty_or_short_key_is_replaced_with_one_warning(cache, short):
    """A key file shorter than 32 bytes (an empty one would let anyone sign) is never signed with:
    it is replaced by a new key, one warning for the process."""
    good = nvrtc.compile_cubin(SRC, "sm_80")
    key = cache / ".hmac-key"
    key.write_bytes(short)
    os.chmod(key, 0o600)
    (entry,) = _entries(cache)
    # an entry signed with the short key, as someone knowing it could make one
    evil = good.replace(b"flame_test_k", b"flame_evil_k")
    forged = hmac.new(short, entry.name.encode() + b"\0" + evil, hashlib.sha256).hexdigest().encode()
    entry.write_bytes(nvrtc._MAGIC + forged + b"\n" + evil)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert nvrtc.compile_cubin(SRC, "sm_80") == good  # the forged entry fails under the new key
        for i in range(3):
            nvrtc.compile_cubin(_kernel(i), "sm_80")
    assert [str(w.message) for w in seen] == [
        f"flame: the kernel cache key {str(key)!r} holds {len(short)} bytes, fewer than 32; it is replaced by a "
        f"new key (cached kernels are compiled again)"]
    new = key.read_bytes()
    assert len(new) == 32 and new != short and oct(os.stat(key).st_mode & 0o777) == "0o600"
    assert nvrtc._read(entry) == good  # rebuilt and signed with the new key


def test_a_key_that_cannot_be_replaced_is_never_signed_with(cache, monkeypatch):
    nvrtc.compile_cubin(SRC, "sm_80")
    (cache / ".hmac-key").write_bytes(b"")
    monkeypatch.setattr(nvrtc, "_new_key", lambda path, replace: None)  # a replacement that does not happen
    signed = []
    real = nvrtc.hmac.new
    monkeypatch.setattr(nvrtc.hmac, "new", lambda key, *a, **k: signed.append(key) or real(key, *a, **k))
    with pytest.warns(RuntimeWarning, match="holds 0 bytes"):
        assert nvrtc.compile_cubin(_kernel(7), "sm_80")[:4] == b"\x7fELF"
    assert b"" not in signed
    with pytest.raises(FlameError, match="holds 0 bytes, fewer than 32"):
        nvrtc._secret(cache)


def test_a_read_only_cache_warns_once_naming_the_directory(cache, monkeypatch):
    """Each kernel's write fails on its own temporary file; the warning names the directory, once."""
    nvrtc.compile_cubin(SRC, "sm_80")
    made = iter(range(100))

    def denied(*, dir, prefix, suffix):
        raise PermissionError(13, "Permission denied", os.path.join(dir, f"{prefix}{next(made)}x{suffix}"))

    monkeypatch.setattr(nvrtc.tempfile, "mkstemp", denied)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for i in range(4):
            assert nvrtc.compile_cubin(_kernel(i), "sm_80")[:4] == b"\x7fELF"
        assert nvrtc.compile_many([_kernel(i) for i in range(4, 8)], "sm_80")[0][:4] == b"\x7fELF"
    assert [str(w.message) for w in seen] == [
        f"flame: cannot write to the kernel cache {str(cache)!r} (Permission denied); kernels are compiled again "
        f"next time"]
    assert nvrtc.compile_cubin(SRC, "sm_80")[:4] == b"\x7fELF"  # entries already there are still read
