"""The differential profile's parts on their own: py-spy's raw format read into frames
both sides share, the subtraction per function and env-step, which functions a diff
touched, the lines shown, the option, and py-spy attached to a real process (sampled,
stopped; missing or refused, a ProfilerUnavailable naming why)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from pytest_perfgate.profile import text as profile_text
from pytest_perfgate.profile.attribute import Turn, attribute
from pytest_perfgate.profile.changed import Changes
from pytest_perfgate.profile.spy import ENV, ProfilerUnavailable, Recording, SpyConfig
from pytest_perfgate.profile.stacks import NO_FRAME, UNKNOWN, Frame, diff_folded, folded, parse
from pytest_perfgate.session.options import OptionError, Options, parse_profile

ROOT_B, ROOT_H = Path("/tmp/wt/base-x"), Path("/home/u/proj")
CMD = 'process 4242:"python -c import sys; sys.exit(0) x.py"'


def raw(root: Path, lines: dict[str, int]) -> str:
    return "".join(f"{CMD};{stack.format(root=root)} {n}\n" for stack, n in lines.items())


# --- stacks ----------------------------------------------------------------------------------

def test_frames_of_base_and_head_are_named_alike() -> None:
    line = ("0x7f01 (/usr/lib/libc.so.6);<module> ({root}/perf/t.py:1);"
            "act ({root}/perf/policy.py:14);_mean (/v/lib/python3.11/site-packages/numpy/"
            "_core/_methods.py:115);array_mean (/v/lib/python3.11/site-packages/numpy/_core/"
            "_umath.so)")
    b = parse(raw(ROOT_B, {line: 3}), (ROOT_B,))
    h = parse(raw(ROOT_H, {line.replace(":14)", ":16)"): 2}), (ROOT_H,))
    (sb,), (sh,) = b, h
    assert sb == sh  # a function whose first line moved is the same function
    assert [str(f) for f in sh] == [
        f"{UNKNOWN} (libc.so.6)", "<module> (perf/t.py:1)", "act (perf/policy.py:16)",
        "_mean (numpy/_core/_methods.py:115)", "array_mean (numpy/_core/_umath.so)"]
    assert [f.ours for f in sh] == [False, True, True, False, False]
    assert sh[4].native and not sh[2].native


def test_a_command_line_with_semicolons_and_garbage_lines() -> None:
    text = (f"{CMD};f (/home/u/proj/a.py:3) 5\n"
            "not a stack line\n"
            f"{CMD} 7\n"              # a sample with no Python frame
            "cut-off f (/home/u/proj/a.py:3\n"
            'process 1:"sh";thread (0x1);g (/home/u/proj/a.py:9) x\n')
    got = parse(text, (ROOT_H,))
    assert got == Counter({(Frame("f", "a.py", 3, True),): 5, (Frame(NO_FRAME, ""),): 7})


def test_a_comprehension_is_its_function_on_every_python() -> None:
    """3.11 gives a comprehension a frame, 3.12 inlines it: both name the function."""
    on_311 = ("act ({root}/p.py:14);clip ({root}/p.py:6);clip.<locals>.<listcomp> "
              "({root}/p.py:9);min (builtins.so)")
    got = parse(raw(ROOT_H, {on_311: 4, on_311.replace("<listcomp>", "<genexpr>"): 1,
                             "act ({root}/p.py:14);clip ({root}/p.py:6);min (builtins.so)": 2,
                             "act ({root}/p.py:14);<listcomp> ({root}/p.py:20)": 3,
                             "act ({root}/p.py:14);other.<locals>.<listcomp> ({root}/p.py:30)"
                             : 5}), (ROOT_H,))
    act, clip = Frame("act", "p.py", 14, True), Frame("clip", "p.py", 6, True)
    assert got == Counter({(act, clip, Frame("min", "builtins.so")): 7, (act,): 3,
                           (act, Frame("other.<locals>.<listcomp>", "p.py", 30, True)): 5})


def test_folded_files() -> None:
    f, g = Frame("f", "a.py", 1, True), Frame("g", "a.py", 5, True)
    assert folded({(f,): 2, (f, g): 0}, 1000) == "f (a.py:1) 2000\n"
    assert diff_folded({(f,): 1}, {(f, g): 3}, 10, 20) == \
        "f (a.py:1) 10 0\nf (a.py:1);g (a.py:5) 0 60\n"


# --- the subtraction --------------------------------------------------------------------------

M, A, N, C = (Frame("<module>", "t.py", 1, True), Frame("act", "policy.py", 14, True),
              Frame("normalize_obs", "policy.py", 6, True), Frame("clip", "policy.py", 10, True))
MEAN = Frame("_mean", "numpy/_core/_methods.py", 115)
TANH = Frame("tanh_kernel", "numpy/_core/_umath.so")


def turns(extra: Counter[tuple[Frame, ...]], n: int = 6) -> list[tuple[Turn, Turn]]:
    """Six turn pairs of 1000 steps at 100 Hz; head = base + ``extra`` samples per turn,
    with a little scatter so the interval is not empty."""
    base = Counter({(M, A, N, MEAN): 40, (M, A, C): 20, (M, A): 10})
    out = []
    for i in range(n):
        wiggle = Counter({(M, A): i % 2})
        head = base + extra + wiggle
        out.append((Turn(base + Counter({(M, A): (i + 1) % 2}), 1000, 0.8),
                    Turn(head, 1000, 0.8 * sum(head.values()) / sum(base.values()))))
    return out


def changed_only(*fs: Frame):
    return lambda f: f in fs if f.ours else False


def test_the_changed_function_is_named_with_where_its_time_went() -> None:
    pairs = turns(Counter({(M, A, N, TANH): 30}))  # normalize_obs now calls a kernel more
    att = attribute(pairs, 100.0, changed_only(N))
    top = att.grew[0]
    assert top.frame == N and top.changed is True and top.inside == TANH
    assert top.base_ms == pytest.approx(0.4) and top.head_ms == pytest.approx(0.7)
    assert top.delta_ms == pytest.approx(0.3)
    assert top.ci is not None and top.ci[0] - 1e-9 <= 0.3 <= top.ci[1] + 1e-9
    assert top.share == pytest.approx(30 / 30.5, rel=0.05)  # the wiggle is the rest
    assert att.explained > 0.9 and not att.shrank
    assert [n.frame for n in att.grew] == [N]  # not act, <module>: they did not change


def test_self_time_of_a_changed_function() -> None:
    att = attribute(turns(Counter({(M, A, C): 25})), 100.0, changed_only(C))
    assert att.grew[0].frame == C and att.grew[0].inside is None


def test_without_a_changed_function_the_nearest_of_ours_is_named_unchanged() -> None:
    att = attribute(turns(Counter({(M, A, N, MEAN): 30})), 100.0, changed_only())
    assert att.grew[0].frame == N and att.grew[0].changed is False
    assert att.grew[0].inside == MEAN
    assert any("none of the functions named changed" in n for n in att.notes)


def test_moved_work_shows_as_shrank() -> None:
    b_extra = Counter({(M, A, C): 10})
    pairs = [(Turn(b.stacks + b_extra, b.steps, b.wall_s), h)
             for b, h in turns(Counter({(M, A, N, MEAN): 30}))]
    att = attribute(pairs, 100.0, changed_only(N, C))
    assert att.grew[0].frame == N
    assert att.shrank and att.shrank[0].frame == C and att.shrank[0].delta_ms < 0


def test_a_drop_in_waiting_is_said_to_be_waiting() -> None:
    pairs = [(Turn(Counter({(M, A): 50}), 1000, 0.5),
              Turn(Counter({(M, A): 35 + i % 2}), 700, 0.5))
             for i in range(6)]  # as busy per step, 30% fewer steps: it waited
    att = attribute(pairs, 100.0, changed_only(A))
    assert att.head_wall_ms > att.base_wall_ms
    assert any("waiting" in n for n in att.notes)


def test_a_function_that_grew_on_one_path_and_shrank_on_another_is_listed_once_net() -> None:
    b_extra = Counter({(M, A, C, MEAN): 10})  # clip moved part of its work to a kernel
    pairs = [(Turn(b.stacks + b_extra, b.steps, b.wall_s), h)
             for b, h in turns(Counter({(M, A, C, TANH): 30}))]
    att = attribute(pairs, 100.0, changed_only(C))
    assert [n.frame for n in att.grew] == [C] and not att.shrank
    assert att.grew[0].inside == TANH
    assert att.grew[0].share == pytest.approx(1.0, abs=0.05)  # 20 of the 20 it grew, net


def test_turns_that_did_not_show_the_drop_say_so_and_no_share_of_a_fall() -> None:
    pairs = [(Turn(Counter({(M, A, N): 50, (M, A, C): 40 + 4 * (i % 2)}), 1000, 0.9),
              Turn(Counter({(M, A, N): 56, (M, A, C): 30 + 4 * (i % 2)}), 1000,
                   0.9 + (0.05 if i % 2 else -0.05)))
             for i in range(6)]  # N +6, C -10 in samples; wall alike in the mean
    att = attribute(pairs, 100.0, changed_only(N))
    assert att.grew[0].frame == N and att.growth_ms < 0
    assert not any("waiting" in n for n in att.notes)
    (note,) = [n for n in att.notes if "did not show the drop" in n]
    assert note.startswith("these turns did not show the drop beyond their noise (each step "
                           "+0 ms [")
    text = "\n".join(profile_text.lines(att.to_json()))
    assert "the sampled time did not grow in these turns (-40 us/step sampled, +0 us/step " \
           "wall in these turns): the shares are of the growth the functions show" in text
    assert "of the sampled growth" not in text


def test_growth_without_symbols_is_said() -> None:
    att = attribute(turns(Counter({(Frame(NO_FRAME, ""),): 30})), 100.0, changed_only())
    assert any("without symbols" in n for n in att.notes)


# --- what the diff touched --------------------------------------------------------------------

def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@e", "-c", "user.name=t", *args], cwd=repo,
                   check=True, capture_output=True)


def test_changes_from_git(tmp_path: Path) -> None:
    src = ("import numpy\n\n\n@staticmethod\ndef a(x):\n    return x\n\n\n"
           "def b(x):\n    y = x\n    return y\n")
    (tmp_path / "p.py").write_text(src)
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "p.py")
    git(tmp_path, "commit", "-qm", "base")
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True,
                          text=True).stdout.strip()
    (tmp_path / "p.py").write_text(src.replace("    y = x\n", "    y = x * 2\n    y = y / 2\n"))
    (tmp_path / "new.py").write_text("def c():\n    pass\n")  # untracked: changed throughout
    ch = Changes(tmp_path, base)
    assert ch.function_changed("p.py", 9) is True      # b: its body changed
    assert ch.function_changed("p.py", 4) is False     # a (decorator's line): untouched
    assert ch.function_changed("p.py", 10) is True     # a comprehension on b's line 10
    assert ch.function_changed("new.py", 1) is True
    assert ch.function_changed("other.py", 3) is False
    assert Changes(tmp_path, "0" * 40).unknown is not None


# --- what is shown ---------------------------------------------------------------------------

def test_rendered_lines() -> None:
    att = attribute(turns(Counter({(M, A, N, TANH): 30})), 100.0, changed_only(N))
    text = "\n".join(profile_text.lines({**att.to_json(), "files": {"base": "b.folded",
                                                              "diff": "d.folded"}}))
    assert "normalize_obs (policy.py:6)  self +0.3 ms/step, 100% of the growth; total 0.4 " \
           "-> 0.7 ms/step (+0.3 [" in text
    assert "]); changed; in tanh_kernel (numpy/_core/_umath.so)" in text
    assert "flame graphs (collapsed stacks, ns per env-step): b.folded, d.folded" in text
    assert profile_text.lines({"error": "py-spy is not installed"}) == [
        "no profile: py-spy is not installed"]
    assert profile_text.lines({}) == []


def test_self_and_total_are_shown_apart_and_the_shares_add_up() -> None:
    """act grew in its own lines and through normalize_obs, both changed: act's total holds
    normalize_obs's growth, its self and its share do not, so the shares add up."""
    att = attribute(turns(Counter({(M, A): 20, (M, A, N, TANH): 30})), 100.0,
                    changed_only(A, N))
    assert [(n.frame, n.self_ms, n.delta_ms) for n in att.grew] == [
        (N, pytest.approx(0.3), pytest.approx(0.3)), (A, pytest.approx(0.2),
                                                      pytest.approx(0.5))]
    assert sum(n.share for n in att.grew) == pytest.approx(att.explained) == 1.0
    # a caller's total is its self and what its named callees hold below it
    assert att.grew[1].delta_ms == pytest.approx(att.grew[1].self_ms + att.grew[0].delta_ms)
    assert profile_text.lines(att.to_json()) == [
        "why (py-spy, 6 turn pairs of base and head after the verdict; sampled time per "
        "env-step, base -> head; self: without the functions named on lines of their own; "
        "total: with all it calls; shares are of self):",
        "  normalize_obs (policy.py:6)  self +0.3 ms/step, 60% of the growth; total 0.4 -> "
        "0.7 ms/step (+0.3 [+0.3, +0.3]); changed; in tanh_kernel (numpy/_core/_umath.so)",
        "  act (policy.py:14)  self +0.2 ms/step, 40% of the growth; total 0.705 -> 1.21 "
        "ms/step (+0.5 [+0.489, +0.511]); changed",
        "  the functions named hold 100% of the sampled growth in their self times (+0.5 "
        "ms/step sampled, +0.577 ms/step wall in these turns)"]


