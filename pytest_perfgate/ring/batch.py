"""Getting steps out of the ring: copies, copies into reused buffers, or views.

Functions over the ring's arrays ``a`` (name -> array with the capacity axis first); the
ring (ring.py) decides which steps may be read, these only read them. next_obs is the
successor's obs, patched from the side store where an env ended (docs/design.md §9).
"""

from __future__ import annotations

import dataclasses
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
    # borrow(next_obs=False) only, where next_obs is None: the final observations of the
    # envs that ended at each step, packed in env order (see finals()).
    final_obs: Any = None
    final_critic_obs: Any = None

    @property
    def steps(self) -> int:
        return int(self.obs.shape[0])

    def finals(self, t: int) -> tuple[Any, Any]:
        """The envs that ended at step ``t`` of a ``borrow(next_obs=False)`` batch and
        their final observations, ``(envs, obs)``: ``obs[i]`` is env ``envs[i]``'s
        next_obs at step ``t`` (the step after holds its first observation after reset)."""
        import numpy as np

        if self.final_obs is None:
            raise ValueError("finals(): this batch has next_obs; read the final "
                             "observations there (finals() is for borrow(next_obs=False))")
        envs = np.flatnonzero(self.terminated[t] | self.truncated[t])
        return envs, self.final_obs[t, :len(envs)]

    @property
    def transitions(self) -> int:
        return int(self.obs.shape[0] * self.obs.shape[1])

    def copy(self) -> Batch:
        """The batch in fresh arrays (views of a learner's buffers, delivered to a reader
        of copies)."""
        return dataclasses.replace(self, **{
            f.name: getattr(self, f.name).copy() for f in dataclasses.fields(self)
            if f.name != "start" and getattr(self, f.name) is not None})


def buffers(fields: dict[str, tuple[tuple[int, ...], str]], max_steps: int,
            prefault: bool = True, obs_rows: int | None = None, every_field: bool = False
            ) -> dict[str, Any]:
    """Reusable destination arrays for ``pop(out=...)``: a learner that pops into the
    same buffers every time skips allocating (and page-faulting) fresh ones. obs and
    critic_obs get ``obs_rows`` rows (default ``2 * max_steps + 1``): room for the next
    batch to start at the row holding this batch's last next_obs, which is the next
    step's obs, so it is not copied twice (docs/ring.md "Where the time goes").
    ``every_field``: every field gets those rows (buffers that hold steps, ring/held.py)."""
    import numpy as np

    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise RingInputError(f"max_steps={max_steps!r}: pass a positive int")
    rows = 2 * max_steps + 1 if obs_rows is None else max(obs_rows, max_steps + 1)
    out = {}
    for key, (shape, dt) in fields.items():
        if key.startswith("final_"):
            continue
        seq = key in ("obs", "critic_obs")
        out[key] = np.empty((rows if seq or every_field else max_steps, *shape), dt)
        if seq:
            out["next_" + key] = np.empty((max_steps, *shape), dt)
    if prefault:
        for arr in out.values():
            arr.fill(0)  # fault the pages in now, not during the first pops
    return out


def views(a: dict[str, Any], cap: int, start: int, k: int, count: Any) -> Batch:
    """Steps start..start+k as views: their successors must not wrap, except a batch of
    the one step in the last slot, whose next_obs is a view of slot 0. next_obs is copied
    only when an env ended in the batch, looked for with ``count`` (numpy's
    count_nonzero): this runs once per borrow, where every allocation shows."""
    s = start % cap
    e = s + k
    if e >= cap and not (k == 1 and s == cap - 1):
        raise ValueError(f"views: steps {s}..{e} of a {cap}-slot ring wrap")
    obs, critic = a["obs"], a.get("critic_obs")
    term, trunc = a["terminated"][s:e], a["truncated"][s:e]
    b = Batch(obs[s:e], obs[s + 1:e + 1] if e < cap else obs[:1], a["action"][s:e],
              a["reward"][s:e], term, trunc, None if critic is None else critic[s:e],
              None if critic is None else (critic[s + 1:e + 1] if e < cap else critic[:1]),
              start)
    if not (count(term) or count(trunc)):
        return b
    got = {key: v for key, v in vars(b).items() if v is not None and key != "start"}
    return _patched(a, cap, start, k, got, copy=True)


