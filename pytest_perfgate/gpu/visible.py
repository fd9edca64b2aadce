"""Which NVML device a CUDA device is: ``CUDA_VISIBLE_DEVICES`` read as CUDA reads it.

CUDA numbers the devices it is allowed to see from 0, in the order ``CUDA_VISIBLE_DEVICES``
lists them (all, when it is unset). An entry is an NVML index (CUDA's order matches NVML's
under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and on machines of one GPU model), a ``GPU-``
UUID or a ``MIG-`` UUID (a prefix is enough); CUDA stops at the first entry it cannot
match. A GPU in MIG mode is not a CUDA device itself: its slices are. So CUDA's device N
is a :class:`~pytest_perfgate.gpu.nvml.Target`, never NVML's index N.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pytest_perfgate.gpu.nvml import Nvml, Target

ENV = "CUDA_VISIBLE_DEVICES"


def _expand(nvml: Nvml, index: int) -> list[Target]:
    """GPU ``index`` as CUDA sees it: itself, or its slices where MIG is on."""
    slices = nvml.slices(index)
    return [Target(index, j) for j in slices] if slices else [Target(index)]


def _bare(uuid: str) -> str:
    return uuid.strip().removeprefix("GPU-").removeprefix("MIG-").lower()


def _by_uuid(nvml: Nvml, prefix: str) -> list[Target]:
    """The GPU or slice whose UUID starts with ``prefix`` ("GPU-..." or "MIG-...")."""
    mig = prefix.startswith("MIG-")
    for i in range(nvml.count()):
        candidates = [Target(i, j) for j in nvml.slices(i)] if mig else [Target(i)]
        for t in candidates:
            uuid = nvml.uuid(t)
            if uuid is not None and uuid.startswith(prefix):
                return [t] if mig else _expand(nvml, i)
    return []


def visible(nvml: Nvml, env: Mapping[str, str] | None = None) -> list[Target]:
    """The devices CUDA numbers 0, 1, ... under ``env``'s CUDA_VISIBLE_DEVICES."""
    env = os.environ if env is None else env
    n = nvml.count()
    raw = env.get(ENV)
    if raw is None:
        return [t for i in range(n) for t in _expand(nvml, i)]
    out: list[Target] = []
    for tok in (t.strip() for t in raw.split(",")):
        if tok.isdigit() and int(tok) < n:
            got = _expand(nvml, int(tok))
        elif tok.startswith(("GPU-", "MIG-")):
            got = _by_uuid(nvml, tok)
        else:
            got = []
        if not got:
            break  # CUDA stops at the first entry it cannot match
        out.extend(got)
    return list(dict.fromkeys(out))


def cuda_target(nvml: Nvml, cuda_index: int, env: Mapping[str, str] | None = None
                ) -> Target | None:
    """The device CUDA numbers ``cuda_index`` (None where it sees fewer)."""
    seen = visible(nvml, env)
    return seen[cuda_index] if 0 <= cuda_index < len(seen) else None


def target_of_uuid(nvml: Nvml, uuid: str) -> Target | None:
    """The GPU or slice whose UUID is ``uuid`` (torch's ``device_properties.uuid``, with
    or without its prefix)."""
    want = _bare(uuid)
    if not want:
        return None
    for i in range(nvml.count()):
        for t in (Target(i), *(Target(i, j) for j in nvml.slices(i))):
            got = nvml.uuid(t)
            if got is not None and _bare(got) == want:
                return t
    return None


def device_count(env: Mapping[str, str] | None = None) -> int | None:
    """How many devices CUDA will see: from NVML (no CUDA context made), else torch's
    count; None where neither is installed."""
    from pytest_perfgate.gpu import nvml as nvml_mod

    nv = nvml_mod.shared()
    if nv is not None and nv.count() > 0:
        return len(visible(nv, env))
    try:
        import torch
    except ImportError:
        return None
    return int(torch.cuda.device_count())


def gpu_of(cuda_index: int, env: Mapping[str, str] | None = None) -> int:
    """NVML's index of the GPU under CUDA's device ``cuda_index`` (a slice's GPU); the
    index itself where NVML cannot say (what needs NVML then says so)."""
    from pytest_perfgate.gpu import nvml as nvml_mod

    nv = nvml_mod.shared()
    target = cuda_target(nv, cuda_index, env) if nv is not None else None
    return target.index if target is not None else cuda_index
