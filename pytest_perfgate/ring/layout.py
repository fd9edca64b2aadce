"""What a ring slot holds and where each array lives in the segment (docs/design.md §9).

Six slot fields (obs, critic_obs optional, action, reward, terminated, truncated): a step's
observation is written once, and ``next_obs`` is read from the successor slot. The final
observations of envs that ended at a step go to a per-slot side store, written only for
those envs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

HEADER_BYTES = 4096  # counters, one 64-byte line per writer (ring/mapping.py)
ALIGN = 64
MAX_SPIN_US = 10_000  # polling longer than this only burns the CPU: sleep instead


MAX_RING_BYTES = 1 << 40  # 1 TiB: a larger segment is a mistake (creation checks /dev/shm)


class RingInputError(ValueError):
    """A push or a spec does not match what the ring declared; the message names it."""


def _shape(name: str, value: Any) -> tuple[int, ...]:
    """A shape as numpy takes one (an int is one dimension), each dimension a whole
    number >= 1; anything else is refused naming the field."""
    import numbers

    dims = (value,) if isinstance(value, numbers.Integral) else value
    if isinstance(dims, str | bytes) or not hasattr(dims, "__iter__"):
        raise RingInputError(f"{name}={value!r}: pass a tuple of whole numbers, e.g. (376,)")
    out = tuple(dims)
    for d in out:
        if isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1:
            raise RingInputError(f"{name}={value!r}: every dimension must be a whole number "
                                 f">= 1 (got {d!r}), e.g. (376,)")
    return tuple(int(d) for d in out)


@dataclass(frozen=True)
class RingSpec:
    """Shapes and dtypes, declared once. ``obs_shape``/``critic_shape`` exclude num_envs."""

    num_envs: int
    obs_shape: tuple[int, ...]
    action_shape: tuple[int, ...]
    capacity: int = 8
    critic_shape: tuple[int, ...] | None = None
    obs_dtype: str = "float32"
    action_dtype: str = "float32"
    reward_dtype: str = "float32"
    overwrite: bool = False  # False: push blocks when full (default); True: drop the oldest
    check_finite: bool = False  # False: NaN/inf passed through; True: rejected at push
    # How long a waiting side polls the counters before it sleeps, in us: 0 (default)
    # never polls. Worth it only where each side has a CPU of its own: polling takes CPU
    # from whatever shares it (docs/ring.md "Polling before sleeping").
    spin_us: float = 0

    def __post_init__(self) -> None:
        import numpy as np

        cap = self.capacity
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 2:
            raise RingInputError(
                f"capacity={cap!r}: a ring needs capacity >= 2. Slot t becomes readable only "
                "when slot t+1 is written (next_obs lives there), so with 1 slot the learner "
                "waits for a successor the collector can never write: a deadlock. Use >= 2")
        spin = self.spin_us
        if (isinstance(spin, bool) or not isinstance(spin, int | float)
                or not 0 <= spin <= MAX_SPIN_US):
            raise RingInputError(
                f"spin_us={spin!r}: pass how many microseconds a waiting side polls before "
                f"it sleeps, a number from 0 (never poll, the default) to {MAX_SPIN_US}; "
                "200 suits a learner and a collector pinned to CPUs of their own")
        n = self.num_envs
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise RingInputError(f"num_envs={n!r}: pass a positive int")
        for name in ("obs_shape", "action_shape", "critic_shape"):
            shape = getattr(self, name)
            if shape is not None:
                object.__setattr__(self, name, _shape(name, shape))
        for name in ("obs_dtype", "action_dtype", "reward_dtype"):
            value = getattr(self, name)
            if value is None:  # numpy reads None as float64: say what was meant instead
                raise RingInputError(f"{name}=None: name the dtype, e.g. 'float32'")
            try:
                dt = np.dtype(value)
            except TypeError as exc:
                raise RingInputError(f"{name}={value!r}: not a numpy dtype ({exc})") from None
            if dt.kind not in "biufc" or dt.fields is not None or dt.subdtype is not None:
                raise RingInputError(
                    f"{name}={value!r} ({dt}): the ring holds only fixed-size numeric or "
                    "bool dtypes (raw bytes in shared memory: an object or string dtype "
                    "would hand the other process dangling pointers or variable lengths); "
                    "use e.g. 'float32', 'int64' or 'bool'")
            object.__setattr__(self, name, dt.name)
        size = self.layout()[1]
        if size > MAX_RING_BYTES:
            raise RingInputError(
                f"a ring of num_envs={n}, capacity={cap} and these shapes needs {size:,} "
                f"bytes of shared memory, more than any machine has ({MAX_RING_BYTES:,} is "
                "the limit): check the shapes, or use fewer slots or envs")

    def fields(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Per-slot arrays (without the capacity axis): name -> (shape, dtype)."""
        n = self.num_envs
        f = {"obs": ((n, *self.obs_shape), self.obs_dtype)}
        if self.critic_shape is not None:
            f["critic_obs"] = ((n, *self.critic_shape), self.obs_dtype)
        f["action"] = ((n, *self.action_shape), self.action_dtype)
        f["reward"] = ((n,), self.reward_dtype)
        f["terminated"] = ((n,), "bool")
        f["truncated"] = ((n,), "bool")
        # Side store: final observations of the envs that ended, packed in env order.
        f["final_obs"] = ((n, *self.obs_shape), self.obs_dtype)
        if self.critic_shape is not None:
            f["final_critic_obs"] = ((n, *self.critic_shape), self.obs_dtype)
        return f

    def spin_ns(self) -> int:
        """The polling budget, in nanoseconds."""
        return int(self.spin_us * 1000)

    def layout(self) -> tuple[dict[str, tuple[int, tuple[int, ...], str]], int]:
        """name -> (offset, shape incl. capacity, dtype), and the segment size in bytes."""
        import numpy as np

        off = HEADER_BYTES
        out: dict[str, tuple[int, tuple[int, ...], str]] = {}
        for name, (shape, dtype) in self.fields().items():
            full = (self.capacity, *shape)
            out[name] = (off, full, dtype)
            nbytes = math.prod(full) * np.dtype(dtype).itemsize  # Python ints: no overflow
            off += (nbytes + ALIGN - 1) // ALIGN * ALIGN
        return out, off

    def slot_bytes(self) -> int:
        """Bytes one push writes when no env ended (the side store is not touched)."""
        import numpy as np

        return sum(int(np.prod(s)) * np.dtype(d).itemsize
                   for k, (s, d) in self.fields().items() if not k.startswith("final_"))


