"""A learner's buffers for ``pop(out=)``, and the steps they hold for their successors.

The rows are used as a circle: a batch never crosses the last row, except the one
transition of the last row, whose next_obs is row 0 (as ``borrow`` in the ring itself), so
no row is moved for a learner that takes what is there; one waiting for ``min_steps`` that
the last rows cannot hold has its held rows moved to the top once. A step is copied through
row and slot views made once per ring mapping: the copy follows a MB-sized one that emptied
the caches, where each Python object touched is a miss (docs/ring.md "The short paths").
"""

from __future__ import annotations

from typing import Any

from pytest_perfgate.ring.batch import Batch

SEQ = ("obs", "critic_obs")  # fields whose successor row is next_obs / next_critic_obs


class Buffers(dict[str, Any]):
    """Reusable destination arrays made by one ring's ``buffers(k)``, and the steps they hold:
    rows ``base .. base + held`` (mod ``rows``), stream indices ``start ..``;
    ``finish_held``: the last held row is finish()'s observation, no step."""

    def __init__(self, arrays: dict[str, Any], ring: str, max_steps: int, rows: int,
                 stream: bool = True) -> None:
        super().__init__(arrays)
        self.ring, self.max_steps, self.rows, self.stream = ring, max_steps, rows, stream
        self.step_keys = tuple(k for k in arrays if not k.startswith("next_"))  # a step's rows
        self.seq_keys = tuple(k for k in SEQ if k in arrays)
        self.base = self.held = self.start = 0
        self.finish_held = False
        # stream index -> [(field, env indices, their final rows)] of envs that ended there
        self.finals: dict[int, list[tuple[str, Any, Any]]] = {}
        self.src: Any = None  # the ring mapping the copies below were made for
        self._arrays: tuple[Any, ...] = tuple(
            arrays.get(k) for k in ("obs", "action", "reward", "terminated", "truncated",
                                    "critic_obs"))
        self._count: Any = None
        self._cap = 0  # the ring's slots
        # (copy, destination, source) per field: ring/stream.py's copier for its size
        self._runs: list[tuple[Any, Any, Any]] = []
        self._seq: list[tuple[Any, Any, Any]] = []
        self._copies: tuple[Any, ...] = ()
        self._row_views: list[tuple[Any, ...]] = []  # per row: its step fields
        self._slot_views: list[tuple[Any, ...]] = []  # per ring slot: its step fields
        self._ends: list[tuple[Any, Any]] = []  # per ring slot: (terminated, truncated)

    def bind(self, a: dict[str, Any], count: Any) -> None:
        """Make the copies from ring mapping ``a`` once (``count``: numpy's count_nonzero):
        big fields with streaming stores where built (ring/stream.py), the rows taking turns."""
        from pytest_perfgate.ring.stream import copier, plain

        def cp(key: str) -> Any:
            return copier(self[key][0].nbytes) if self.stream else plain

        keys = self.step_keys
        self.src, self._count = a, count
        self._runs = [(cp(k), self[k], a[k]) for k in keys]
        self._seq = [(cp(k), self[k], a[k]) for k in self.seq_keys]
        self._copies = tuple(c for c, _, _ in self._runs)
        self._row_views = [tuple(self[k][r] for k in keys) for r in range(self.rows)]
        cap = self._cap = int(a["obs"].shape[0])
        self._slot_views = [tuple(a[k][s] for k in keys) for s in range(cap)]
        self._ends = [(a["terminated"][s], a["truncated"][s]) for s in range(cap)]

    def clear_hold(self) -> None:
        self.base = self.held = 0
        self.finish_held = False
        self.finals = {}

    def count_held(self, add: int, finish: bool) -> int:
        """The ``add`` steps copied last are held now (``finish``: the last is finish()'s
        observation), in the ring's locked step that frees their slots; the steps held."""
        self.held += add
        self.finish_held = finish
        return self.held - finish

    # ---- copying in ------------------------------------------------------------------
    def copy_step(self, con: int) -> None:
        """Copy published step ``con`` (every field) into the row after the held ones,
        keeping the final observations of the envs that ended at it. Not held until the
        ring frees its slot: an exception in between leaves it to be copied again."""
        held = self.held
        row = (self.base + held) % self.rows
        slot = con % self._cap
        if held == 0:
            self.start = con
        for cp, dst, src in zip(self._copies, self._row_views[row], self._slot_views[slot],
                                strict=True):
            cp(dst, src)
        term, trunc = self._ends[slot]
        count = self._count
        if count(term) or count(trunc):  # some env ended at this step
            self._keep_finals(con, slot, row)

    def copy_run(self, con: int, m: int, finish_last: bool) -> None:
        """copy_step() of steps con..con+m, contiguous in the ring and in the rows, one copy
        per field; ``finish_last``: the one step is finish()'s observation (obs rows only)."""
        if self.held == 0:
            self.start = con
        slot, row = con % self._cap, (self.base + self.held) % self.rows
        if finish_last:
            self._copy_obs(slot, row)
            return
        for cp, dst, src in self._runs:
            cp(dst[row:row + m], src[slot:slot + m])
        count, a = self._count, self.src
        term, trunc = a["terminated"], a["truncated"]
        if count(term[slot:slot + m]) or count(trunc[slot:slot + m]):
            for j in range(m):
                if count(term[slot + j]) or count(trunc[slot + j]):
                    self._keep_finals(con + j, slot + j, row + j)

    def hold_successor(self, con: int) -> None:
        """Step ``con``'s obs rows, left in the ring, as the held step's successor only."""
        self._copy_obs(con % self._cap, (self.base + 1) % self.rows)
        self.held, self.finish_held = 2, True

    def _copy_obs(self, slot: int, row: int) -> None:
        for cp, dst, src in self._seq:
            cp(dst[row], src[slot])

    def _keep_finals(self, index: int, slot: int, row: int) -> None:
        """Keep the final rows of the envs that ended at step ``index`` until it is delivered:
        the slot's side store is reused once the slot is freed."""
        import numpy as np

        envs = np.flatnonzero(self["terminated"][row] | self["truncated"][row])
        self.finals[index] = [(key, envs, self.src["final_" + key][slot, :len(envs)].copy())
                              for key in self.seq_keys]

    # ---- delivering ------------------------------------------------------------------
    def ready(self, limit: int) -> int:
        """Transitions deliverable as one contiguous batch (at most ``limit``)."""
        r = self.held - 1 if self.held <= limit else limit
        to_end = self.rows - self.base - 1  # transitions before the last row, or its one
        return r if r <= to_end else max(to_end, 1)

    def compact(self) -> None:
        """Move the held rows to the top, for a batch of ``min_steps`` that must not cross
        the last row; usually one row (1/rows of the copies of a learner of full batches)."""
        import numpy as np

        idx = np.array([(self.base + i) % self.rows for i in range(self.held)])
        for key in self.step_keys:
            self[key][:self.held] = self[key][idx]  # fancy index: a copy, so overlap is safe
        self.base = 0

    def deliver(self, r: int) -> Batch:
        """The first ``r`` held transitions as a batch of views; they stop being held."""
        b, start, finals = self.base, self.start, self.finals
        if finals and not finals.keys().isdisjoint(range(start, start + r)):
            batch = self._patched(r)
        else:
            e = b + r
            nxt = b + 1 if b + 1 < self.rows else 0
            obs, action, reward, term, trunc, critic = self._arrays
            batch = Batch(obs[b:e], obs[nxt:nxt + r], action[b:e], reward[b:e], term[b:e],
                          trunc[b:e], None if critic is None else critic[b:e],
                          None if critic is None else critic[nxt:nxt + r], start)
        held = self.held = self.held - r
        self.base, self.start = (b + r) % self.rows, start + r
        if held == 0 or (held == 1 and self.finish_held):
            self.clear_hold()  # only finish()'s observation is left: the stream is drained
        return batch

    def _patched(self, r: int) -> Batch:
        """deliver()'s batch where envs ended: next_obs copied into the buffers' next_*
        rows and patched with the final observations kept by :meth:`_keep_finals`."""
        import numpy as np

        b, nxt = self.base, (self.base + 1) % self.rows
        got = {key: self[key][b:b + r] for key in self.step_keys}
        for key in self.seq_keys:
            patched = self["next_" + key][:r]
            np.copyto(patched, self[key][nxt:nxt + r])
            got["next_" + key] = patched
        for s in range(self.start, self.start + r):
            for key, envs, rows in self.finals.pop(s, ()):
                got["next_" + key][s - self.start, envs] = rows
        return Batch(got["obs"], got["next_obs"], got["action"], got["reward"],
                     got["terminated"], got["truncated"], got.get("critic_obs"),
                     got.get("next_critic_obs"), self.start)