def test_a_self_never_holds_more_than_the_samples_under_the_function() -> None:
    """normalize_obs grew by 30 samples at one call path and shrank by one, too little to
    be a path of its own: its self is the 29 it grew in all, as its total is."""
    b_extra = Counter({(M, A, N, MEAN): 1})
    pairs = [(Turn(b.stacks + b_extra, b.steps, b.wall_s), h)
             for b, h in turns(Counter({(M, A, N, TANH): 30}))]
    (top,) = attribute(pairs, 100.0, changed_only(N)).grew
    assert top.frame == N and top.self_ms == pytest.approx(top.delta_ms) == pytest.approx(0.29)
    assert top.share == pytest.approx(1.0)


def test_the_times_are_per_the_benchmarks_own_unit_of_work() -> None:
    att = attribute(turns(Counter({(M, A, C): 25})), 100.0, changed_only(C))
    per_call = profile_text.lines({**att.to_json(), "per": "call", "files": {"base": "b"}})
    assert per_call[0].startswith("why (py-spy, 6 turn pairs of base and head after the "
                                  "verdict; sampled time per call, base -> head; self: ")
    assert per_call[1:] == [
        "  clip (policy.py:10)  self +0.25 ms/call, 100% of the growth; total 0.2 -> 0.45 "
        "ms/call (+0.25 [+0.25, +0.25]); changed",
        "  the functions named hold 100% of the sampled growth in their self times (+0.25 "
        "ms/call sampled, +0.291 ms/call wall in these turns)",
        "  flame graphs (collapsed stacks, ns per call): b"]
    spent = {"turns": 6, "per": "call", "files": {"run": "r.folded"},
             "spent": [{"function": "f", "where": "a.py:1", "ms_per_step": 0.0017,
                        "share": 0.9, "inside": None}]}
    assert profile_text.lines(spent) == [
        "where the time goes (py-spy, 6 windows after the measurement; sampled time per "
        "call):", "  f (a.py:1)  1.7 us/call (90%)",
        "  flame graph (collapsed stacks, ns per call): r.folded"]
    waited = [(Turn(Counter({(M, A): 50}), 1000, 0.5), Turn(Counter({(M, A): 35 + i % 2}),
                                                           700, 0.5)) for i in range(6)]
    assert attribute(waited, 100.0, changed_only(A), per="call").notes == (
        "the sampled time changed by +0.00714 ms/call while each call took 0.214 ms longer: "
        "most of the drop is waiting (a lock, the GPU, I/O, another process), which a "
        "sampling profiler does not see as a function's time",)
    # an entry recorded before either was: per env-step, its share beside the total
    older = att.to_json()
    older["grew"] = [{k: v for k, v in n.items() if k != "self_delta_ms_per_step"}
                     for n in older["grew"]]
    assert profile_text.lines(older)[1] == (
        "  clip (policy.py:10)  100% of the growth; total 0.2 -> 0.45 ms/step (+0.25 [+0.25, "
        "+0.25]); changed")


