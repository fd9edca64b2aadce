"""What a run's code ran on besides the machine: Python, every installed distribution, the GPU
driver and CUDA runtime, and the environment variables that steer throughput.

The machine fingerprint (:mod:`.machine_id`) splits the history; the environment does not.
A dependency bump is part of the change under test (docs/environment.md): the commit that
bumps numpy is judged against the runs before it like any other commit, and every verdict
whose baseline ran in another environment names what changed. Read without importing
anything (importlib.metadata), so a torch install costs nothing here.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ENV_KEY = "environment"  # run metadata key
# Variables that change the step's speed without changing a file: thread pools, the GL
# backend, which GPUs are visible. ``perfgate_env_vars`` adds to these.
DEFAULT_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS", "MUJOCO_GL", "CUDA_VISIBLE_DEVICES")
SHOWN = 6  # changes named in one sentence; the rest are counted


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them (``Mujoco_Core`` = ``mujoco-core``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _editable(dist: importlib.metadata.Distribution) -> bool:
    """Installed with ``pip install -e``: its code is the checkout under test, whose version
    string moves with every commit (setuptools-scm), so it is the code, not the environment."""
    try:
        text = dist.read_text("direct_url.json")
        info = json.loads(text) if text else {}
    except (OSError, ValueError):
        return False
    return bool(isinstance(info, dict) and isinstance(info.get("dir_info"), dict)
                and info["dir_info"].get("editable"))


def installed(dists: Iterable[importlib.metadata.Distribution] | None = None
              ) -> tuple[dict[str, str], list[str]]:
    """(version by canonical name, editable names) of what ``import`` would find: the first
    of several copies on sys.path wins, as importlib.metadata.version does."""
    versions: dict[str, str] = {}
    editable: list[str] = []
    seen: set[str] = set()
    for dist in dists if dists is not None else importlib.metadata.distributions():
        try:
            name, version = dist.metadata["Name"], dist.version
        except (KeyError, OSError, ValueError):
            continue
        if not isinstance(name, str) or not name or not isinstance(version, str):
            continue
        key = canonical(name)
        if key in seen:
            continue
        seen.add(key)
        if _editable(dist):
            editable.append(key)
        else:
            versions[key] = version
    return dict(sorted(versions.items())), sorted(editable)


def collect(env_vars: Sequence[str] = (), gpu: Mapping[str, Any] | None = None,
            environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """This process's environment as a run records it (``gpu``: the machine metadata's GPU
    block, which holds the driver and CUDA versions)."""
    env = os.environ if environ is None else environ
    names = list(dict.fromkeys([*DEFAULT_ENV_VARS, *env_vars]))
    packages, editable = installed()
    return {
        "python": platform.python_version(),
        "packages": packages,
        "editable": editable,
        "gpu_driver": (gpu or {}).get("driver"),
        "cuda_runtime": (gpu or {}).get("cuda_runtime"),
        "vars": {n: env.get(n) for n in names},
    }


def of_run(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The environment recorded in a run's metadata. Runs recorded before the environment
    was kept carry only a few versions (numpy, torch, mujoco...): those are what is known,
    and only what is known is compared."""
    env = meta.get(ENV_KEY)
    vers = meta.get("versions")
    # the machine's "versions" win: a pytest_perfgate_machine_info hook may set them
    packages = ({canonical(k): str(v) for k, v in vers.items() if v is not None}
                if isinstance(vers, Mapping) else {})
    if isinstance(env, Mapping) and isinstance(env.get("packages"), Mapping):
        return {**env, "packages": {**env["packages"], **packages}}
    block = meta.get("gpu")
    gpu: Mapping[str, Any] = block if isinstance(block, Mapping) else {}
    return {"python": meta.get("python"), "packages": packages, "partial": True,
            "gpu_driver": gpu.get("driver"), "cuda_runtime": gpu.get("cuda_runtime"),
            "vars": {}}


@dataclass(frozen=True)
class Change:
    """One thing that differs: ``name`` was ``before`` in the baseline, is ``after`` now
    (None: absent)."""

    name: str
    before: str | None
    after: str | None

    def words(self) -> str:
        if self.before is None:
            return f"{self.name} {self.after} added"
        if self.after is None:
            return f"{self.name} {self.before} removed"
        return f"{self.name} {self.before} -> {self.after}"

    def to_json(self) -> dict[str, str | None]:
        return {"name": self.name, "before": self.before, "after": self.after}


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Change]:
    """What differs from ``before`` (a baseline run's environment) to ``after``: Python,
    packages, GPU driver, CUDA runtime, the variables both recorded. A partial record
    (older runs) compares only the packages it holds."""
    out: list[Change] = []
    if before.get("python") and after.get("python") and before["python"] != after["python"]:
        out.append(Change("python", _str(before["python"]), _str(after["python"])))
    old, new = before.get("packages") or {}, after.get("packages") or {}
    partial = bool(before.get("partial") or after.get("partial"))
    names = (set(old) & set(new)) if partial else (set(old) | set(new))
    ignored = set(before.get("editable") or ()) | set(after.get("editable") or ())
    out += [Change(n, _str(old.get(n)), _str(new.get(n))) for n in sorted(names - ignored)
            if old.get(n) != new.get(n)]
    for key in ("gpu_driver", "cuda_runtime"):
        a, b = before.get(key), after.get(key)
        if a is not None and b is not None and a != b:
            out.append(Change(key.replace("_", " "), _str(a), _str(b)))
    old_vars, new_vars = before.get("vars") or {}, after.get("vars") or {}
    for n in sorted(set(old_vars) & set(new_vars)):
        if old_vars[n] != new_vars[n]:
            out.append(Change(f"${n}", _str(old_vars[n]) or "unset",
                              _str(new_vars[n]) or "unset"))
    return out


def since_baseline(baseline: Sequence[Mapping[str, Any]], now: Mapping[str, Any]
                   ) -> list[Change]:
    """What changed between the baseline runs' environments (newest first) and ``now``: a
    change counts when ``now`` differs from every baseline run in it; it is shown against
    the newest baseline run."""
    if not baseline:
        return []
    envs = [of_run(m) for m in baseline]
    first = changes(envs[0], now)
    keep = []
    for c in first:
        if all(any(o.name == c.name for o in changes(e, now)) for e in envs[1:]):
            keep.append(c)
    return keep


def describe(found: Sequence[Change], shown: int = SHOWN) -> str:
    """"mujoco-core 3.3.7 -> 4.0.1, numpy 2.1.3 -> 2.2.0" (and how many more)."""
    words = [c.words() for c in found[:shown]]
    more = len(found) - shown
    return ", ".join(words) + (f" and {more} more" if more > 0 else "")


def sentence(found: Sequence[Change]) -> str:
    """The note a verdict carries when its baseline ran in another environment."""
    return f"since the baseline: {describe(found)}"
