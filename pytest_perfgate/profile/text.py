"""The lines a failure, the markdown report and bisect show of a profile (its JSON entry)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SHOWN = 5


def _fn(n: Mapping[str, Any]) -> str:
    where = n.get("where") or ""
    return f"{n.get('function')} ({where})" if where else str(n.get("function"))


def unit(ms: float) -> tuple[str, float]:
    """The unit that shows ``ms`` (per step) with a few digits: ms, us or ns."""
    ms = abs(ms)
    return ("ms", 1.0) if ms >= 0.1 else ("us", 1e3) if ms >= 1e-4 else ("ns", 1e6)


def _line(n: Mapping[str, Any]) -> str:
    name, k = unit(max(abs(n["base_ms_per_step"]), abs(n["head_ms_per_step"])))
    ci = n.get("ci")
    interval = f" [{ci[0] * k:+.3g}, {ci[1] * k:+.3g}]" if ci else ""
    changed = {True: ", changed", False: ", unchanged", None: ""}[n.get("changed")]
    if ci and ci[0] <= 0 <= ci[1]:
        changed += ", within the turns' noise"
    inside = f"; in {n['inside']}" if n.get("inside") else ""
    return (f"{_fn(n)}  {n['base_ms_per_step'] * k:.3g} -> {n['head_ms_per_step'] * k:.3g} "
            f"{name}/step ({n['delta_ms_per_step'] * k:+.3g}{interval}, {n['share']:.0%} of "
            f"the growth{changed}){inside}")


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
    if "spent" in profile:
        return _spent(profile, shown)
    out = [f"why (py-spy, {profile.get('pairs')} turn pairs of base and head after the "
           "verdict; sampled time per env-step, base -> head):"]
    grew = list(profile.get("grew") or [])
    out += [f"  {_line(n)}" for n in grew[:shown]]
    if not grew:
        out.append("  no function grew by a share worth naming")
    shrank = list(profile.get("shrank") or [])
    if shrank:
        out.append("  shrank (work the change moved):")
        out += [f"  {_line(n)}" for n in shrank[:shown]]
    growth = profile["head_ms_per_step"] - profile["base_ms_per_step"]
    wall = profile["head_wall_ms_per_step"] - profile["base_wall_ms_per_step"]
    name, k = unit(max(abs(growth), abs(wall)))
    moved = f"{growth * k:+.3g} {name}/step sampled, {wall * k:+.3g} {name}/step wall in " \
            "these turns"
    if growth > 0:
        out.append(f"  the functions named hold {profile.get('explained', 0.0):.0%} of the "
                   f"sampled growth ({moved})")
    else:  # a share of a fall is no share: the growth is only where the functions show it
        out.append(f"  the sampled time did not grow in these turns ({moved}): the shares "
                   "are of the growth the functions show")
    out += [f"  {note}" for note in profile.get("notes") or []]
    files = profile.get("files") or {}
    if files:
        out.append("  flame graphs (collapsed stacks, ns per env-step): "
                   + ", ".join(str(files[k]) for k in ("base", "head", "diff") if k in files))
    return out


def _spent(profile: Mapping[str, Any], shown: int) -> list[str]:
    """A single run's profile: where its time per env-step goes."""
    out = [f"where the time goes (py-spy, {profile.get('turns')} windows after the "
           "measurement; sampled time per env-step):"]
    for n in list(profile["spent"])[:shown]:
        name, k = unit(n["ms_per_step"])
        inside = f"; in {n['inside']}" if n.get("inside") else ""
        out.append(f"  {_fn(n)}  {n['ms_per_step'] * k:.3g} {name}/step "
                   f"({n['share']:.0%}){inside}")
    files = profile.get("files") or {}
    if files.get("run"):
        out.append(f"  flame graph (collapsed stacks, ns per env-step): {files['run']}")
    return out
