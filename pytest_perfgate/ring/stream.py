"""Copies out of the ring with streaming stores.

A learner copying a step out of shared memory into its batch writes memory it has not
touched for a while. With ordinary stores each destination line is first read into the
cache, and the batch then pushes the ring's slots out of it; streaming stores write the
lines straight to memory. Between two processes on this machine that made a 6 MB step's
copy-out about 2x faster, and 1.03-1.12x with the learner reading its batch right after
(docs/ring.md "Streaming stores"). It loses (0.90-0.94x) when the destination is one small
buffer written over and over, which stays in the cache anyway, and below about a MB the
ordinary copy is as fast: hence a size floor, and the ring's own buffers (three or more
rows that take turns) as the place it is used.

The copy is ring/_stream.c, built when the package is installed; where it could not be
built (no C compiler) or the CPU has no streaming stores, :func:`copy` is numpy's copy.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

STREAM_MIN = 1 << 20  # bytes: below this the ordinary copy is as fast
ENV = "PERFGATE_STREAM_COPY"  # "0": never stream (to compare); "1": fail if it cannot

_impl: Callable[[Any, Any], None] | bool | None = False  # False: not looked up yet
_mapped = False  # this process mapped a ring (ring_mapped)


class StreamCopyError(RuntimeError):
    """PERFGATE_STREAM_COPY=1 asked for streaming stores that this install cannot make."""


def _load() -> Callable[[Any, Any], None] | None:
    global _impl
    if _impl is False:
        want = os.environ.get(ENV, "").strip()
        if want not in ("", "0", "1"):
            raise StreamCopyError(f"{ENV}={want!r}: use 0 (never stream), 1 (require "
                                  "streaming stores) or leave it unset (stream when built)")
        fn = None
        if want != "0":
            try:
                _stream: Any = importlib.import_module(f"{__package__}._stream")
            except ImportError:
                _stream = None
            if _stream is not None and _stream.STREAMING:
                fn = _stream.copy
            elif want == "1":
                raise StreamCopyError(
                    f"{ENV}=1, but this install has no streaming copy ("
                    + ("ring/_stream.c was not built: reinstall with a C "
                       "compiler" if _stream is None else "this CPU has no streaming "
                       "stores") + "); unset it to use numpy's copy")
        _impl = fn
    return _impl  # type: ignore[return-value]


def available() -> bool:
    """Whether :func:`copy` streams (the extension is built and the CPU has the stores)."""
    return _load() is not None


def mode() -> bool | str:
    """The copy this process's rings use for fields of a MB or more: True (streaming), False
    (``PERFGATE_STREAM_COPY=0``) or "unavailable" (not built, no such stores, a bad value)."""
    try:
        if available():
            return True
    except StreamCopyError:
        return "unavailable"
    return False if os.environ.get(ENV, "").strip() == "0" else "unavailable"


def ring_mapped() -> None:
    """A ring was mapped in this process (ring/mapping.py): its run records :func:`mode`."""
    global _mapped
    _mapped = True


def run_metadata() -> dict[str, bool | str]:
    """The run record's ``ring_stream_copy``, once this process mapped a ring."""
    return {"ring_stream_copy": mode()} if _mapped else {}


def plain(dst: Any, src: Any) -> None:
    """numpy's copy."""
    dst[...] = src


def copier(nbytes: int) -> Callable[[Any, Any], None]:
    """The copy to use for destinations of ``nbytes`` that take turns (a batch's rows):
    streaming from :data:`STREAM_MIN` up, where built; else numpy's."""
    fn = _load()
    if fn is None or nbytes < STREAM_MIN:
        return plain
    return _stream_or_plain


def _stream_or_plain(dst: Any, src: Any) -> None:
    fn = _impl
    try:
        ok = (dst.dtype == src.dtype and not dst.dtype.hasobject and dst.shape == src.shape
              and dst.flags.writeable and dst.flags.c_contiguous and src.flags.c_contiguous)
    except (AttributeError, TypeError):  # not two numpy arrays (a tensor, a list)
        ok = False
    if fn and ok:
        fn(dst, src)  # type: ignore[operator]
    else:
        dst[...] = src  # a cast, a broadcast, a strided view, references: numpy's rules


def copy(dst: Any, src: Any) -> None:
    """``dst[...] = src``, with streaming stores where they pay: both C-contiguous, the
    same dtype and shape, at least :data:`STREAM_MIN` bytes. For a learner copying
    borrowed views into its own preallocated batch (docs/ring.md "Streaming stores"). A
    CPU torch tensor is copied into through its numpy view, which shares its memory; one
    without a numpy view (on a GPU, bfloat16) by torch's ``copy_``, without streaming."""
    import numpy as np

    if not isinstance(dst, np.ndarray) and callable(getattr(dst, "numpy", None)):
        try:
            view = dst.numpy()
        except (TypeError, RuntimeError):  # torch: a device or dtype numpy cannot share
            import torch

            dst.copy_(torch.as_tensor(src))
            return
        dst = view
    copier(int(getattr(dst, "nbytes", 0)))(dst, src)
