"""A single-producer / single-consumer transition ring in shared memory (docs/design.md §9).

Slot t holds obs_t, action_t, reward_t, terminated_t, truncated_t (+ critic_obs_t); its
``next_obs`` is slot t+1's obs, and the true final observations of envs that ended at t are
in slot t's side store. Counters live in the segment header, read and written only under a
process-shared semaphore used as a mutex (sem_wait/sem_post synchronise memory, POSIX XBD
4.12), so the slot bytes written before a publish are visible to whoever sees the new count.
:class:`Ring` has a mapping of the segment (ring/mapping.py), a producer side
(ring/producer.py), the consumer's claims (ring/claims.py) and a reader side
(ring/reader.py), made once per process that maps the ring.
"""

from __future__ import annotations

import weakref
from contextlib import nullcontext
from typing import Any, Self

from pytest_perfgate.ring import batch as _batch
from pytest_perfgate.ring.batch import Batch
from pytest_perfgate.ring.buffers import Buffers
from pytest_perfgate.ring.claims import Claims
from pytest_perfgate.ring.layout import RingInputError, RingSpec
from pytest_perfgate.ring.mapping import (
    C_WAIT_NS,
    CLOSED,
    CONSUMED,
    HELD,
    OVERWRITTEN,
    P_BLOCKED_NS,
    POPS,
    PUBLISHED,
    PUSHES,
    Mapping,
    RingClosed,
)
from pytest_perfgate.ring.producer import Producer
from pytest_perfgate.ring.reader import Borrowed, Reader
from pytest_perfgate.ring.segment import Segment, new_name, sweep_stale
from pytest_perfgate.ring.sync import TABLE_ROWS

# What refers to the mapping: dropped at close().
_PARTS = ("_map", "_producer", "_claims", "_reader")


class _ClosedAttribute(RingClosed, AttributeError):
    """A part read after close(): RingClosed for a caller, AttributeError for hasattr() and
    getattr(..., default)."""


class _Closed:
    """A closed ring's class (:func:`_closed`): reading what close() dropped says so. Not on
    an open ring's class, where ``__getattr__`` makes every attribute read ~3x slower."""

    def __getattr__(self, name: str) -> Any:
        """A missing attribute: a part, or a property whose getter read one."""
        why = (f"ring {self.__dict__['_seg'].name!r} was closed in this process: make a "
               "new ring (or pass one to this process)")
        if name in _PARTS:
            raise _ClosedAttribute(why)
        if isinstance(getattr(type(self), name, None), property):
            raise RingClosed(why)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


_CLOSED: dict[type, type] = {}


def _closed(cls: type) -> type:
    """``cls`` for a closed ring: the same name, :class:`_Closed` first."""
    if cls not in _CLOSED:
        _CLOSED[cls] = type(cls.__name__, (_Closed, cls),
                            {"__module__": cls.__module__, "__qualname__": cls.__qualname__})
    return _CLOSED[cls]


