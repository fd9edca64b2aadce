"""perfgate bisect's search against a fake probe (no timing), its wording, and its input
checks on a scratch repository (before any worktree is made)."""

from __future__ import annotations

import math
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_perfgate.cli import main
from pytest_perfgate.cli.bisect import wording
from pytest_perfgate.cli.bisect.probe import RangeError, commit_range
from pytest_perfgate.cli.bisect.search import (
    Bisector,
    Probe,
    Reading,
    Status,
    Step,
    Stop,
    estimate_probes,
)

THRESHOLD = 0.02
BENCH = "test_perf.test_walk"


class FakeProbe:
    """Throughput per commit is the product of the steps at or before it; a probe says
    REGRESSION when candidate / base < 1 - threshold. ``skip`` commits have no verdict;
    ``noisy`` ones are INCONCLUSIVE below ``noisy[c]`` turns."""

    def __init__(self, commits: Sequence[str], steps: dict[str, float],
                 skip: Sequence[str] = (), noisy: dict[str, int] | None = None,
                 good: str = "G") -> None:
        self.order = [good, *commits]
        self.steps = steps
        self.skip = set(skip)
        self.noisy = noisy or {}
        self.calls: list[tuple[str, str, int]] = []

    def speed(self, c: str) -> float:
        i = self.order.index(c)
        return math.prod(self.steps.get(x, 1.0) for x in self.order[1:i + 1])

    def __call__(self, commit: str, base: str, turns: int) -> Probe:
        self.calls.append((commit, base, turns))
        if commit in self.skip:
            return Probe(commit, base, turns, failure="pytest measured nothing (exit 4): "
                         "ERROR: file or directory not found: test_perf.py")
        if turns < self.noisy.get(commit, 0) or turns < self.noisy.get(base, 0):
            r = Reading("INCONCLUSIVE", 0.99, (0.9, 1.08), "noise hid the threshold")
            return Probe(commit, base, turns, {BENCH: r}, command=f"repro {commit}")
        ratio = self.speed(commit) / self.speed(base)
        out = ("REGRESSION" if ratio < 1 - THRESHOLD else
               "IMPROVEMENT" if ratio > 1 / (1 - THRESHOLD) else "OK")
        r = Reading(out, ratio, (ratio * 0.99, ratio * 1.01), "")
        return Probe(commit, base, turns, {BENCH: r}, seconds=30.0,
                     command=f"repro {commit} {base}")


def commits(n: int) -> list[str]:
    return [f"c{i:02d}" for i in range(n)]


def bisect(cs: list[str], probe: FakeProbe, **kw: int) -> tuple[Bisector, object]:
    b = Bisector("G", cs[-1], cs, probe, turns=96, **kw)
    return b, b.run()


@pytest.mark.parametrize("at", range(16))
def test_one_step_is_named_wherever_it_is(at: int) -> None:
    cs = commits(16)
    probe = FakeProbe(cs, {cs[at]: 0.95})
    _, r = bisect(cs, probe)
    assert r.stop is Stop.DONE
    (step,) = r.steps
    assert step.exact and step.first_bad == cs[at]
    assert step.last_good == (cs[at - 1] if at else "G")
    assert step.probe.readings[BENCH].ratio == pytest.approx(0.95)  # its own step
    # BAD vs GOOD, a binary search over 15 candidates, the step's own probe (reused when
    # its neighbour is GOOD), BAD vs the step (none when the step is BAD).
    assert len(r.probes) <= estimate_probes(16)
    assert all(base in ("G", step.last_good, step.first_bad) for _, base, _ in probe.calls)


def test_search_probes_against_the_known_good_end() -> None:
    cs = commits(8)
    probe = FakeProbe(cs, {cs[5]: 0.9})
    bisect(cs, probe)
    search = [c for c in probe.calls if c[0] != cs[-1]][:-1]  # before the step's own probe
    assert {base for _, base, _ in search} == {"G"}


def test_two_steps_ten_commits_apart_are_both_reported() -> None:
    cs = commits(32)
    probe = FakeProbe(cs, {cs[9]: 0.97, cs[19]: 0.97})
    _, r = bisect(cs, probe)
    assert [s.first_bad for s in r.steps] == [cs[9], cs[19]]
    assert [s.last_good for s in r.steps] == [cs[8], cs[18]]
    assert all(s.own_status is Status.BAD for s in r.steps)
    assert r.stop is Stop.DONE


