"""A plain 8-field reference of a vector env run, and the steps of it pushed into a ring and
the batches popped out checked against it (the ring tests). Module level, so spawn children
import them by reference."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from pytest_perfgate.ring.shm_ring import Ring

KEYS = ["obs", "next_obs", "action", "reward", "terminated", "truncated"]


def episode(rng: np.random.Generator, n: int, steps: int, p_term: float, p_trunc: float,
            critic: bool) -> list[dict[str, np.ndarray]]:
    """A plain 8-field record of a vector env run: obs and next_obs stored per step."""
    obs = rng.standard_normal((n, 3)).astype(np.float32)
    cobs = rng.standard_normal((n, 2)).astype(np.float32)
    out = []
    for _ in range(steps):
        term = rng.random(n) < p_term
        trunc = rng.random(n) < p_trunc
        done = term | trunc
        final = rng.standard_normal((n, 3)).astype(np.float32)  # obs the step really ended in
        cfinal = rng.standard_normal((n, 2)).astype(np.float32)
        reset = rng.standard_normal((n, 3)).astype(np.float32)
        creset = rng.standard_normal((n, 2)).astype(np.float32)
        nxt = np.where(done[:, None], reset, final)  # what the env returns: reset where done
        cnxt = np.where(done[:, None], creset, cfinal)
        out.append({"obs": obs, "next_obs": final, "action": rng.standard_normal((n, 2))
                    .astype(np.float32), "reward": rng.standard_normal(n).astype(np.float32),
                    "terminated": term, "truncated": trunc, "ret_next": nxt,
                    "critic_obs": cobs, "next_critic_obs": cfinal, "ret_cnext": cnxt})
        obs, cobs = nxt, cnxt
    return out


def push_step(ring: Ring, s: dict[str, np.ndarray], critic: bool) -> bool:
    """One step of an ``episode`` pushed without waiting (False: the ring is full)."""
    done = s["terminated"] | s["truncated"]
    kw = {}
    if critic:
        kw = {"critic_obs": s["critic_obs"], "final_critic_obs": s["next_critic_obs"][done]}
    # No final_obs where no env ended takes push's inline path; an empty one the general
    # path: the reward's sign picks, so both are compared with the reference.
    final = s["next_obs"][done] if done.any() or s["reward"][0] > 0 else None
    return ring.push(s["obs"], s["action"], s["reward"], s["terminated"], s["truncated"],
                     final_obs=final, timeout=0, **kw)


def obs_step(r: Ring, t: float) -> None:
    """A step of 4 envs whose obs are all ``t``, into a ring of obs (3,) and action (2,)."""
    r.push(np.full((4, 3), t, np.float32), np.zeros((4, 2), np.float32),
           np.zeros(4, np.float32), np.zeros(4, bool), np.zeros(4, bool))


def keep_copy(got: list[Any], b: Any) -> Any:
    """Append a copy of batch ``b`` (unless None) to ``got``; return ``b``."""
    if b is not None:  # views into buffers or the ring: keep a copy
        got.append(SimpleNamespace(**{k: None if v is None else np.copy(v)
                                      for k, v in vars(b).items()}))
    return b


def check_batches(got: list[Any], ref: list[dict[str, Any]], critic: bool) -> None:
    """The batches kept, in order, are exactly the reference's steps."""
    keys = KEYS + (["critic_obs", "next_critic_obs"] if critic else [])
    for k in keys:
        mine = np.concatenate([getattr(b, k) for b in got]) if got else np.empty(0)
        np.testing.assert_array_equal(mine, np.stack([s[k] for s in ref]), err_msg=k)
    starts = [b.start for b in got]
    assert starts == sorted(starts) and sum(len(b.obs) for b in got) == len(ref)