SECONDS = (float, int)  # a timeout of these classes needs only a range check (check_timeout)


def check_counts(max_steps: int | None, min_steps: int) -> None:
    """Refuse a step count that is not a positive int (``max_steps`` None: all there are);
    called after pop() and borrow() found one inline."""
    for name, v in (("max_steps", max_steps), ("min_steps", min_steps)):
        if v is None and name == "max_steps":
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise RingInputError(f"{name}={v!r}: pass a positive int"
                                 + (" (or None: all consumable steps)"
                                    if name == "max_steps" else ""))


def check_timeout(what: str, timeout: Any) -> float:
    """Refuse a timeout that is not None or a finite number of seconds >= 0 (NaN waited
    forever; a string raised a bare TypeError deep in the wait); a number of another class
    (numpy's) comes back as a float. Called only off the fast path: callers test
    ``timeout.__class__ is float or int`` first."""
    import numbers

    if (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)
            or not 0 <= float(timeout) < math.inf):
        raise RingInputError(f"{what}: timeout={timeout!r}: pass None (wait until there is "
                             "something) or a number of seconds >= 0, e.g. 0.5")
    return float(timeout)


def check_array(field: str, value: Any, shape: tuple[int, ...], dtype: Any,
                finite: bool) -> Any:
    """The array to store, or RingInputError naming the field, what was expected and got."""
    import numpy as np

    arr = np.asarray(value)
    if arr.shape != shape or arr.dtype != np.dtype(dtype):
        raise RingInputError(f"push: field {field!r} expected shape {shape} dtype {dtype}, "
                             f"got shape {arr.shape} dtype {arr.dtype}; convert it or declare "
                             "the ring with this shape/dtype")
    if finite and arr.dtype.kind == "f" and not np.isfinite(arr).all():
        bad = np.argwhere(~np.isfinite(arr))[0].tolist()
        raise RingInputError(f"push: field {field!r} holds a non-finite value at index {bad} "
                             f"({float(arr[tuple(bad)])!r}); the ring was created with "
                             "check_finite=True, which rejects NaN/inf")
    return arr