def test_a_skipped_commit_is_stepped_over_and_said() -> None:
    cs = commits(16)
    probe = FakeProbe(cs, {cs[11]: 0.9}, skip=[cs[7]])  # the first midpoint
    _, r = bisect(cs, probe)
    assert [s.first_bad for s in r.steps] == [cs[11]]
    assert r.steps[0].exact
    assert cs[7] in r.skipped and "file or directory not found" in r.skipped[cs[7]]


def test_a_step_next_to_skipped_commits_is_a_range_not_a_guess() -> None:
    cs = commits(16)
    probe = FakeProbe(cs, {cs[9]: 0.9}, skip=[cs[8], cs[7]])
    _, r = bisect(cs, probe)
    (step,) = r.steps
    assert not step.exact
    assert step.candidates == (cs[7], cs[8], cs[9]) and step.last_good == cs[6]
    lines = wording.summary(r, {"G": "GOOD v1"}, {cs[9]: "slow it down"}, THRESHOLD, 100)
    text = "\n".join(lines)
    assert "the step is in one of 3 commits after c06 (those before the last could not " \
           "be judged, so bisect does not guess):" in text
    assert '  c09 "slow it down"' in text
    assert "its own step against the last good commit c06: test_perf.test_walk throughput " \
           "ratio 0.900 [0.891-0.909], REGRESSION (threshold 2%, 96 turns)" in text
    assert "skipped c08: pytest measured nothing (exit 4)" in text


def test_an_inconclusive_probe_gets_more_turns_then_counts_as_unknown() -> None:
    cs = commits(8)
    probe = FakeProbe(cs, {cs[5]: 0.9}, noisy={cs[3]: 400})  # 96, 192, 384: never enough
    _, r = bisect(cs, probe)
    assert [t for c, _, t in probe.calls if c == cs[3]] == [96, 192, 384]
    assert cs[3] in r.unknown
    assert [s.first_bad for s in r.steps] == [cs[5]]
    text = "\n".join(wording.summary(r, {}, {}, THRESHOLD, 5))
    assert "inconclusive c03 after 3 probes (96/192/384 turns): test_perf.test_walk " \
           "throughput ratio 0.990 [0.900-1.080], INCONCLUSIVE" in text


def test_more_turns_can_settle_an_inconclusive_probe() -> None:
    cs = commits(8)
    probe = FakeProbe(cs, {cs[3]: 0.9}, noisy={cs[3]: 150})
    _, r = bisect(cs, probe)
    assert [s.first_bad for s in r.steps] == [cs[3]] and not r.unknown
    assert (cs[3], "G", 192) in probe.calls


def test_an_inconclusive_neighbour_leaves_a_range() -> None:
    cs = commits(8)
    probe = FakeProbe(cs, {cs[4]: 0.9}, noisy={cs[3]: 10_000})
    _, r = bisect(cs, probe, retries=1)
    (step,) = r.steps
    assert step.candidates == (cs[3], cs[4]) and step.last_good == cs[2]


def test_good_and_bad_that_do_not_differ_stop_before_bisecting() -> None:
    cs = commits(8)
    probe = FakeProbe(cs, {cs[4]: 0.99})
    _, r = bisect(cs, probe)
    assert r.stop is Stop.NO_DIFFERENCE and not r.steps
    # the user's claim contradicted: measured again with twice the turns before stopping
    assert probe.calls == [(cs[-1], "G", 96), (cs[-1], "G", 192)]
    (line, again, count) = wording.summary(r, {"G": "v1", cs[-1]: "HEAD"}, {}, 0.02, 40)
    assert line == ("perfgate bisect: BAD HEAD (c07) is not slower than GOOD v1 (G) by "
                    "more than the threshold (2%): test_perf.test_walk throughput ratio "
                    "0.990 [0.980-1.000], OK; nothing to bisect. A smaller step needs a "
                    "lower --threshold or more --turns.")
    assert again.startswith("  measured twice, the second time with 192 turns per side "
                            "(first: test_perf.test_walk throughput ratio 0.990 [0.980-1.000]"
                            ", OK): if BAD is known to be slower, another load on this "
                            "machine may be hiding it")
    assert count == "2 probes in 40 s"
    assert wording.exit_status(r) == wording.EXIT_NOT_FOUND