def test_the_option() -> None:
    assert parse_profile(" Always ") == "always" and parse_profile("off") == "off"
    assert Options.resolve(True, {"profile": True}, {}, {}).profile == "always"
    assert Options.resolve(True, {}, {"profile": "false"}, {}).profile == "off"
    assert Options.resolve(True, {}, {}, {"PERFGATE_PROFILE": "regression"}).profile == \
        "regression"
    assert Options().profile == "regression"
    with pytest.raises(OptionError, match=r"'sometimes' is not when to profile: use "
                                          r"regression .* always .* or off"):
        parse_profile("sometimes")


# --- py-spy on a real process -----------------------------------------------------------------

LOOP = """
import sys, time
def busy_function():
    t = time.perf_counter()
    while time.perf_counter() - t < 0.01:
        pass
print("ready", flush=True)
while True:
    busy_function()
"""


@pytest.fixture
def looping(tmp_path: Path):
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    yield proc, tmp_path
    proc.kill()
    proc.wait(10)
    proc.stdout.close()


@pytest.mark.usefixtures("py_spy_attaches")
def test_a_recording_samples_the_process_by_its_functions(looping) -> None:
    proc, where = looping
    rec = Recording(proc.pid, where / "out.raw", SpyConfig(rate=100, native=False))
    time.sleep(1.0)
    stacks = parse(rec.stop(), (where,))
    funcs = Counter()
    for stack, n in stacks.items():
        for f in set(stack):
            funcs[f.name] += n
    assert funcs["busy_function"] >= 20, stacks  # ~100 at 100 Hz: a generous margin
    assert rec.proc.returncode is not None  # py-spy ended


