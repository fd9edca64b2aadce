"""The lines a failure, the markdown report and bisect show of a profile (its JSON entry),
and the notes its entry keeps (:func:`notes`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SHOWN = 5
PER = "env-step"  # what a profile's times are per when its entry does not say (older ones)
# what a named function's two figures are, said once above them
KINDS = ("self: without the functions named on lines of their own; total: with all it "
         "calls; shares are of self")


def _fn(n: Mapping[str, Any]) -> str:
    where = n.get("where") or ""
    return f"{n.get('function')} ({where})" if where else str(n.get("function"))


def unit(ms: float) -> tuple[str, float]:
    """The unit that shows ``ms`` (per unit of work) with a few digits: ms, us or ns."""
    ms = abs(ms)
    return ("ms", 1.0) if ms >= 0.1 else ("us", 1e3) if ms >= 1e-4 else ("ns", 1e6)


def per(profile: Mapping[str, Any]) -> tuple[str, str]:
    """What the profile's times are per, as a line says it ("env-step", "call") and as a
    unit's divisor ("step", "call"): the benchmark's own unit of work."""
    work = profile.get("per")
    work = work if isinstance(work, str) and work else PER
    return work, short(work)


def short(work: str) -> str:
    """A unit of work as a unit's divisor: "env-step" -> "step" ("ms/step"), "call"."""
    return "step" if work == PER else work


def notes(changed: Sequence[bool | None], growth: float, wall_drop: float,
          wall_ci: tuple[float, float] | None, blind: float, step: str) -> list[str]:
    """What the named functions (``changed``: whether each one's lines changed) do not
    explain, said as what it is, per ``step``; kept in the profile's entry."""
    out = []
    if wall_ci is not None and wall_ci[0] <= 0:
        out.append(f"these turns did not show the drop beyond their noise (each {step} "
                   f"{wall_drop:+.3g} ms [{wall_ci[0]:+.3g}, {wall_ci[1]:+.3g}] in wall "
                   "time, the sampler slowing both sides): a function is evidence as far "
                   "as its own interval excludes zero")
    elif wall_drop > 0 and growth < 0.5 * wall_drop:
        out.append(f"the sampled time changed by {growth:+.3g} ms/{step} while each {step} "
                   f"took {wall_drop:.3g} ms longer: most of the drop is waiting (a lock, "
                   "the GPU, I/O, another process), which a sampling profiler does not see "
                   "as a function's time")
    if blind:
        out.append(f"{blind:.3g} ms/{step} of the growth is in native code without symbols "
                   "or in processes with no Python frame: no function can be named there")
    if changed and all(c is False for c in changed):
        out.append("none of the functions named changed between base and head: the "
                   "growth is in code the change reaches indirectly (more calls, larger "
                   "data, a dependency)")
    return out


def named_line(n: Mapping[str, Any], step: str = "step") -> str:
    """A named function: its self delta and share, then its total (inclusive) figures."""
    own = n.get("self_delta_ms_per_step")
    name, k = unit(max(abs(n["base_ms_per_step"]), abs(n["head_ms_per_step"]),
                       abs(own or 0.0)))
    ci = n.get("ci")
    interval = f" [{ci[0] * k:+.3g}, {ci[1] * k:+.3g}]" if ci else ""
    if ci and ci[0] <= 0 <= ci[1]:
        interval += ", within the turns' noise"
    changed = {True: "; changed", False: "; unchanged", None: ""}[n.get("changed")]
    inside = f"; in {n['inside']}" if n.get("inside") else ""
    share = f"{n['share']:.0%} of the growth"
    # an entry written before self was recorded: its share, beside the total
    first = f"self {own * k:+.3g} {name}/{step}, {share}; " if own is not None else \
        f"{share}; "
    return (f"{_fn(n)}  {first}total {n['base_ms_per_step'] * k:.3g} -> "
            f"{n['head_ms_per_step'] * k:.3g} {name}/{step} "
            f"({n['delta_ms_per_step'] * k:+.3g}{interval}){changed}{inside}")


def lines(profile: Mapping[str, Any], shown: int = SHOWN) -> list[str]:
    """What a profile says, a line each; [] for none (one line for an entry that is not
    a profile: a report file edited or cut short)."""
    if not profile:
        return []
    try:
        return _lines(profile, shown)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return ["no profile: its entry in the report is malformed"]


def _lines(profile: Mapping[str, Any], shown: int) -> list[str]:
    if "error" in profile:
        return [f"no profile: {profile['error']}"]
    work, step = per(profile)
    if "spent" in profile:
        return _spent(profile, shown, work, step)
    out = [f"why (py-spy, {profile.get('pairs')} turn pairs of base and head after the "
           f"verdict; sampled time per {work}, base -> head; {KINDS}):"]
    grew = list(profile.get("grew") or [])
    out += [f"  {named_line(n, step)}" for n in grew[:shown]]
    if not grew:
        out.append("  no function grew by a share worth naming")
    shrank = list(profile.get("shrank") or [])
    if shrank:
        out.append("  shrank (work the change moved):")
        out += [f"  {named_line(n, step)}" for n in shrank[:shown]]
    growth = profile["head_ms_per_step"] - profile["base_ms_per_step"]
    wall = profile["head_wall_ms_per_step"] - profile["base_wall_ms_per_step"]
    name, k = unit(max(abs(growth), abs(wall)))
    moved = f"{growth * k:+.3g} {name}/{step} sampled, {wall * k:+.3g} {name}/{step} wall " \
            "in these turns"
    if growth > 0:
        out.append(f"  the functions named hold {profile.get('explained', 0.0):.0%} of the "
                   f"sampled growth in their self times ({moved})")
    else:  # a share of a fall is no share: the growth is only where the functions show it
        out.append(f"  the sampled time did not grow in these turns ({moved}): the shares "
                   "are of the growth the functions show")
    out += [f"  {note}" for note in profile.get("notes") or []]
    files = profile.get("files") or {}
    if files:
        out.append(f"  flame graphs (collapsed stacks, ns per {work}): "
                   + ", ".join(str(files[k]) for k in ("base", "head", "diff") if k in files))
    return out


def _spent(profile: Mapping[str, Any], shown: int, work: str, step: str) -> list[str]:
    """A single run's profile: where its time per unit of work goes."""
    out = [f"where the time goes (py-spy, {profile.get('turns')} windows after the "
           f"measurement; sampled time per {work}):"]
    for n in list(profile["spent"])[:shown]:
        name, k = unit(n["ms_per_step"])
        inside = f"; in {n['inside']}" if n.get("inside") else ""
        out.append(f"  {_fn(n)}  {n['ms_per_step'] * k:.3g} {name}/{step} "
                   f"({n['share']:.0%}){inside}")
    files = profile.get("files") or {}
    if files.get("run"):
        out.append(f"  flame graph (collapsed stacks, ns per {work}): {files['run']}")
    return out
