"""Getting steps out of the ring: copies, copies into reused buffers, or views.

Functions over the ring's arrays ``a`` (name -> array with the capacity axis first); the
ring (ring.py) decides which steps may be read, these only read them. next_obs is the
successor's obs, patched from the side store where an env ended (docs/design.md §9).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_perfgate.ring.layout import RingInputError


@dataclass
class Batch:
    """Consecutive transitions, copied out of the ring: arrays of shape (steps, num_envs, ...)."""

    obs: Any
    next_obs: Any
    action: Any
    reward: Any
    terminated: Any
    truncated: Any
    critic_obs: Any = None
    next_critic_obs: Any = None
    start: int = 0  # stream index of the first step

    @property
    def steps(self) -> int:
        return int(self.obs.shape[0])

    @property
    def transitions(self) -> int:
        return int(self.obs.shape[0] * self.obs.shape[1])


def buffers(fields: dict[str, tuple[tuple[int, ...], str]], max_steps: int
            ) -> dict[str, Any]:
    """Reusable destination arrays for ``pop(out=...)``: a learner that pops into the
    same buffers every time skips allocating (and page-faulting) fresh ones."""
    import numpy as np

    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise RingInputError(f"max_steps={max_steps!r}: pass a positive int")
    out = {}
    for key, (shape, dt) in fields.items():
        if key.startswith("final_"):
            continue
        seq = key in ("obs", "critic_obs")
        out[key] = np.empty((max_steps + seq, *shape), dt)
        if seq:
            out["next_" + key] = np.empty((max_steps, *shape), dt)
    for arr in out.values():
        arr.fill(0)  # fault the pages in now, not during the first pops
    return out


def views(a: dict[str, Any], cap: int, start: int, k: int) -> Batch:
    """Steps start..start+k as views: their successors must not wrap, except a batch of
    the one step in the last slot, whose next_obs is a view of slot 0. next_obs is copied
    only when an env ended in the batch."""
    import numpy as np

    s = start % cap
    if s + k >= cap and not (k == 1 and s == cap - 1):
        raise ValueError(f"views: steps {s}..{s + k} of a {cap}-slot ring wrap")
    term, trunc = a["terminated"][s:s + k], a["truncated"][s:s + k]
    done = term | trunc
    got: dict[str, Any] = {}
    for key in ("obs", "critic_obs"):
        if key not in a:
            continue
        cur = a[key][s:s + k]
        nxt = a[key][s + 1:s + k + 1] if s + k < cap else a[key][:1]
        if done.any():
            nxt = nxt.copy()
            for t in np.flatnonzero(done.any(axis=1)):
                envs = np.flatnonzero(done[t])
                nxt[t, envs] = a["final_" + key][s + t, :len(envs)]
        got[key], got["next_" + key] = cur, nxt
    return Batch(got["obs"], got["next_obs"], a["action"][s:s + k],
                 a["reward"][s:s + k], term, trunc, got.get("critic_obs"),
                 got.get("next_critic_obs"), start)


def copy_out(a: dict[str, Any], cap: int, start: int, k: int, out: dict[str, Any] | None
             ) -> Batch:
    """Steps start..start+k copied out (into ``out`` from :func:`buffers` when given)."""
    import numpy as np

    idx = (start + np.arange(k + 1)) % cap
    cur = idx[:-1]

    def take(key: str, rows: Any) -> Any:
        if out is None:
            return a[key].take(rows, axis=0)
        return np.take(a[key], rows, axis=0, out=out[key][:len(rows)], mode="clip")

    term, trunc = take("terminated", cur), take("truncated", cur)
    done = term | trunc
    got: dict[str, Any] = {}
    for key in ("obs", "critic_obs"):
        if key not in a:
            continue
        seq = take(key, idx)
        nxt = seq[1:]
        if done.any():
            if out is None:
                nxt = nxt.copy()
            else:
                dst = out["next_" + key][:k]
                np.copyto(dst, nxt)
                nxt = dst
            for t in np.flatnonzero(done.any(axis=1)):
                envs = np.flatnonzero(done[t])
                nxt[t, envs] = a["final_" + key][cur[t], :len(envs)]
        got[key], got["next_" + key] = seq[:-1], nxt
    return Batch(got["obs"], got["next_obs"], take("action", cur), take("reward", cur),
                 term, trunc, got.get("critic_obs"), got.get("next_critic_obs"), start)