def test_no_py_spy_is_unavailable_naming_the_fix(looping, monkeypatch) -> None:
    proc, where = looping
    monkeypatch.setenv(ENV, "")
    with pytest.raises(ProfilerUnavailable, match=r"PERFGATE_PY_SPY='' is not an executable"):
        Recording(proc.pid, where / "out.raw")
    monkeypatch.delenv(ENV)
    monkeypatch.setattr(sys, "executable", str(where / "python"))
    monkeypatch.setenv("PATH", str(where))
    with pytest.raises(ProfilerUnavailable, match=r"py-spy is not installed: pip install py-spy"):
        Recording(proc.pid, where / "out.raw")


def test_a_refused_attach_says_how_to_allow_it(looping, monkeypatch) -> None:
    proc, where = looping
    fake = where / "py-spy"
    fake.write_text("#!/bin/sh\necho 'Error: Permission Denied: Try running again with "
                    "elevated permissions by going sudo !!'\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv(ENV, str(fake))
    with pytest.raises(ProfilerUnavailable, match=r"run as root, give the container "
                                                  r"SYS_PTRACE"):
        Recording(proc.pid, where / "out.raw")


def test_a_sampler_that_never_starts_is_ended(looping, monkeypatch) -> None:
    from pytest_perfgate.profile import spy

    proc, where = looping
    fake = where / "py-spy"
    fake.write_text("#!/bin/sh\nexec sleep 600\n")
    fake.chmod(0o755)
    monkeypatch.setenv(ENV, str(fake))
    monkeypatch.setattr(spy, "READY_TIMEOUT_S", 1.0)
    t = time.monotonic()
    with pytest.raises(ProfilerUnavailable, match="did not start sampling within 1 s"):
        Recording(proc.pid, where / "out.raw")
    assert time.monotonic() - t < 30  # bounded, and the sleeping fake was killed
    out = subprocess.run(["pgrep", "-f", f"{fake}"], capture_output=True, text=True)
    assert out.stdout.strip() == "" or not os.path.exists(f"/proc/{out.stdout.split()[0]}")


def test_growth_spread_over_a_library_s_functions_names_the_library() -> None:
    lib = [Frame(f"mj_{k}", "mujoco/libmujoco.so") for k in range(25)]
    extra = Counter({(M, A, f): 2 for f in lib})  # each under 5% of the growth: no site
    att = attribute(turns(extra), 100.0, changed_only(A))
    assert att.grew[0].frame == A
    assert att.grew[0].inside == Frame("[native code]", "mujoco/libmujoco.so")