class Ring:
    """Create with ``Ring(spec)``; hand it to the other process as a spawn argument.
    ``parties``: processes that will attach (2 when the creator only supervises); the
    name is removed once that many have mapped the segment.

    Its parts, made once per process that maps the ring: ``_map`` (:class:`Mapping`),
    ``_producer`` (push, finish), ``_claims`` (the consumer's counters) and ``_reader``
    (pop, borrow; it reads through the same claims). No part refers back to the ring, so a
    ring dropped without close() is unlinked by its finalizer at once; close() drops them.
    """

    def __init__(self, spec: RingSpec, parties: int = 1) -> None:
        if (isinstance(parties, bool) or not isinstance(parties, int)
                or not 1 <= parties <= TABLE_ROWS):
            raise RingInputError(f"parties={parties!r}: pass how many processes will attach, "
                                 f"an int from 1 to {TABLE_ROWS} (2 when the creator only "
                                 "supervises a producer and a consumer)")
        sweep_stale()  # segments of a killed parent (docs/design.md §9)
        self.spec = spec
        self._seg = Segment(new_name(), spec.layout()[1], create=True)
        self._finalizer = weakref.finalize(self, self._seg.unlink)
        self._assemble(Mapping.create(spec, self._seg, parties))

    def _assemble(self, m: Mapping) -> None:
        """The parts, each with its own state, over one mapping."""
        self._map = m
        self._producer = Producer(m)
        self._claims = Claims(m)
        self._reader = Reader(m, self._claims)

    def __getstate__(self) -> dict[str, Any]:
        return {"spec": self.spec, "name": self._seg.name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.spec = state["spec"]
        try:
            self._seg = Segment(state["name"], self.spec.layout()[1], create=False)
        except FileNotFoundError:
            raise RingClosed(f"ring segment {state['name']!r} is gone: a ring joins exactly "
                             "two processes, and its name is removed once the second one "
                             "attached (or its creator exited)") from None
        self._finalizer = weakref.finalize(self, lambda: None)
        self._assemble(Mapping.attach(self.spec, self._seg))

    def close(self) -> None:
        """Unlink the name (if still there) and drop this process's mapping."""
        m = self.__dict__.get("_map")
        for attr in _PARTS:
            self.__dict__.pop(attr, None)
        if not isinstance(self, _Closed):
            self.__class__ = _closed(type(self))
        if m is not None:
            m.close()  # unmaps unless a caller still holds views (then at exit)
        else:
            self._seg.unlink()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def name(self) -> str:
        return self._seg.name

    def watch(self, peer: Any) -> None:
        """Let waits report a peer ``multiprocessing.Process`` with its exit code/signal."""
        self._map.peer_watch = peer

    def observe(self) -> None:
        """Register this process as an observer (a supervisor that only reads ``stats()``
        or ``ended``): its own exit is never reported to the sides, and its waits report
        any side that died."""
        self._map.observe()

    def parties(self) -> list[tuple[int, int]]:
        """(pid, role bits) of every process attached so far, this one included."""
        return self._map.table.rows()

    @property
    def ended(self) -> bool:
        """finish() was called and every step has been consumed (steps copied into a
        learner's buffers and not yet delivered count as unconsumed)."""
        m = self._map
        h = m.h
        with m.lock:
            return (bool(h[CLOSED])
                    and int(h[PUBLISHED]) - int(h[CONSUMED]) + int(h[HELD]) <= 1)

    def stats(self, lock: bool = True) -> dict[str, float]:
        """Fill level, blocked/wait time, overwrites: what a run report shows. ``lock=False``
        reads without the mutex (a supervisor whose sides may be stopped holding it): each
        counter is then exact, but they may be from slightly different moments."""
        m = self._map
        h = m.h
        with m.lock if lock else nullcontext():
            pub, con, held = int(h[PUBLISHED]), int(h[CONSUMED]), int(h[HELD])
            return {"capacity": self.spec.capacity, "pushed": int(h[PUSHES]),
                    "consumed": con - held, "fill": max(0, pub - con + held - 1),
                    "overwritten": int(h[OVERWRITTEN]),
                    "producer_blocked_s": int(h[P_BLOCKED_NS]) / 1e9,
                    "consumer_wait_s": int(h[C_WAIT_NS]) / 1e9, "pops": int(h[POPS])}

    # ---- the producer side -----------------------------------------------------------
    @property
    def blocked_ns(self) -> int:
        """Producer time spent waiting for a free slot so far (its own counter)."""
        return self._producer.blocked_ns

    def push(self, obs: Any, action: Any, reward: Any, terminated: Any, truncated: Any, *,
             critic_obs: Any = None, final_obs: Any = None, final_critic_obs: Any = None,
             timeout: float | None = None) -> bool:
        """Write one step. ``final_obs``: true final observations of the envs that ended
        (terminated | truncated), one row per such env in env order. Returns False only
        when ``timeout`` passed with the ring full (block mode)."""
        return self._producer.push(obs, action, reward, terminated, truncated,
                                   critic_obs=critic_obs, final_obs=final_obs,
                                   final_critic_obs=final_critic_obs, timeout=timeout)

    def finish(self, next_obs: Any, next_critic_obs: Any = None,
               timeout: float | None = None) -> bool:
        """End the stream with the observation after the last step: the last pushed step
        becomes consumable, and pop() returns None once everything is drained."""
        return self._producer.finish(next_obs, next_critic_obs, timeout)

    # ---- the reader side -------------------------------------------------------------
    @property
    def waited_ns(self) -> int:
        """Consumer time spent waiting for a consumable step so far (its own counter)."""
        return self._claims.waited_ns

    def buffers(self, max_steps: int, rows: int | None = None, *, stream: bool = True
                ) -> Buffers:
        """Reusable destination arrays for ``pop(out=...)`` of at most ``max_steps`` steps,
        ``rows`` rows per field (default ``2 * max_steps + 1``, at least ``max_steps + 1``):
        a learner that pops into the same buffers every time skips allocating (and
        page-faulting) fresh ones, and in block mode each slot is freed as soon as it is
        copied (ring/held.py). They belong to this ring: another ring's pop refuses them
        while they hold a step. ``stream``: copy fields of a MB or more into them with
        streaming stores where built (ring/stream.py); False for numpy's copy."""
        if not isinstance(stream, bool):
            raise RingInputError(f"stream={stream!r}: pass True (streaming stores for big "
                                 "fields, where built) or False (numpy's copy)")
        if stream:
            from pytest_perfgate.ring.stream import available

            available()  # a bad PERFGATE_STREAM_COPY is named here, before any pop
        arrays = _batch.buffers(self.spec.fields(), max_steps, obs_rows=rows,
                                every_field=True)
        return Buffers(arrays, self.name, max_steps, int(arrays["obs"].shape[0]),
                       stream=stream)

    def pop(self, max_steps: int | None = None, timeout: float | None = None, *,
            min_steps: int = 1, out: dict[str, Any] | None = None) -> Batch | None:
        """Copy out up to ``max_steps`` consumable steps, waiting until ``min_steps`` are
        (fewer only once the stream is finished). Returns None when the stream is finished
        and drained, or when ``timeout`` passed first (see ``ended``). With ``out`` (from
        :meth:`buffers`) the batch is views into those arrays, valid until the next pop,
        and steps are copied as they arrive, while the producer writes the next ones; each
        slot is freed once copied, the newest step waiting in the buffers for its
        successor (ring/held.py). A step held there is delivered first to any other read,
        as a copy (``pop()``, other buffers) or as views of the buffers (``borrow``)."""
        return self._reader.pop(max_steps, timeout, min_steps, out)

    def borrow(self, max_steps: int | None = None, timeout: float | None = None, *,
               min_steps: int = 1, next_obs: bool = True) -> Borrowed:
        """Like pop(), but the batch is views into the ring itself (no copy), valid only
        inside the ``with`` block; the steps are released when it ends. A batch stops at
        the ring's wrap point (the step in the last slot comes alone, its next_obs a view of
        slot 0); next_obs is copied only when an env ended in the batch. The producer cannot
        reuse borrowed slots meanwhile. ``next_obs=False``: a step comes as soon as it is
        written, not once its successor is, with next_obs None and the ended envs' final
        observations in ``final_obs`` (``Batch.finals``); once the stream is finished and
        drained, one batch of no steps whose next_obs[0] is finish()'s observation
        (docs/ring.md "Borrowing without next_obs")."""
        return self._reader.borrow(max_steps, timeout, min_steps, next_obs)
