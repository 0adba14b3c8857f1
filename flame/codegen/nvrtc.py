"""CUDA C++ -> cubin with NVRTC (through CuPy's bindings), behind an on-disk cache.

Cache entries live in ~/.cache/flame (mode 0700; env FLAME_CACHE_DIR overrides), one file per
sha256(source, arch, options, NVRTC version, flame version). A cache directory that is not owned by
the user or that others may write is not used (a warning says so; kernels are then compiled every
time), as pip and CUDA's own caches do. Each file holds a magic line, an HMAC-SHA256 of the entry's
name and payload under a per-user secret (`.hmac-key` in the directory, mode 0600, 32 random bytes; a
shorter one, such as an empty file, is replaced with a warning) and the payload: an entry planted by
someone without the secret, or one whose payload is damaged, fails the check and is deleted and
rebuilt. Entries are written to a temporary file and os.replace()d into place, so readers never see
half an entry; writing is best-effort (a failure, such as a read-only directory, warns once per
process and directory, and the compile still returns).
A compile error raises FlameError with the numbered source, the NVRTC log and the IR op (and, for user
code, the user's lines the errors are in: codegen/user_source.py)."""

from __future__ import annotations

import atexit
import glob
import hashlib
import hmac
import itertools
import os
import queue
import stat
import tempfile
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from functools import lru_cache
from pathlib import Path

from flame._env import env_flag
from flame._tempfiles import remove_dead_temps, temp_prefix
from flame._version import __version__
from flame.codegen import cache_ledger, nvrtc_pool, nvrtc_worker
from flame.codegen.user_source import user_errors
from flame.errors import FlameError

_MAGIC = b"FLAMECUBIN2\n"  # 2: the digest is an HMAC (entries of version 1 fail the check and are rebuilt)
_KEY_FILE = ".hmac-key"
_KEY_BYTES = 32  # HMAC-SHA256's block-sized secret; a shorter key file is replaced
_TMP = ".tmp-"
OPTIONS = ("-std=c++17", "-default-device")  # no --use_fast_math: kernels must match the reference


