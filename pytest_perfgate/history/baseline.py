"""Which recorded runs may serve as a benchmark's baseline, and why none did.

The gate compares only like with like: same machine fingerprint, a commit on HEAD's own
line of history (docs/design.md §2). The code under test never judges itself: runs of
HEAD's own commit are left out (a dirty tree may be judged by clean runs of its commit, its
strict ancestor), and a run whose benchmark failed the gate stays out until a person
accepts it (:mod:`pytest_perfgate.history.decisions`). When nothing qualifies, the
explanation names the fingerprints that do hold the benchmark and what differs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_perfgate.core.results import BenchResult, RunRecord
from pytest_perfgate.history.asv_runs import is_asv_run
from pytest_perfgate.history.decisions import Decisions
from pytest_perfgate.history.machine_id import describe_mismatch, fingerprint_fields, gpu_model


def select_baseline(runs: Sequence[RunRecord], bench_name: str, *, fingerprint: str,
                    head_commit: str, is_ancestor: Callable[[set[str]], set[str]], n: int = 5,
                    explicit_commit: str | None = None, head_dirty: bool = False,
                    decisions: Decisions | None = None, gpu: str | None = None
                    ) -> list[tuple[RunRecord, BenchResult]]:
    """The newest ``n`` runs (by started_at) that may serve as ``bench_name``'s baseline.

    Only runs on the same machine fingerprint that measured the benchmark count, and only
    results ``decisions`` lets serve (not failed, or accepted; not forgotten). By default
    their commit must be a strict ancestor of the code under test (``is_ancestor`` is asked
    once, with every distinct candidate commit), so one pull request's runs never become
    another's baseline and re-running HEAD never moves its own baseline. The code under
    test is the commit plus the dirty flag: a dirty tree at commit C is judged by C's clean
    runs (its ancestor), never by C's dirty runs (other edits, or the same ones). Outside
    git (HEAD all zeros) every run counts. With ``explicit_commit`` (full hash or prefix)
    only that commit's runs count: a person chose them. ``gpu`` (the GPUs' model, for a
    benchmark that used them): only runs on the same GPUs count.
    """
    if n < 1:
        raise ValueError(f"baseline size n={n} must be at least 1: use the default 5")
    d = decisions if decisions is not None else Decisions()
    pool = [r for r in runs if r.fingerprint == fingerprint and bench_name in r.benchmarks
            and d.may_serve(r, bench_name)
            and (gpu is None or gpu_model(r.metadata) == gpu)]
    if explicit_commit is not None:
        want = explicit_commit.strip().lower()
        if not want:
            raise ValueError("explicit baseline commit is empty: give a commit hash or prefix")
        matched = {r.commit for r in pool if r.commit.lower().startswith(want)}
        if len(matched) > 1:
            raise ValueError(f"baseline commit prefix {explicit_commit!r} matches several "
                             f"recorded commits ({', '.join(sorted(c[:12] for c in matched))})"
                             ": give more digits")
        chosen = [r for r in pool if r.commit in matched]
    elif set(head_commit) == {"0"}:
        chosen = list(pool)  # outside git: no commits to tell apart (docs/measurement.md says so)
    else:
        others = {r.commit for r in pool if r.commit != head_commit and set(r.commit) != {"0"}}
        ok = (is_ancestor(others) & others) if others else set()
        chosen = [r for r in pool if r.commit in ok
                  or (r.commit == head_commit and head_dirty and not r.dirty)]
    chosen.sort(key=lambda r: r.started_at, reverse=True)
    return [(r, r.benchmarks[bench_name]) for r in chosen[:n]]


def describe_other_fingerprints(runs: Sequence[RunRecord], fingerprint: str, bench: str, *,
                                current_meta: Mapping[str, Any] | None = None) -> str | None:
    """Explain an empty baseline: which other fingerprints hold ``bench`` and how they
    differ from ours. None when no other fingerprint has it either."""
    groups: dict[str, list[RunRecord]] = {}
    for r in runs:
        if r.fingerprint != fingerprint and bench in r.benchmarks:
            groups.setdefault(r.fingerprint, []).append(r)
    if not groups:
        return None
    ours = fingerprint_fields(current_meta) if current_meta is not None else None
    parts = []
    for fp, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        part = f"{len(rs)} {'run exists' if len(rs) == 1 else 'runs exist'} on fingerprint {fp}"
        if all(is_asv_run(r) for r in rs):
            part += (" (recorded by `asv run`, whose files keep no CPU affinity, cgroup "
                     "quota or NUMA nodes: docs/design.md §6)")
        if ours is not None:
            theirs = fingerprint_fields(max(rs, key=lambda r: r.started_at).metadata)
            part += f" which differs in: {describe_mismatch(theirs, ours)}"
        parts.append(part)
    return (f"no results for {bench} on this machine fingerprint ({fingerprint}); "
            + "; ".join(parts))