def step_views(a: dict[str, Any], cap: int, start: int, k: int) -> Batch:
    """Steps start..start+k as views without their successors (next_obs None, the side
    store as final_obs): ``borrow(next_obs=False)``; they must not wrap."""
    s = start % cap
    e = s + k
    if e > cap:
        raise ValueError(f"step_views: steps {s}..{e} of a {cap}-slot ring wrap")
    critic = a.get("critic_obs")
    return Batch(a["obs"][s:e], None, a["action"][s:e], a["reward"][s:e],
                 a["terminated"][s:e], a["truncated"][s:e],
                 None if critic is None else critic[s:e], None, start, a["final_obs"][s:e],
                 None if critic is None else a["final_critic_obs"][s:e])


def end_views(a: dict[str, Any], cap: int, start: int) -> Batch:
    """The stream's end for ``borrow(next_obs=False)``: no steps, next_obs[0] (and
    next_critic_obs[0]) finish()'s observation in slot ``start``."""
    b = step_views(a, cap, start, 0)
    s = start % cap
    b.next_obs = a["obs"][s:s + 1]
    if b.critic_obs is not None:
        b.next_critic_obs = a["critic_obs"][s:s + 1]
    return b


def _copy_steps(src: Any, cap: int, start: int, k: int, dst: Any) -> None:
    """Slots start..start+k (mod cap) of ``src`` into ``dst``: one block copy per run of
    consecutive slots (two when the steps wrap), no index array."""
    import numpy as np

    s = start % cap
    first = min(k, cap - s)
    np.copyto(dst[:first], src[s:s + first])
    if first < k:
        np.copyto(dst[first:k], src[:k - first])


def copy_rows(a: dict[str, Any], cap: int, start: int, k: int, out: dict[str, Any],
              at: int, base: int = 0, have_first: bool = False) -> None:
    """Copy steps start..start+k (not their successor) into rows at..at+k of ``out``; obs
    and critic_obs into rows base+at.. (``have_first``: the first step's obs rows are there
    already, carried from the previous batch)."""
    for key, dst in out.items():
        if key.startswith("next_"):
            continue
        if key in ("obs", "critic_obs"):
            skip = 1 if have_first and at == 0 else 0
            if k > skip:
                _copy_steps(a[key], cap, start + skip, k - skip,
                            dst[base + at + skip:base + at + k])
        else:
            _copy_steps(a[key], cap, start, k, dst[at:at + k])


def finish(a: dict[str, Any], cap: int, start: int, k: int, out: dict[str, Any],
           base: int = 0) -> Batch:
    """The batch of steps start..start+k whose rows :func:`copy_rows` put in ``out``:
    copies the successor's obs (row base+k) and patches next_obs where envs ended."""
    got = {key: v[:k] for key, v in out.items() if not key.startswith("next_")}
    for key in ("obs", "critic_obs"):
        if key in out:
            out[key][base + k] = a[key][(start + k) % cap]
            got[key] = out[key][base:base + k]
            got["next_" + key] = out[key][base + 1:base + k + 1]
    return _patched(a, cap, start, k, got, copy=False, out=out)


def copy_out(a: dict[str, Any], cap: int, start: int, k: int, out: dict[str, Any] | None
             ) -> Batch:
    """Steps start..start+k copied out (into ``out`` from :func:`buffers` when given)."""
    if out is None:
        fields = {key: (v.shape[1:], v.dtype) for key, v in a.items()}
        out = buffers(fields, k, prefault=False, obs_rows=k + 1)
    copy_rows(a, cap, start, k, out, 0)
    return finish(a, cap, start, k, out)


def _patched(a: dict[str, Any], cap: int, start: int, k: int, got: dict[str, Any],
             copy: bool, out: dict[str, Any] | None = None) -> Batch:
    """The Batch of ``got``, next_obs patched from the side store where envs ended (a
    copy when ``copy``, else into ``out``'s next_ buffers)."""
    import numpy as np

    done = got["terminated"] | got["truncated"]
    if done.any():
        for key in ("obs", "critic_obs"):
            if key not in got:
                continue
            nxt = got["next_" + key]
            if copy:
                nxt = nxt.copy()
            else:
                assert out is not None
                nxt = out["next_" + key][:k]
                np.copyto(nxt, got["next_" + key])
            for t in np.flatnonzero(done.any(axis=1)):
                envs = np.flatnonzero(done[t])
                nxt[t, envs] = a["final_" + key][(start + t) % cap, :len(envs)]
            got["next_" + key] = nxt
    return Batch(got["obs"], got["next_obs"], got["action"], got["reward"],
                 got["terminated"], got["truncated"], got.get("critic_obs"),
                 got.get("next_critic_obs"), start)
