"""The collector's side of the ring: push a step, finish the stream (docs/design.md §9).

A step becomes consumable once its successor is published (its next_obs), the last once
finish() writes the observation after it. A full ring blocks ``push`` (the default) or,
with ``overwrite=True``, loses its oldest unread step, counted.
"""

from __future__ import annotations

import time
from math import inf
from typing import Any

from pytest_perfgate.ring.layout import SECONDS, RingInputError, check_array, check_timeout
from pytest_perfgate.ring.mapping import (
    CLAIM,
    CLOSED,
    CONSUMED,
    OVERWRITTEN,
    P_BLOCKED_NS,
    PUBLISHED,
    PUSHES,
    W_CONS,
    W_PROD,
    Mapping,
    RingClosed,
)
from pytest_perfgate.ring.waits import Waits


class Producer:
    """push() and finish() on one mapping, and the checks push() makes once per mapping.

    Invariants: it alone writes PUBLISHED, PUSHES, CLOSED and P_BLOCKED_NS, and it moves
    CONSUMED only to drop the oldest unread step in overwrite mode, never a claimed one
    (CLAIM); a slot is written only after :meth:`acquire` found it free under the mutex,
    and published under the mutex after its bytes. ``_seen``: (published, consumed) as last
    read under the mutex, block mode only: the consumer only moves consumed up, so the view
    under-states the room and push skips the mutex when it shows a free slot.
    """

    def __init__(self, m: Mapping) -> None:
        import numpy as np

        self._map, self._h, self._lock, self._a = m, m.h, m.lock, m.a
        self.data_bell = m.data_bell  # rung for a consumer that sleeps on it
        self.waits = Waits(m.h, m.free_bell, "producer", m.spin_ns, m.check_peer)
        self._cap, self._overwrite = m.spec.capacity, m.spec.overwrite
        self._seen: tuple[int, int] | None = None
        f, sp = m.fields, m.spec
        self._fields, self._check_finite, self._count = f, sp.check_finite, m.count
        # push()'s checks, made once: (field, shape, dtype, reject non-finite)
        self._push_fields = tuple(
            (k, f[k][0], np.dtype(f[k][1]), sp.check_finite and k in ("obs", "action", "reward"))
            for k in ("obs", "action", "reward", "terminated", "truncated"))
        self._push_critic: tuple[str, tuple[int, ...], Any, bool] | None = (
            ("critic_obs", f["critic_obs"][0], np.dtype(sp.obs_dtype), sp.check_finite)
            if sp.critic_shape is not None else None)
        # push()'s inline check: ndarray, (shape, dtype) of obs, action, reward and the
        # flags, the count, the slot arrays; only where nothing else is declared or checked.
        self._push_fast: Any = None if sp.critic_shape is not None or sp.check_finite else (
            np.ndarray, f["obs"][0], np.dtype(f["obs"][1]), f["action"][0],
            np.dtype(f["action"][1]), f["reward"][0], np.dtype(f["reward"][1]),
            f["terminated"][0], np.dtype(bool), m.count,
            tuple(m.a[k] for k in ("obs", "action", "reward", "terminated", "truncated")))

    @property
    def blocked_ns(self) -> int:
        """Producer time spent waiting for a free slot so far (its own counter)."""
        return int(self._h[P_BLOCKED_NS])

    def push(self, obs: Any, action: Any, reward: Any, terminated: Any, truncated: Any, *,
             critic_obs: Any = None, final_obs: Any = None, final_critic_obs: Any = None,
             timeout: float | None = None) -> bool:
        """Write one step (see Ring.push); False at the timeout."""
        if timeout is not None and not (timeout.__class__ in SECONDS
                                        and 0 <= timeout < inf):
            timeout = check_timeout("push", timeout)
        fast = self._push_fast
        if (fast is not None and critic_obs is None and final_obs is None
                and final_critic_obs is None):
            # The common step, checked inline: five arrays exactly as declared, no env
            # ended. This runs between MB-sized copies with the interpreter's caches cold,
            # where each call and lookup costs ~3x its timeit figure (docs/ring.md).
            nd, so, do, sa, da, sr, dr, sb, db, count, slots = fast
            if (obs.__class__ is nd and action.__class__ is nd and reward.__class__ is nd
                    and terminated.__class__ is nd and truncated.__class__ is nd
                    and obs.shape == so and obs.dtype == do and action.shape == sa
                    and action.dtype == da and reward.shape == sr and reward.dtype == dr
                    and terminated.shape == sb and terminated.dtype == db
                    and truncated.shape == sb and truncated.dtype == db
                    and not (count(terminated) or count(truncated))):
                slot = self.acquire("push", timeout)
                if slot is None:
                    return False
                o, a, r, t, u = slots
                o[slot] = obs
                a[slot] = action
                r[slot] = reward
                t[slot] = terminated
                u[slot] = truncated
                self.publish(closed=False)
                return True
        vals = [(name, check_array(name, v, shape, dt, fin)) for (name, shape, dt, fin), v
                in zip(self._push_fields, (obs, action, reward, terminated, truncated),
                       strict=True)]
        if self._push_critic is not None:
            name, shape, dt, fin = self._push_critic
            vals.append((name, check_array(name, critic_obs, shape, dt, fin)))
        elif critic_obs is not None:
            raise RingInputError("push: critic_obs given but the ring declares no "
                                 "critic_shape; declare it in RingSpec or drop the argument")
        term, trunc = vals[3][1], vals[4][1]
        count = self._count
        k = int(count(term | trunc)) if count(term) or count(trunc) else 0
        finals = self._finals(k, final_obs, final_critic_obs) \
            if k or final_obs is not None or final_critic_obs is not None else {}
        slot = self.acquire("push", timeout)
        if slot is None:
            return False
        a = self._a
        for name, v in vals:
            a[name][slot] = v
        for name, v in finals.items():
            a[name][slot, :k] = v
        self.publish(closed=False)
        return True

    def _finals(self, k: int, final_obs: Any, final_critic_obs: Any) -> dict[str, Any]:
        sp, out = self._map.spec, {}
        pairs = [("final_obs", final_obs, sp.obs_shape)]
        if sp.critic_shape is not None:
            pairs.append(("final_critic_obs", final_critic_obs, sp.critic_shape))
        for name, val, shape in pairs:
            if k == 0 and val is None:
                continue
            if val is None:
                raise RingInputError(f"push: {k} env(s) ended at this step but {name} is "
                                     f"None; pass their final observations, shape "
                                     f"({k}, {', '.join(map(str, shape))}), in env order")
            out[name] = check_array(name, val, (k, *shape), sp.obs_dtype, sp.check_finite)
        return out

    def acquire(self, what: str, timeout: float | None) -> int | None:
        """Index of a free slot (dropping the oldest in overwrite mode), or None at timeout."""
        if self._map.role in (None, "observer"):
            self._map.claim_role("producer")
        h, cap, waits = self._h, self._cap, self.waits
        seen = self._seen
        if seen is not None and seen[0] - seen[1] < cap:
            return seen[0] % cap  # free by the last locked look
        deadline = None if timeout is None else time.monotonic() + timeout
        t0 = waits.clock()
        spin = waits.spin_end(t0, deadline)
        try:
            while True:
                with self._lock:
                    if h[CLOSED]:
                        raise RingClosed(f"{what} after finish(): the stream is closed")
                    pub, con = int(h[PUBLISHED]), int(h[CONSUMED])
                    if pub - con < cap:
                        return pub % cap
                    if self._overwrite and not h[CLAIM]:
                        h[CONSUMED] = con + 1  # drop the oldest unread step, counted
                        h[OVERWRITTEN] += 1
                        return pub % cap
                    if not spin:
                        h[W_PROD] = 1  # full (or the oldest is being copied out): wait
                if spin:
                    spin = waits.spin(CONSUMED, con, spin)
                    continue
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                waits.sleep(deadline)
        finally:
            waits.spun(t0)
            waited = waits.clock() - t0
            if waited > 50_000:
                h[P_BLOCKED_NS] += waited  # producer-owned line, single writer

    def publish(self, closed: bool) -> None:
        """Make the slot :meth:`acquire` gave consumable (``closed``: finish()'s), and ring
        the consumer's bell if it sleeps."""
        h = self._h
        with self._lock:
            h[PUBLISHED] += 1
            h[PUSHES] += not closed
            if closed:
                h[CLOSED] = 1
            ring_bell = bool(h[W_CONS])
            h[W_CONS] = 0
            self._seen = (None if closed or self._overwrite
                          else (int(h[PUBLISHED]), int(h[CONSUMED])))
        if ring_bell:  # after unlocking: the woken side finds the mutex free
            self.data_bell.post()

    def finish(self, next_obs: Any, next_critic_obs: Any = None,
               timeout: float | None = None) -> bool:
        """End the stream with the observation after the last step (see Ring.finish)."""
        if timeout is not None and not (timeout.__class__ in SECONDS
                                        and 0 <= timeout < inf):
            timeout = check_timeout("finish", timeout)
        f, chk = self._fields, self._check_finite
        o = check_array("obs", next_obs, *f["obs"], chk)
        c = (check_array("critic_obs", next_critic_obs, *f["critic_obs"], chk)
             if self._push_critic is not None else None)
        slot = self.acquire("finish", timeout)
        if slot is None:
            return False
        self._a["obs"][slot] = o
        if c is not None:
            self._a["critic_obs"][slot] = c
        self.publish(closed=True)
        return True
