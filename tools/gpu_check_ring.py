"""tools/gpu_check.py's ring check on a real GPU: a pair whose learner runs on CUDA
(``learner_device="cuda"``) moves exactly 1M transitions, each counted once.

The collector pushes one more step than the transitions it means (a step's next
observation is the following push's), each observation holding its transition's index;
the learner copies every batch to the GPU (page-locked, non-blocking) and sums the indices
and their squares there, as int64 (exact), then writes what it saw to a file.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TOTAL = 1_000_000
NUM_ENVS = 1000  # TOTAL is a whole number of steps


def counting_collector(ring: Any, rec: Any, *, total: int = TOTAL) -> Callable[[], int]:
    """Pushes ``total // num_envs + 1`` steps, observation = transition index, then idles."""
    import numpy as np

    n = ring.spec.num_envs
    state = {"t": 0}
    zeros = np.zeros(n, np.float32)
    action = np.zeros((n, *ring.spec.action_shape), np.float32)

    def once() -> int:
        t = state["t"]
        if t > total // n:
            time.sleep(0.01)
            return 0
        with rec.phase("push"):
            obs = (t * n + np.arange(n, dtype=np.float32)).reshape(n, 1)
            ring.push(obs, action, zeros, zeros > 0, zeros > 0)
        state["t"] += 1
        return n if t < total // n else 0

    return once


def summing_learner(ring: Any, rec: Any, *, out: str, device: str = "cpu"
                    ) -> Callable[[], int]:
    """Copies each batch to ``device`` and sums it there; writes the count and sums to
    ``out`` after each batch."""
    import torch

    dev = torch.device(device)
    sums = torch.zeros(2, dtype=torch.int64, device=dev)
    state = {"n": 0}

    def once() -> int:
        b = ring.pop(timeout=0.05)
        if b is None:
            return 0
        with rec.phase("copy_h2d"):
            host = torch.from_numpy(b.obs)
            x = (host.pin_memory() if dev.type == "cuda" else host).to(
                dev, non_blocking=True).long()
        with rec.phase("update"):
            sums[0] += x.sum()
            sums[1] += (x * x).sum()
        state["n"] += b.transitions
        got = sums.tolist()
        Path(out).write_text(json.dumps({"n": state["n"], "sum": got[0], "sq": got[1]}))
        return int(b.transitions)

    return once


def exact_transfer(total: int = TOTAL, num_envs: int = NUM_ENVS, device: str = "cuda",
                   timeout_s: float = 120.0) -> list[tuple[bool, str]]:
    """The pair runs until the learner has consumed ``total`` transitions (or
    ``timeout_s``), then once more: nothing more may arrive."""
    from pytest_perfgate.ring import RingSpec
    from pytest_perfgate.ring.pair import RingPair

    print(f"\n== 5. a ring pair with learner_device={device!r} moving {total:,} transitions")
    with tempfile.TemporaryDirectory(prefix="perfgate-gpu-ring-") as tmp:
        out = Path(tmp) / "learner.json"
        spec = RingSpec(num_envs, (1,), (1,), capacity=64)
        t0 = time.monotonic()
        with RingPair(spec, collector=counting_collector, learner=summing_learner,
                      collector_kwargs={"total": total}, learner_kwargs={"out": str(out)},
                      learner_device=device, park=False) as pair:
            seen: dict[str, Any] = {}
            while time.monotonic() - t0 < timeout_s:
                pair.run_window(0.5)
                seen = json.loads(out.read_text()) if out.exists() else {}
                if seen.get("n", 0) >= total:
                    pair.run_window(0.5)
                    seen = json.loads(out.read_text())
                    break
        took = time.monotonic() - t0
    want_sum = total * (total - 1) // 2
    want_sq = (total - 1) * total * (2 * total - 1) // 6
    print(f"  learner saw {seen.get('n', 0):,} transitions in {took:.1f} s, index sum "
          f"{seen.get('sum')} (want {want_sum}), sum of squares {seen.get('sq')} (want "
          f"{want_sq})")
    return [(seen.get("n") == total, f"exactly {total:,} transitions reached the learner"),
            (seen.get("sum") == want_sum and seen.get("sq") == want_sq,
             "each transition once, none lost or repeated (sums of the indices)")]