def test_an_inconclusive_endpoint_stops_and_says_so() -> None:
    cs = commits(8)
    probe = FakeProbe(cs, {cs[4]: 0.9}, noisy={cs[-1]: 10_000})
    _, r = bisect(cs, probe)
    assert r.stop is Stop.ENDPOINT_INCONCLUSIVE and len(probe.calls) == 3
    (line, _) = wording.summary(r, {}, {}, 0.02, 40)
    assert line.startswith("perfgate bisect: whether BAD c07 is slower than GOOD G stayed "
                           "inconclusive after 3 probes (96/192/384 turns) "
                           "(test_perf.test_walk: noise hid the threshold); not bisecting")


def test_an_unmeasurable_bad_end_is_an_infrastructure_error() -> None:
    cs = commits(4)
    _, r = bisect(cs, FakeProbe(cs, {}, skip=[cs[-1]]))
    assert r.stop is Stop.ENDPOINT_UNMEASURED
    assert wording.exit_status(r) == wording.EXIT_INFRA
    text = "\n".join(wording.summary(r, {}, {}, 0.02, 1))
    assert "BAD c03 against GOOD G could not be measured: pytest measured nothing" in text


def test_a_test_missing_at_good_says_so() -> None:
    cs = commits(4)
    missing = Reading("NO BASELINE", message="the base revision G has no test test_walk")
    r = Bisector("G", cs[-1], cs, lambda c, b, t: Probe(c, b, t, {BENCH: missing}), 96).run()
    assert r.stop is Stop.ENDPOINT_UNMEASURED
    (line, *_) = wording.summary(r, {}, {}, 0.02, 1)
    assert line == ("perfgate bisect: BAD c03 against GOOD G could not be measured: "
                    "test_perf.test_walk NO BASELINE (the base revision G has no test "
                    "test_walk); check that the tests select a perf test that exists at both "
                    "ends")


def test_a_spread_slowdown_reports_the_crossing_honestly() -> None:
    cs = commits(8)
    probe = FakeProbe(cs, {c: 0.99 for c in cs})  # 1% per commit, each under 2%
    _, r = bisect(cs, probe)
    step = r.steps[0]
    assert step.first_bad == cs[2] and step.own_status is Status.GOOD
    text = "\n".join(wording.step_lines(step, {}, {}, 0.02))
    assert "its own step is below it: the slowdown is spread over several smaller steps" \
        in text


def test_the_probe_limit_ends_the_run() -> None:
    cs = commits(32)
    _, r = bisect(cs, FakeProbe(cs, {cs[20]: 0.9}), max_probes=3)
    assert r.stop is Stop.PROBE_LIMIT and len(r.probes) == 3


def test_progress_lines_and_the_estimate() -> None:
    seen: list[str] = []
    cs = commits(8)
    probe = FakeProbe(cs, {cs[5]: 0.9})

    def on(n: int, c: str, base: str, turns: int, p: Probe | None,
           status: Status | None) -> None:
        seen.append(wording.probe_line(n, 5, c, base, turns, p, {"G": "v1"},
                                       (BENCH,), 65.0, status))

    Bisector("G", cs[-1], cs, probe, 96, on_probe=on).run()
    assert seen[0] == "[probe 1/~5] c07 against v1 (G), 96 turns per side (elapsed " \
                      "1 min 05 s)"
    assert seen[1] == "[probe 1/~5]   -> slower: test_perf.test_walk throughput ratio " \
                      "0.900 [0.891-0.909], REGRESSION (30 s)"
    assert wording.estimate(12, estimate_probes(12), 29.2, measured=False) == (
        "estimate: ~7 probes (BAD against GOOD, 4 to halve 12 commits, then the step "
        "against its neighbour and BAD against the step) x ~29 s per probe (a guess per "
        "benchmark: 2 sides x turns x turn time, plus ~10 s of start-up and warm-up) = "
        "~3 min 24 s for one step; each further step, skipped commit or inconclusive probe "
        "adds probes")


def test_a_found_step_reads_with_its_reproduce_command() -> None:
    cs = commits(8)
    _, r = bisect(cs, FakeProbe(cs, {cs[5]: 0.9}))
    lines = wording.summary(r, {"G": "v1", cs[-1]: "main"},
                            {cs[5]: "vectorise less"}, 0.02, 200)
    assert lines[0] == ("perfgate bisect: 1 step found between GOOD v1 (G) and BAD main "
                        "(c07) (8 commits, tracked: test_perf.test_walk)")
    assert lines[1] == 'first bad commit: c05 "vectorise less"'
    assert lines[2] == ("  its own step against its parent c04: test_perf.test_walk "
                        "throughput ratio 0.900 [0.891-0.909], REGRESSION (threshold 2%, "
                        "96 turns)")
    assert lines[3] == "  reproduce: repro c05 c04"
    assert wording.exit_status(r) == wording.EXIT_FOUND


