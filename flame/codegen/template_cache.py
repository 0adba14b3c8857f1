"""Jinja2's compiled kernel templates, kept between processes in the kernel cache's directory.

Jinja2 turns each template into Python code the first time a process renders it: about 0.25 s of CPU for
flame's thirteen templates, spent again by every new process before its first kernel is rendered. Here
the compiled code of each template is an entry of the cache directory (`.jinja`), under the directory's
rules (codegen/nvrtc.py): named by the sha256 of the template's name and source checksum, the Python
and Jinja2 versions and flame's, written atomically, and signed with the per-user HMAC key like a
cubin. An entry is unmarshalled only after its HMAC checks out; one that fails (planted, damaged) is
deleted and the template compiled again. An unusable directory or a failed write changes nothing but
the time: the template is compiled in the process, as without the cache."""

from __future__ import annotations

import hashlib
import marshal
import sys

import jinja2

from flame._version import __version__
from flame.codegen import nvrtc
from flame.codegen.disk_cache import TEMPLATE_SUFFIX
from flame.errors import FlameError

MAGIC = b"FLAMEJINJA1\n"


class SignedTemplates(jinja2.BytecodeCache):
    """The bytecode cache of codegen/kernel.py's Jinja2 environment (module doc)."""

    def _path(self, bucket: jinja2.bccache.Bucket):
        folder = nvrtc.usable_dir()
        if folder is None:
            return None
        key = "\0".join((bucket.key, bucket.checksum, sys.version, jinja2.__version__, __version__))
        return folder / f"{hashlib.sha256(key.encode()).hexdigest()}{TEMPLATE_SUFFIX}"

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        path = self._path(bucket)
        try:
            payload = None if path is None else nvrtc.read_signed(path, MAGIC)
        except (OSError, FlameError, nvrtc.UnsignedEntry):
            return  # (an entry failing its check was deleted): compiled again, and stored anew
        if payload is not None:
            try:
                bucket.code = marshal.loads(payload)
            except (EOFError, ValueError, TypeError):
                bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        path = self._path(bucket)
        if path is None or bucket.code is None:
            return
        try:
            nvrtc.write_signed(path, marshal.dumps(bucket.code), MAGIC)
        except (OSError, FlameError):
            pass  # best-effort: the template is compiled again by the next process
