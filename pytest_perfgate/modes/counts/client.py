"""Callgrind client requests from pure Python: the bracket around the measured step calls.

Valgrind recognises a "client request" by a fixed x86-64 instruction sequence (four
rotations of %rdi that cancel out, then ``xchg %rbx,%rbx``; valgrind.h). Outside valgrind
the sequence is a no-op that returns the default. Instead of compiling a helper (pytest-codspeed
builds one with a C compiler), the 29 bytes are written to an executable page and called through
ctypes: no compiler at test time, and the request lands exactly where Python calls it
(docs/design.md §10). Only x86-64 Linux has the sequence here; :func:`unsupported` says why
elsewhere.
"""

from __future__ import annotations

import ctypes
import mmap
import platform
import sys
from typing import Any

_TOOL_BASE = (ord("C") << 24) | (ord("T") << 16)  # VG_USERREQ_TOOL_BASE('C','T'), callgrind.h
DUMP_STATS = _TOOL_BASE
ZERO_STATS = _TOOL_BASE + 1
TOGGLE_COLLECT = _TOOL_BASE + 2
DUMP_STATS_AT = _TOOL_BASE + 3
START_INSTRUMENTATION = _TOOL_BASE + 4
STOP_INSTRUMENTATION = _TOOL_BASE + 5
RUNNING_ON_VALGRIND = 0x1001  # core request: how many valgrinds deep (0 natively)

# uint64 request(uint64 *args /* rdi */, uint64 default /* rsi */)
_CODE = bytes([
    0x48, 0x89, 0xF8,  # mov rax, rdi        (the argument block: request, arg1..arg5)
    0x48, 0x89, 0xF2,  # mov rdx, rsi        (the result natively: the default)
    0x48, 0xC1, 0xC7, 0x03,  # rol rdi, 3    \
    0x48, 0xC1, 0xC7, 0x0D,  # rol rdi, 13    | valgrind's special-instruction preamble
    0x48, 0xC1, 0xC7, 0x3D,  # rol rdi, 61    | (3+13+61+51 = 128: rdi unchanged)
    0x48, 0xC1, 0xC7, 0x33,  # rol rdi, 51   /
    0x48, 0x87, 0xDB,  # xchg rbx, rbx       (client request: rdx = request(rax))
    0x48, 0x89, 0xD0,  # mov rax, rdx
    0xC3,              # ret
])

_fn: Any = None
_page: mmap.mmap | None = None


def unsupported() -> str | None:
    """Why client requests cannot be issued on this machine, or None when they can."""
    if not sys.platform.startswith("linux"):
        return f"instruction counts need Linux (this is {sys.platform})"
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return (f"instruction counts are implemented for x86-64 only (this machine is "
                f"{platform.machine()}): the client-request sequence is per architecture")
    return None


def _request_fn() -> Any:
    global _fn, _page
    if _fn is None:
        why = unsupported()
        if why:
            raise RuntimeError(why)
        page = mmap.mmap(-1, mmap.PAGESIZE,
                         prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        page.write(_CODE)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(page))
        _page = page  # kept for the life of the process: the code lives in it
        _fn = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64)(addr)
    return _fn


def request_fn() -> Any:
    """The raw request function, ``fn(address of [code, arg1..arg5], default)``: for callers
    that prepare their argument block once (a phase boundary inside a counted call)."""
    return _request_fn()


def request(code: int, *args: int, default: int = 0) -> int:
    """Issue client request ``code`` with up to five integer arguments."""
    block = (ctypes.c_uint64 * 6)(code, *args, *([0] * (5 - len(args))))
    return int(_request_fn()(ctypes.addressof(block), default))


def running_on_valgrind() -> int:
    """0 natively; 1 under valgrind (the request is answered by the valgrind core)."""
    return request(RUNNING_ON_VALGRIND)


def zero_stats() -> None:
    request(ZERO_STATS)


def toggle_collect() -> None:
    request(TOGGLE_COLLECT)


def start_instrumentation() -> None:
    request(START_INSTRUMENTATION)


def stop_instrumentation() -> None:
    request(STOP_INSTRUMENTATION)


def dump_stats_at(label: str) -> None:
    """Write the counts collected so far to a new dump file whose trigger names ``label``."""
    text = ctypes.create_string_buffer(label.encode())
    request(DUMP_STATS_AT, ctypes.addressof(text))