# --- input checks on a scratch repository ------------------------------------------------

def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "config", "user.email", "t@example.com")
    git(tmp_path, "config", "user.name", "t")
    for i in range(3):
        (tmp_path / "f.txt").write_text(str(i))
        git(tmp_path, "add", "-A")
        git(tmp_path, "commit", "-qm", f"commit {i}")
    return tmp_path


def test_the_range_is_the_first_parent_commits_oldest_first(repo: Path) -> None:
    good, bad, cs = commit_range(repo, "HEAD~2", "HEAD")
    assert cs == [git(repo, "rev-parse", "HEAD~1"), bad] and good == git(repo, "rev-parse",
                                                                          "HEAD~2")


@pytest.mark.parametrize(("good", "bad", "message"), [
    ("nope", "HEAD", "GOOD 'nope' is not a commit of this repository: give a branch, tag "
     "or hash that `git rev-parse` resolves"),
    ("HEAD~1", "--all", "BAD '--all' is not a commit"),
    ("HEAD", "HEAD~2", "GOOD 'HEAD' ("),
    ("HEAD", "main", "GOOD 'HEAD' and BAD 'main' are the same commit"),
])
def test_bad_input_is_named(repo: Path, good: str, bad: str, message: str) -> None:
    with pytest.raises(RangeError) as e:
        commit_range(repo, good, bad)
    assert message in str(e.value)
    if bad == "HEAD~2":
        assert "is not an ancestor of BAD 'HEAD~2'" in str(e.value)
        assert "(did you swap them?)" in str(e.value)


def test_a_dirty_tree_is_refused(repo: Path) -> None:
    (repo / "f.txt").write_text("changed")
    with pytest.raises(RangeError) as e:
        commit_range(repo, "HEAD~2", "HEAD")
    assert str(e.value).startswith("the working tree has uncommitted changes (f.txt): "
                                   "commit them or check out a clean tree first")


