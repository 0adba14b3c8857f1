"""An NVRTC compile process: flame.codegen.nvrtc runs its compiles in a few of these, so that they run
side by side (codegen/nvrtc_pool.py says why threads do not).

Run as a script by its path (`python nvrtc_worker.py`), it imports neither flame nor the user's program,
only NVRTC's binding. It reads requests from stdin and answers on stdout, each message a pickle preceded
by its length (8 bytes, little-endian):
    request  (source, file name, options)       answer  ("cubin", bytes) or ("error", what NVRTC said, log)
and leaves at the end of its input (its parent closed the pipe or exited).
"""

import sys

if __name__ == "__main__":
    sys.path.pop(0)  # run by its path: this file's folder holds flame's modules, not the standard library's

import pickle  # noqa: E402
import struct  # noqa: E402

HEADER = struct.Struct("<Q")


def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc  # NVRTC's binding alone, without importing CuPy
    except ImportError:
        from cupy.cuda import nvrtc
    return nvrtc


def compile_source(nvrtc, source: str, name: str, options: list) -> tuple:
    """("cubin", the cubin) or ("error", what NVRTC said, its log)."""
    prog = nvrtc.createProgram(source, name, [], [])
    try:
        try:
            nvrtc.compileProgram(prog, options)
        except nvrtc.NVRTCError as e:
            return "error", str(e), nvrtc.getProgramLog(prog)
        return "cubin", nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)


def _read(stream, n: int) -> bytes | None:
    data = stream.read(n)
    return data if len(data) == n else None


def main() -> None:
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # what anything prints goes to stderr, not into the answers
    nvrtc = _nvrtc()
    while True:
        head = _read(requests, HEADER.size)
        body = None if head is None else _read(requests, HEADER.unpack(head)[0])
        if body is None:
            return
        source, name, options = pickle.loads(body)
        try:
            answer = compile_source(nvrtc, source, name, options)
        except Exception as e:  # noqa: BLE001 - the binding's own failure is the answer
            answer = ("error", f"{type(e).__name__}: {e}", "")
        data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        answers.write(HEADER.pack(len(data)) + data)
        answers.flush()


if __name__ == "__main__":
    main()
