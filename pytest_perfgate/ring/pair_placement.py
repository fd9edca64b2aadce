"""Where a pair's sides run: core specs, NUMA nodes and the learner's device, checked before
any process starts; a refusal names the value and the fix (docs/ring.md "Several
collectors")."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from pytest_perfgate.placement import cpus as _cpus
from pytest_perfgate.placement.launchers import split_slices
from pytest_perfgate.ring.layout import RingInputError


def split_cpus(cpus: Sequence[int], n: int) -> list[str]:
    """``cpus`` cut into ``n`` consecutive slices as near equal as possible (core specs)."""
    cpus = sorted(cpus)
    if isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= len(cpus):
        raise RingInputError(f"collectors={n!r}: give 1 to {len(cpus)} collectors for "
                             f"the {len(cpus)} CPUs {_cpus.format_cpus(cpus)}, one CPU at "
                             "least each")
    return [_cpus.format_cpus(s) for s in split_slices(cpus, n)]


def collector_placement(collectors: int, cpus: Any, nodes: Any
                        ) -> tuple[list[tuple[int, ...] | None], list[int | None]]:
    """Per-collector (cpus, node), checked before any process starts: a positive count,
    one core spec (and node) per collector, no CPU or node shared by two collectors, no
    more collectors than usable CPUs or usable nodes."""
    if isinstance(collectors, bool) or not isinstance(collectors, int) or collectors < 1:
        raise RingInputError(f"collectors={collectors!r}: give a whole number >= 1 of "
                             "collector processes")
    usable = _cpus.usable_cpus()
    if collectors > len(usable):
        raise RingInputError(f"collectors={collectors}: more collectors than the "
                             f"{len(usable)} usable CPUs ({_cpus.format_cpus(usable)}); "
                             f"use at most {len(usable)}, one CPU at least each")
    specs = list(cpus) if isinstance(cpus, list | tuple) else [cpus] * collectors
    if collectors > 1 and not isinstance(cpus, list | tuple) and cpus is not None:
        raise RingInputError(f"collector_cpus={cpus!r} with collectors={collectors}: give one "
                             f"core spec per collector, e.g. {split_cpus(usable, collectors)!r}")
    if len(specs) != collectors:
        raise RingInputError(f"collector_cpus={cpus!r}: {len(specs)} core spec(s) for "
                             f"{collectors} collector(s); give exactly one per collector")
    node_list = list(nodes) if nodes is not None else [None] * collectors
    if len(node_list) != collectors:
        raise RingInputError(f"collector_nodes={nodes!r}: {len(node_list)} node(s) for "
                             f"{collectors} collector(s); give exactly one per collector")
    if nodes is not None:
        from pytest_perfgate.placement import numa as _numa

        avail = {n.id: n for n in _numa.discover().usable_nodes(usable)}
        bad = [n for n in node_list if n not in avail]
        if bad or len(set(node_list)) != len(node_list):
            why = (f"node(s) {bad} are not usable here" if bad
                   else "two collectors on one node")
            raise RingInputError(f"collector_nodes={nodes!r}: {why}; usable nodes (with CPUs "
                                 f"and memory): {sorted(avail) or 'none'}, one per collector")
        specs = [spec if spec is not None else _cpus.format_cpus(avail[int(n)].cpus)
                 for spec, n in zip(specs, node_list, strict=True) if n is not None]
    parsed = [_cpus.parse_cpus(spec) for spec in specs]
    seen: dict[int, int] = {}
    for i, got in enumerate(parsed):
        for c in got or ():
            if c in seen:
                raise RingInputError(f"collector_cpus={cpus!r}: collectors {seen[c]} and {i} "
                                     f"both have CPU {c}; give each collector its own CPUs")
            seen[c] = i
    return parsed, node_list


def check_device(device: object) -> str:
    """A learner device: "cpu", "cuda" or "cuda:N", N below the devices CUDA will see
    (counted without making a CUDA context here: gpu/visible.py)."""
    if not isinstance(device, str) or not (
            device in ("cpu", "cuda") or (device.startswith("cuda:")
                                          and device[5:].isdigit())):
        raise RingInputError(f"learner_device={device!r}: use 'cpu' (the default), 'cuda' "
                             "or 'cuda:N'")
    if device == "cpu":
        return device
    from pytest_perfgate.gpu.visible import ENV, device_count

    n = device_count()
    index = int(device.partition(":")[2] or 0)
    if n is not None and index >= n:
        env = os.environ.get(ENV)
        where = f" with {ENV}={env!r}" if env is not None else ""
        if not n:
            raise RingInputError(f"learner_device={device!r}: CUDA sees no device "
                                 f"here{where}: run the learner on 'cpu', or on a machine "
                                 "with a GPU")
        fix = "use 'cuda:0'" if n == 1 else f"use 'cuda:0' to 'cuda:{n - 1}'"
        if env is not None:
            fix += f", or list more devices in {ENV}"
        raise RingInputError(f"learner_device={device!r}: CUDA sees {n} device(s) "
                             f"here{where}: {fix}")
    return device


def gpu_local(cpus: Any, cuda_device: int | None = None) -> Any:
    """A core spec, with "gpu" / "gpu:N" / "gpu:<PCI address>" resolved to the CPUs local
    to that GPU (placement/numa.py: a platform without locality warns and leaves the side
    unpinned; a GPU that cannot be found is an error). A bare "gpu" is the learner's GPU:
    CUDA's device ``cuda_device`` (0 for a CPU learner) under CUDA_VISIBLE_DEVICES; N is
    NVML's index, as nvidia-smi numbers the GPUs."""
    if not (isinstance(cpus, str) and cpus.strip().lower().split(":", 1)[0] == "gpu"):
        return cpus
    from pytest_perfgate.gpu.visible import gpu_of
    from pytest_perfgate.placement.numa import gpu_local_cpus

    _, _, which = cpus.strip().partition(":")
    device: int | str = (int(which) if which.isdigit() else which if which
                         else gpu_of(cuda_device or 0))
    try:
        return gpu_local_cpus(device)
    except ValueError as exc:
        raise RingInputError(f"learner_cpus={cpus!r}: {exc}") from None