def test_bad_input_is_a_usage_error_before_any_worktree(
        repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    monkeypatch.chdir(repo)
    with pytest.raises(SystemExit) as e:
        main(["bisect", "HEAD", "HEAD~2", "tests/"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "perfgate bisect: error: GOOD 'HEAD' (" in err and "not an ancestor" in err
    assert len(git(repo, "worktree", "list").splitlines()) == 1


def test_good_on_a_merged_branch_bisects_bads_first_parent_line(repo: Path) -> None:
    git(repo, "checkout", "-qb", "side", "HEAD~1")
    (repo / "g.txt").write_text("x")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "side")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge", "side")
    side = git(repo, "rev-parse", "side")
    # GOOD = the merged side commit: BAD's first-parent line after it holds main's own
    # commit 2 and the merge, not the side commit's ancestors.
    _, _, cs = commit_range(repo, side, "HEAD")
    assert cs == [git(repo, "rev-parse", "HEAD~1"), git(repo, "rev-parse", "HEAD")]


def test_options_go_before_good_and_the_rest_goes_to_pytest() -> None:
    from pytest_perfgate.cli import make_parser

    ns = make_parser().parse_args(["bisect", "--threshold", "5%", "v1.2", "HEAD", "perf/",
                                   "-k", "humanoid", "--perfgate-warmup-max=9"])
    assert (ns.good, ns.bad, ns.threshold) == ("v1.2", "HEAD", 0.05)
    assert ns.pytest_args == ["perf/", "-k", "humanoid", "--perfgate-warmup-max=9"]
    assert (ns.turns, ns.turn_time, ns.retries, ns.setup) == (96, 0.1, 2, None)


def test_a_bad_option_value_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["bisect", "--turns", "1", "v1", "HEAD"])
    assert e.value.code == 2
    assert "argument --turns: '1' is too small" in capsys.readouterr().err


# --- the real probe's skips (real pytest and git; nothing is timed) ----------------------

def test_a_commit_without_the_test_or_whose_setup_fails_is_skipped(repo: Path) -> None:
    from pytest_perfgate.cli.bisect.probe import PytestProbe, head_worktree
    from pytest_perfgate.report.readback import read_report

    head = git(repo, "rev-parse", "HEAD")
    with head_worktree(repo) as wt:
        missing = PytestProbe(wt, ["test_perf.py"], read_report)(head, "HEAD~1", 8)
        failing = PytestProbe(wt, ["test_perf.py"], read_report, setup="exit 7")(
            head, "HEAD~1", 8)
        assert git(wt, "rev-parse", "HEAD") == head
    assert missing.failure is not None and missing.status() is Status.SKIP
    assert missing.failure.startswith("pytest measured nothing (exit 4): ")
    assert "file or directory not found: test_perf.py" in missing.failure
    assert missing.command == (f"git checkout --detach {head[:12]} && python -m pytest "
                               "--perfgate '--perfgate-ab=HEAD~1' --perfgate-ab-turns=8 "
                               "test_perf.py")
    assert failing.failure == "the set-up command 'exit 7' failed here (exit 7): "
    assert len(git(repo, "worktree", "list").splitlines()) == 1


def test_an_unknown_rest_says_how_to_search_on() -> None:
    cs = commits(8)
    fake = FakeProbe(cs, {cs[3]: 0.9})
    noise = Reading("INCONCLUSIVE", 0.99, (0.967, 1.012), "")

    def probe(c: str, base: str, turns: int) -> Probe:  # noisy against anything but GOOD
        return fake(c, base, turns) if base in ("G", cs[2]) else Probe(c, base, turns,
                                                                        {BENCH: noise})

    r = Bisector("G", cs[-1], cs, probe, 96).run()
    assert r.stop is Stop.REST_UNKNOWN and [s.first_bad for s in r.steps] == [cs[3]]
    text = "\n".join(wording.summary(r, {cs[-1]: "HEAD"}, {}, 0.02, 9, ["perf/", "-k", "x y"]))
    assert ("whether more steps follow c03 is unknown: BAD against it was inconclusive "
            "(test_perf.test_walk throughput ratio 0.990 [0.967-1.012], INCONCLUSIVE); to "
            "search on from it: perfgate bisect --turns 768 c03 HEAD perf/ -k 'x y'") in text
    assert wording.exit_status(r) == wording.EXIT_FOUND


class NarrowProbe(FakeProbe):
    """As FakeProbe, but ``noisy`` commits are INCONCLUSIVE with a +-3% interval around
    their true ratio (what 96 turns gave on the shared runner at load average ~5)."""

    def __call__(self, commit: str, base: str, turns: int) -> Probe:
        if commit not in self.noisy:
            return super().__call__(commit, base, turns)
        self.calls.append((commit, base, turns))
        ratio = self.speed(commit) / self.speed(base)
        r = Reading("INCONCLUSIVE", ratio, (ratio * 0.97, ratio * 1.03), "")
        return Probe(commit, base, turns, {BENCH: r})


def test_an_inconclusive_candidate_clearly_above_halfway_counts_as_not_slower() -> None:
    cs = commits(16)
    noisy = {c: 1 for c in cs[:8]}  # every unchanged commit is INCONCLUSIVE at 2%
    probe = NarrowProbe(cs, {cs[8]: 0.92}, noisy=noisy)
    r = Bisector("G", cs[-1], cs, probe, 96, threshold=THRESHOLD).run()
    assert [s.first_bad for s in r.steps] == [cs[8]] and r.steps[0].exact
    assert not r.unknown and all(t == 96 for _, _, t in probe.calls)  # no retries
    # Without the level the same probes are retried and stepped over: a range, not a name.
    again = NarrowProbe(cs, {cs[8]: 0.92}, noisy=noisy)
    r2 = Bisector("G", cs[-1], cs, again, 96).run()
    assert not r2.steps[0].exact and cs[7] in r2.unknown


def test_halfway_never_decides_between_two_steps() -> None:
    cs = commits(32)
    # Between the two 3% steps a candidate sits at 0.97, on the halfway level of BAD's
    # 0.941: its +-3% interval straddles it, so it is retried, never called good.
    noisy = {c: 1 for c in cs[9:19]}
    probe = NarrowProbe(cs, {cs[9]: 0.97, cs[19]: 0.97}, noisy=noisy)
    r = Bisector("G", cs[-1], cs, probe, 96, threshold=THRESHOLD).run()
    # None of them is called good (which would have hidden the first step): when all stay
    # inconclusive, the result is the honest range holding both steps.
    assert set(r.unknown) == set(cs[9:19])
    (step,) = r.steps
    assert step.last_good == cs[8] and step.candidates == tuple(cs[9:20])


def test_the_progress_line_says_why_an_inconclusive_probe_counts_as_not_slower() -> None:
    r = Reading("INCONCLUSIVE", 1.002, (0.964, 1.042), "")
    p = Probe("c01", "G", 96, {BENCH: r}, seconds=27)
    line = wording.probe_line(2, 7, "c01", "G", 96, p, {}, (BENCH,), 31, Status.GOOD)
    assert line == ("[probe 2/~7]   -> not slower: test_perf.test_walk throughput ratio "
                    "1.002 [0.964-1.042], INCONCLUSIVE, but its interval lies above the level "
                    "halfway to the slower end: nearer the good level than the step searched "
                    "for (27 s)")


def test_outside_git_is_named(tmp_path: Path) -> None:
    with pytest.raises(RangeError) as e:
        commit_range(tmp_path, "HEAD~1", "HEAD")
    assert str(e.value) == (f"{tmp_path} is not a git checkout: run perfgate bisect inside "
                            "the repository whose history to search")


def test_the_rarer_lines_read_as_intended() -> None:
    cs = commits(32)
    p = Probe("c01", "G", 96, failure="the set-up command 'make' failed here (exit 2): x")
    assert wording.probe_line(3, 7, "c01", "G", 96, p, {}, (BENCH,), 1) == (
        "[probe 3/~7]   -> skipped: the set-up command 'make' failed here (exit 2): x (0 s)")
    _, r = bisect(cs, FakeProbe(cs, {cs[20]: 0.9}), max_probes=3)
    assert wording.summary(r, {}, {}, 0.02, 1)[-2] == (
        "stopped at the probe limit (--max-probes) before the search ended")
    noisy = Reading("INCONCLUSIVE", 0.97, (0.9, 1.05), "")
    step = Step("c04", "c05", (), Probe("c05", "c04", 384, {BENCH: noisy}, command="r"),
                (BENCH,))
    assert wording.step_lines(step, {}, {}, 0.02)[2] == (
        "  its own step was inconclusive: the noise hid the threshold")
    gone = Step("c04", "c05", (), Probe("c05", "c04", 96, failure="a side crashed",
                                        command="r"), (BENCH,))
    assert wording.step_lines(gone, {}, {}, 0.02)[1] == (
        "  its own step against its parent c04 could not be measured: a side crashed")


class Contradicting(FakeProbe):
    """The first BAD-vs-GOOD probe reads an improvement (a neighbour's load), the second
    one the true slowdown."""

    def __call__(self, commit: str, base: str, turns: int) -> Probe:
        if not self.calls:
            self.calls.append((commit, base, turns))
            r = Reading("IMPROVEMENT", 1.068, (1.002, 1.139), "")
            return Probe(commit, base, turns, {BENCH: r})
        return super().__call__(commit, base, turns)


def test_a_first_probe_that_contradicts_bad_is_measured_again() -> None:
    cs = commits(8)
    probe = Contradicting(cs, {cs[4]: 0.85})
    _, r = bisect(cs, probe)
    assert probe.calls[:2] == [(cs[-1], "G", 96), (cs[-1], "G", 192)]
    (step,) = r.steps
    assert step.first_bad == cs[4] and r.contradicted is not None


def test_a_commit_whose_test_errors_is_skipped_naming_the_error(repo: Path) -> None:
    from pytest_perfgate.cli.bisect.probe import PytestProbe, head_worktree
    from pytest_perfgate.report.readback import read_report

    (repo / "test_perf.py").write_text(
        "def test_walk(perfgate):\n    raise RuntimeError('broken at this commit')\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the test errors")
    head = git(repo, "rev-parse", "HEAD")
    with head_worktree(repo) as wt:
        probe = PytestProbe(wt, ["test_perf.py"], read_report)(head, "HEAD~1", 8)
    assert probe.status() is Status.SKIP
    assert probe.failure is not None and probe.failure.startswith(
        "the test failed here before it was judged: "), probe.failure
    assert "RuntimeError: broken at this commit" in probe.failure
    assert len(probe.failure) < 400