def _cache_path() -> Path:
    env = os.environ.get("FLAME_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "flame"


def cache_dir() -> Path:
    """The cache directory (created with mode 0700 on first use). FlameError if it is not a directory,
    is not owned by the user, or others may write to it."""
    path = _cache_path()
    try:
        if not path.is_dir():
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(path, 0o700)  # mkdir's mode is filtered by the umask
        st = os.stat(path)
    except OSError as e:
        raise FlameError(f"kernel cache directory {str(path)!r} cannot be used: {e.strerror or e}") from None
    if st.st_uid != os.getuid():
        raise FlameError(f"kernel cache directory {str(path)!r} is not owned by you (uid {st.st_uid}); "
                         f"set FLAME_CACHE_DIR to a directory of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise FlameError(f"kernel cache directory {str(path)!r} is writable by others (mode "
                         f"{stat.S_IMODE(st.st_mode):o}); run chmod 700 on it or set FLAME_CACHE_DIR")
    return path


_warned: set[tuple[str, str]] = set()  # (what failed, the cache directory): each warned about once
_lock = threading.RLock()  # compile_many's threads share the warnings and the key


def _warn_once(what: str, folder: Path | str, message: str) -> None:
    """Warn once per process about `what` failing in the cache directory `folder` (one warning, not
    one per kernel: the message must not name a kernel's files)."""
    with _lock:
        if (what, str(folder)) in _warned:
            return
        _warned.add((what, str(folder)))
    warnings.warn(f"flame: {message}", RuntimeWarning, stacklevel=3)


def _reason(e: BaseException) -> str:
    """Why an operation on the cache failed, without the file it failed on (a temporary's name)."""
    return (e.strerror or str(e)) if isinstance(e, OSError) else str(e)


def usable_dir() -> Path | None:
    """cache_dir(), or None (with a warning, once) when it cannot be trusted or created."""
    try:
        return cache_dir()
    except FlameError as e:
        _warn_once("use", _cache_path(), f"{e}; compiling without the kernel and plan caches")
        return None


def _new_key(path: Path, replace: bool) -> None:
    """Write a fresh random key to `path` (mode 0600) atomically: with replace, in place of what is
    there; else only if there is none (concurrent creators agree on one key)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=temp_prefix(_TMP), suffix=".part")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(_KEY_BYTES))
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
    finally:
        Path(tmp).unlink(missing_ok=True)


def _secret(folder: Path) -> bytes:
    """The per-user HMAC key of the cache (created once, 0600; OSError if it cannot be read or made,
    FlameError if someone else could have written it). A key shorter than _KEY_BYTES (an empty file)
    would let anyone sign entries: it is replaced by a new one, with one warning (entries signed with
    it then fail their check and are compiled again); FlameError if that cannot be done."""
    path = folder / _KEY_FILE
    if not path.exists():
        _new_key(path, replace=False)
    key = _read_key(path)
    if len(key) >= _KEY_BYTES:
        return key
    with _lock:  # one thread replaces it; the others read the new key
        key = _read_key(path)
        if len(key) < _KEY_BYTES:
            _warn_once("key", folder, f"the kernel cache key {str(path)!r} holds {len(key)} bytes, fewer than "
                       f"{_KEY_BYTES}; it is replaced by a new key (cached kernels are compiled again)")
            _new_key(path, replace=True)
            key = _read_key(path)
    if len(key) < _KEY_BYTES:
        raise FlameError(f"the kernel cache key {str(path)!r} holds {len(key)} bytes, fewer than {_KEY_BYTES}")
    return key


def _read_key(path: Path) -> bytes:
    """The key file's bytes, once it is known to be a private regular file of the user's."""
    st = os.stat(path)
    if st.st_uid != os.getuid() or st.st_mode & 0o077 or not stat.S_ISREG(st.st_mode):
        raise FlameError(f"the kernel cache key {str(path)!r} is not a private file of yours")
    return path.read_bytes()


def _digest(path: Path, payload: bytes) -> bytes:
    """HMAC of the entry's name (the sha256 of what it was compiled from) and its payload."""
    return hmac.new(_secret(path.parent), path.name.encode() + b"\0" + payload, hashlib.sha256).hexdigest().encode()


@lru_cache(maxsize=1)
def include_dirs() -> tuple[str, ...]:
    """CUDA header directories: pip's nvidia/*/include, then $CUDA_PATH/include, /usr/local/cuda/include."""
    found: list[str] = []
    try:
        import nvidia

        for root in nvidia.__path__:
            found += sorted(glob.glob(os.path.join(root, "*", "include")))
    except ImportError:
        pass
    for env in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(env):
            found.append(os.path.join(os.environ[env], "include"))
    found.append("/usr/local/cuda/include")
    out: list[str] = []
    for d in found:
        if os.path.isdir(d) and d not in out:
            out.append(d)
    return tuple(out)


def _nvrtc():
    from cupy.cuda import nvrtc

    return nvrtc


@lru_cache(maxsize=1)
def nvrtc_version() -> str:
    major, minor = _nvrtc().getVersion()
    return f"{major}.{minor}"


def device_arch() -> str:
    """The current GPU's architecture as NVRTC spells it ("sm_90"), clamped to what NVRTC supports."""
    import cupy

    cc = int(cupy.cuda.Device().compute_capability)
    return f"sm_{_supported_arch(cc)}"


def _supported_arch(cc: int) -> int:
    try:
        archs = [a for a in _nvrtc().getSupportedArchs() if a <= cc]
    except Exception:  # older NVRTC without the query
        return cc
    return max(archs) if archs else cc


def _key(source: str, arch: str) -> str:
    h = hashlib.sha256()
    for part in (source, arch, " ".join(OPTIONS), nvrtc_version(), __version__):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


class UnsignedEntry(Exception):
    """A cache entry that fails its check (damaged, planted, or signed with another key); deleted."""


def read_signed(path: Path, magic: bytes = _MAGIC) -> bytes | None:
    """The payload of the cache entry at `path` (a file of the cache directory), or None if there is
    none. An entry whose magic line or HMAC does not check out is deleted and raises UnsignedEntry.
    A good entry's modification time is set to now: the size limit (flame.plan.cache) evicts the
    least recently used entries first."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    head = len(magic) + 65
    if data[: len(magic)] == magic and len(data) > head:
        digest, payload = data[len(magic) : head - 1], data[head:]
        if hmac.compare_digest(_digest(path, payload), digest):
            try:
                os.utime(path)
            except OSError:
                pass  # evicted meanwhile, or a read-only directory: the payload is still good
            return payload
    path.unlink(missing_ok=True)
    raise UnsignedEntry(path.name)


def write_signed(path: Path, payload: bytes, magic: bytes = _MAGIC) -> None:
    """Write a cache entry atomically: magic line, HMAC of name and payload, payload, into a
    temporary file that is os.replace()d onto `path` (readers never see half an entry); its bytes are
    then added to the directory's running size (codegen/cache_ledger.py)."""
    data = magic + _digest(path, payload) + b"\n" + payload
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=temp_prefix(_TMP), suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    cache_ledger.record(path.parent, len(data))


def _read(path: Path) -> bytes | None:
    """The payload of a kernel entry, or None if missing; an entry failing its HMAC is deleted."""
    try:
        return read_signed(path)
    except UnsignedEntry:
        return None


def _write(path: Path, payload: bytes) -> None:
    write_signed(path, payload)


def ir_line(source: str) -> str:
    """The IR op a generated source implements (from its leading comment), or ''."""
    for line in source.splitlines()[:3]:
        if line.startswith("// flame kernel for IR op:"):
            return line.split(":", 1)[1].strip()
    return ""


def _numbered(source: str) -> str:
    lines = source.splitlines()
    width = len(str(len(lines)))
    return "\n".join(f"{i + 1:>{width}} | {text}" for i, text in enumerate(lines))


# a kernel source holding this line uses Hopper's architecture-specific instructions (wgmma): NVRTC compiles it
# for sm_90a rather than sm_90 (the plan builder chooses such a kernel only for an sm_90 target)
ARCH_SPECIFIC = "// flame: architecture-specific instructions (sm_90a)"


def _compile(source: str, arch: str, name_hint: str) -> bytes:
    """The cubin of `source`, compiled in a compile process (codegen/nvrtc_pool.py) or, where those are
    off or failed, in this one; FlameError with NVRTC's log and the numbered source when it fails."""
    if arch == "sm_90" and ARCH_SPECIFIC in source:
        arch = "sm_90a"
    opts = [f"--gpu-architecture={arch}", *OPTIONS] + [f"-I{d}" for d in include_dirs()]
    name = (name_hint or "kernel") + ".cu"
    answer = nvrtc_pool.run(source, name, opts)
    if answer is None:
        answer = nvrtc_worker.compile_source(_nvrtc(), source, name, opts)
    if answer[0] == "cubin":
        return answer[1]
    _, what, log = answer
    op = ir_line(source)
    user = user_errors(source, log)
    raise FlameError(
        (f"{user}\n" if user else "")
        + f"NVRTC could not compile kernel {name_hint or '?'} for {arch} ({what})"
        + (f"\n  IR op: {op}" if op else "")
        + f"\n--- NVRTC log ---\n{log.strip()}\n--- generated source ---\n{_numbered(source)}"
    )


def compile_cubin(source: str, arch: str, name_hint: str = "") -> bytes:
    """The cubin of `source` for `arch` ("sm_90"), from the cache or compiled (and cached) now; a
    compile started ahead (compile_ahead) is waited for instead. The cache is best-effort: an unusable
    directory or a failed write warns, and the compile still returns."""
    with _lock:
        ahead = _AHEAD.pop((source, arch), None)
    if ahead is not None:
        return ahead.result()
    return _cached_compile(source, arch, name_hint)


def _cached_compile(source: str, arch: str, name_hint: str) -> bytes:
    folder = usable_dir()
    path = None if folder is None else folder / f"{_key(source, arch)}.cubin"
    try:
        cached = None if path is None else _read(path)
    except (OSError, FlameError) as e:
        _warn_once("read", folder, f"cannot read the kernel cache {str(folder)!r} ({_reason(e)}); compiling "
                   f"without it")
        path = cached = None
    if cached is not None:
        return cached
    cubin = _compile(source, arch, name_hint)
    if path is not None:
        try:
            _write(path, cubin)
        except (OSError, FlameError) as e:
            _warn_once("write", folder, f"cannot write to the kernel cache {str(folder)!r} ({_reason(e)}); "
                       f"kernels are compiled again next time")
    return cubin


AHEAD_ENV = "FLAME_COMPILE_AHEAD"
_AHEAD: dict[tuple[str, str], Future] = {}  # (source, arch) -> its compile started ahead, until asked for
_AHEAD_KEPT = 4096  # compiles started ahead and never asked for (a plan not run) are forgotten past this
# (-len(source), order, future, source, arch, name hint): the longest source waiting starts first
_ahead_queue: queue.PriorityQueue = queue.PriorityQueue()
_ahead_order = itertools.count()
_ahead_threads: list[threading.Thread] = []


def compile_ahead(source: str, arch: str, name_hint: str = "") -> None:
    """Start compiling `source` for `arch` from a background thread (in an NVRTC compile process,
    codegen/nvrtc_pool.py), unless it is under way already, so that NVRTC runs while the rest of the step is
    planned: the plan builder calls this for each kernel it renders for a GPU (Target.arch), and compile_cubin /
    compile_many wait for that compile instead of starting their own. A compile error surfaces there too, with the
    same message. Of the compiles waiting for a thread, the longest source starts first: planning renders a step's
    kernels in bursts, and an optimizer's multi-tensor update, among the slowest to compile, is rendered last, right
    after a burst of short ones. The threads are daemons; a process that exits waits, for at most AHEAD_EXIT_WAIT_S,
    for the compiles still under way when a disk cache keeps their cubins (_finish_ahead); $FLAME_COMPILE_AHEAD=0
    turns this off (kernels compile when the executor loads the plan)."""
    if not env_flag(AHEAD_ENV, True):
        return
    with _lock:
        if (source, arch) in _AHEAD:
            return
        if len(_AHEAD) >= _AHEAD_KEPT:  # forget the oldest finished ones (their cubins are in the disk cache)
            for key in [k for k, f in _AHEAD.items() if f.done()][: _AHEAD_KEPT // 2]:
                del _AHEAD[key]
        future: Future = Future()
        _AHEAD[source, arch] = future
        if len(_ahead_threads) < min(os.cpu_count() or 1, 16):
            t = threading.Thread(target=_compile_ahead_loop, name="flame-nvrtc", daemon=True)
            _ahead_threads.append(t)
            t.start()
    _ahead_queue.put((-len(source), next(_ahead_order), future, source, arch, name_hint))


AHEAD_EXIT_WAIT_S = 60.0  # the longest a process's exit waits for its compiles started ahead


def _finish_ahead(timeout: float = AHEAD_EXIT_WAIT_S) -> None:
    """At exit, wait (at most `timeout` seconds in all) for the compiles started ahead that have not
    finished, when their cubins go to a usable disk cache: a plan this process stored then loads in the
    next one with every kernel cached (a dynamic plan's kernels are planned, and compiled ahead, before
    the sizes that need them run). Without a cache there is nothing to keep, and nothing is waited for."""
    with _lock:
        pending = [f for f in _AHEAD.values() if not f.done()]
    if pending and usable_dir() is not None:
        wait_futures(pending, timeout=timeout)


atexit.register(_finish_ahead)


def _compile_ahead_loop() -> None:
    while True:
        _, _, future, source, arch, name_hint = _ahead_queue.get()
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(_cached_compile(source, arch, name_hint))
        except BaseException as e:  # handed to whoever asks for the cubin
            future.set_exception(e)


def compile_many(sources: Sequence[str], arch: str, workers: int | None = None) -> list[bytes]:
    """compile_cubin over many sources from a thread pool (each compile in an NVRTC compile process,
    codegen/nvrtc_pool.py), the longest sources first (the slowest compile, a multi-tensor update's,
    starts at once rather than behind the short ones); same order out."""
    sources = list(sources)
    if len(sources) <= 1:
        return [compile_cubin(s, arch) for s in sources]
    workers = workers or min(len(sources), os.cpu_count() or 1, 16)
    order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        done = dict(zip(order, pool.map(lambda i: compile_cubin(sources[i], arch), order)))
    return [done[i] for i in range(len(sources))]


def cache_info() -> dict:
    """{'dir', 'entries', 'bytes'} of the compile cache (for `flame cache`)."""
    d = cache_dir()
    files = [p for p in d.glob("*.cubin") if p.is_file()]
    return {"dir": str(d), "entries": len(files), "bytes": sum(p.stat().st_size for p in files)}


def cache_clear() -> int:
    """Delete every cache entry and the temporaries of dead writers (another process's compile in
    flight keeps its own); returns how many entries were removed."""
    d = cache_dir()
    n = 0
    for p in d.glob("*.cubin"):
        try:
            p.unlink()
            n += 1
        except FileNotFoundError:
            pass
    remove_dead_temps(d, _TMP, ".part")
    return n
