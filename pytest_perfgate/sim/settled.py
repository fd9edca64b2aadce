"""Settled states computed once and reused: a content-addressed cache of held states.

Why: a perf test settles its humanoids (64 of them for 300 substeps) before it holds the
state. The instruction-counts worker runs the same test again under valgrind, where that
settling took 35 s of a 52 s start-up against 3.3 s natively (docs/design.md §10). The
parent pytest runs the test natively before it starts the worker, so it fills this cache
and the worker reads the same bytes back; settling is deterministic (bit-identical at any
thread count and under valgrind, §10), so a cached state is the state the test would have
computed. The key is everything the result depends on: the compiled model's bytes, mujoco
and numpy versions (the physics; the random controls' stream), the CPU architecture, and
rows, substeps, seed, keyframe, state size and dtype. A file that is not a valid state is
skipped with a warning naming it and recomputed; a cache that cannot be written only warns.

The cache folder is writable by any code its user runs (a pull request's perf test on a
shared runner), so a file read there is checked before it is used: a few of its rows (the
first, the last and one drawn at random) are settled again on their own, which costs that
fraction of settling them all, and must equal the file's rows bit for bit (settling is
deterministic, and each env is independent of the others). A file that differs is refused
with a warning naming it. A file this process wrote or checked is known by its digest, kept
in memory (outside the cache), and is not settled again. In CI each job points
``PERFGATE_CACHE_DIR`` at a folder of its own (docs/ci.md).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import secrets
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pytest_perfgate.core.atomic import atomic_write

CACHE_ENV = "PERFGATE_CACHE_DIR"
SCHEME = 1  # bump when the settling procedure changes: every earlier file then misses
DTYPE = "float64"  # mujoco.batch's state rows


class SettledCacheWarning(UserWarning):
    """The settled-state cache could not be read or written; the state was computed."""


_TRUSTED: dict[Path, str] = {}  # file -> sha256 of the bytes this process wrote or checked


def cache_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """``$PERFGATE_CACHE_DIR``, else ``$XDG_CACHE_HOME/pytest-perfgate``, else
    ``~/.cache/pytest-perfgate``; None when there is no home to put it in."""
    env = os.environ if environ is None else environ
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV]).expanduser().absolute()
    xdg = env.get("XDG_CACHE_HOME", "")
    if xdg and os.path.isabs(xdg):  # the XDG spec: a relative value is ignored
        return Path(xdg) / "pytest-perfgate"
    try:
        return Path.home() / ".cache" / "pytest-perfgate"
    except (RuntimeError, KeyError):  # no HOME and no passwd entry (some containers)
        return None


@dataclass(frozen=True)
class SettleKey:
    """What a settled state is a function of; its digest names the cache file."""

    model_sha256: str
    mujoco_version: str
    numpy_version: str
    machine: str
    rows: int
    substeps: int
    seed: int
    keyframe: int
    nstate: int
    dtype: str = DTYPE
    scheme: int = SCHEME

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.nstate)

    def path(self, root: Path) -> Path:
        return root / "settled" / f"{self.digest}.npy"


def settle_key(model: Any, rows: int, substeps: int, seed: int, keyframe: int) -> SettleKey:
    """The key of ``rows`` trajectories of ``model`` settled as :func:`settle` does."""
    import mujoco
    import numpy as np

    from pytest_perfgate.sim.models import compiled_sha256

    nstate = mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_INTEGRATION)
    return SettleKey(compiled_sha256(model), mujoco.__version__, np.__version__,
                     platform.machine(), rows, substeps, seed, keyframe, int(nstate))


def settle(model: Any, rows: int, substeps: int, seed: int = 0, keyframe: int = -1,
           which: Sequence[int] | None = None) -> Any:
    """``rows`` envs from ``keyframe`` under fixed random controls for ``substeps``: their
    state rows (humanoids are on the ground, in contact, by 300 substeps of 3 ms). With
    ``which``, only those rows, settled alone: bit for bit the same rows."""
    import numpy as np
    from mujoco.batch import Batch

    from pytest_perfgate.sim.threads import plan_threads

    picked = list(range(rows)) if which is None else list(which)
    b = Batch(model, len(picked), plan_threads(len(picked)).nthread)
    b.reset(keyframe=keyframe)
    if model.nu:
        lo, hi = model.actuator_ctrlrange.T
        ctrl = np.random.default_rng(seed).uniform(lo, hi, (rows, model.nu))
        b.bind("ctrl")[...] = ctrl if which is None else ctrl[picked]
    if substeps > 0:
        b.step(nstep=substeps)
    return b.state.copy()


def sample_rows(rows: int) -> list[int]:
    """The rows a cached state is checked on: the first, the last and one at random (a
    planter cannot know which)."""
    return sorted({0, rows - 1, secrets.randbelow(rows)})


def differs(arr: Any, rows: Sequence[int], fresh: Any) -> str | None:
    """Why ``arr`` is not the state whose ``rows`` were just settled as ``fresh`` (None:
    they are the same bits)."""
    import numpy as np

    bad = [r for r, row in zip(rows, fresh, strict=True) if not np.array_equal(arr[r], row)]
    if not bad:
        return None
    return (f"row(s) {', '.join(map(str, bad))} differ from the same rows settled now (a "
            "file written by other code: this state is not what the key says)")


def load(path: Path, shape: tuple[int, ...], dtype: str = DTYPE) -> Any:
    """The state stored at ``path``, or None: missing is a quiet miss; anything that is not a
    finite array of ``shape`` and ``dtype`` warns, naming the file, and misses."""
    import numpy as np

    try:
        with path.open("rb") as f:
            arr = np.load(f, allow_pickle=False)
    except (FileNotFoundError, NotADirectoryError):  # a folder that cannot exist: store() says
        return None
    except (OSError, ValueError, EOFError) as exc:
        why = " ".join(str(exc).split()) or type(exc).__name__
        return _skip(path, f"it is not a readable .npy file ({why})")
    if not isinstance(arr, np.ndarray):
        return _skip(path, "it is not a single array")
    if arr.shape != shape or arr.dtype != np.dtype(dtype):
        return _skip(path, f"it holds {arr.dtype} {arr.shape}, not {dtype} {shape}")
    if not np.isfinite(arr).all():
        return _skip(path, "it holds NaN or infinite values")
    return arr


def _skip(path: Path, why: str) -> None:
    warnings.warn(f"settled-state cache file {path} was ignored: {why}; recomputing the "
                  "state (and replacing the file)", SettledCacheWarning, stacklevel=3)
    return None


def store(path: Path, arr: Any) -> None:
    """Write ``arr`` to ``path`` atomically; a failure warns (the run goes on uncached)."""
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    try:
        atomic_write(path, buf.getvalue())
    except OSError as exc:
        warnings.warn(f"cannot write the settled-state cache file {path} "
                      f"({exc.strerror or exc}): the state was computed and is used, but the "
                      "next run (and an instruction-counts worker) settles it again; set "
                      f"{CACHE_ENV} to a writable folder", SettledCacheWarning, stacklevel=3)


def cached(key: SettleKey, compute: Callable[[], Any], root: Path | None = None,
           check: Callable[[Any], str | None] | None = None) -> Any:
    """The state under ``key`` from the cache in ``root`` (default :func:`cache_dir`), or
    ``compute()`` stored there. ``check(arr)`` says why a file read is not the state (None:
    it is); a file this process wrote or checked is not checked again."""
    root = cache_dir() if root is None else root
    if root is None:
        warnings.warn("no folder for the settled-state cache (no home directory): settling "
                      f"every time; set {CACHE_ENV} to a writable folder",
                      SettledCacheWarning, stacklevel=2)
        return compute()
    path = key.path(root)
    arr = load(path, key.shape, key.dtype)
    if arr is not None and check is not None:
        digest = hashlib.sha256(arr.tobytes()).hexdigest()
        if _TRUSTED.get(path) != digest:
            why = check(arr)
            if why is not None:
                _skip(path, why)
                arr = None
            else:
                _TRUSTED[path] = digest
    if arr is None:
        arr = compute()
        if arr.shape != key.shape or str(arr.dtype) != key.dtype:  # the key's sizes are wrong
            raise RuntimeError(f"settled state of {arr.dtype} {arr.shape} does not match its "
                               f"cache key ({key.dtype} {key.shape}): a bug in settle_key")
        store(path, arr)
        _TRUSTED[path] = hashlib.sha256(arr.tobytes()).hexdigest()
    return arr


def settled_rows(model: Any, rows: int, substeps: int, seed: int = 0, keyframe: int = -1,
                 cache: bool = True) -> Any:
    """:func:`settle`, served from the cache when ``cache`` (docs/design.md §10)."""
    if not cache:
        return settle(model, rows, substeps, seed, keyframe)
    key = settle_key(model, rows, substeps, seed, keyframe)

    def check(arr: Any) -> str | None:
        sample = sample_rows(rows)
        return differs(arr, sample, settle(model, rows, substeps, seed, keyframe, sample))

    return cached(key, lambda: settle(model, rows, substeps, seed, keyframe), check=check)
