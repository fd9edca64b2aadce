"""Every setting checked once, up front: a usage error naming the value and the fix, before
any test measures (each message rendered here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_perfgate.session import preflight
from pytest_perfgate.session.options import OptionError, Options, parse_alpha, parse_turns

PERF = """
def test_walk(perfgate):
    perfgate.measure(lambda: None, transitions=1)
"""


@pytest.fixture
def sandbox(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_perf=PERF)
    pytester.makeini("[pytest]\nperfgate_results_dir = results\nperfgate_machine = box\n")
    return pytester


def usage_error(p: pytest.Pytester, *args: str, **env: str) -> str:
    """Run pytest --perfgate in a subprocess; it must stop before measuring anything."""
    res = p.runpytest_subprocess("--perfgate", "-p", "no:cacheprovider", *args, timeout=120)
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str() + res.stderr.str()
    assert not (p.path / "results").exists()
    err = res.stderr.str()
    assert err.startswith("ERROR: perfgate: "), err
    return " ".join(err.split())


@pytest.mark.parametrize("text", ["0.7", "0.5", "50%", "abc", "-0.1"])
def test_alpha_is_below_one_half(text: str) -> None:
    with pytest.raises(OptionError) as e:
        parse_alpha(text)
    assert str(e.value) == (f"{text!r} is not a one-sided significance level: use a number "
                            "between 0 and 0.5 (exclusive: at 0.5 a coin flip would count as "
                            "significant), e.g. 0.01 or 1%")
    assert parse_alpha("1%") == pytest.approx(0.01) and parse_alpha("0.49") == 0.49


def test_ab_turns_need_two_for_the_paired_test() -> None:
    with pytest.raises(OptionError, match=r"^'1' is too small: use a whole number of turns "
                                          r">= 2, e.g. 96$"):
        parse_turns("1")


def test_alpha_flag_is_a_usage_error(sandbox: pytest.Pytester) -> None:
    assert "argument --perfgate-alpha: '0.7' is not a one-sided significance level" in \
        sandbox.runpytest_subprocess("--perfgate", "--perfgate-alpha=0.7").stderr.str()
    msg = usage_error(sandbox, "-o", "perfgate_alpha=0.7")
    assert "ini option perfgate_alpha: '0.7' is not a one-sided significance level" in msg


def test_malformed_asv_conf_is_a_usage_error(sandbox: pytest.Pytester) -> None:
    sandbox.makeini("[pytest]\nperfgate_machine = box\n")
    (sandbox.path / "asv.conf.json").write_text('{"results_dir": ')
    msg = usage_error(sandbox)
    assert "asv.conf.json is not valid JSON (asv would refuse it too)" in msg
    assert msg.endswith("(read for the default results dir; or give --perfgate-results-dir)")
    (sandbox.path / "asv.conf.json").write_text('{"results_dir": 3}')
    assert "results_dir 3 is not a folder name; set \"results_dir\": \"results\" or remove " \
        "the key" in usage_error(sandbox)


def test_results_dir_that_is_a_file(sandbox: pytest.Pytester) -> None:
    (sandbox.path / "blocker").write_text("a file")
    msg = usage_error(sandbox, "--perfgate-results-dir=blocker")
    assert msg.endswith("/blocker is a file, not a folder: give a folder (it is created if "
                        "missing), e.g. .perfgate/results")
    assert msg.startswith("ERROR: perfgate: --perfgate-results-dir ")
    msg = usage_error(sandbox, "--perfgate-results-dir=blocker/results")
    assert msg.endswith("/blocker is a file, not a folder: give a folder path")


def test_unwritable_results_dir(sandbox: pytest.Pytester, tmp_path: Path) -> None:
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    msg = usage_error(sandbox, f"--perfgate-results-dir={ro}/results")
    assert msg.endswith(f"cannot create files in {ro}: give a writable folder, or pass "
                        "--perfgate-record=false to gate without recording")


@pytest.mark.parametrize("flag", ["json", "markdown"])
def test_report_path_that_is_a_folder(sandbox: pytest.Pytester, flag: str) -> None:
    (sandbox.path / "out").mkdir()
    msg = usage_error(sandbox, f"--perfgate-{flag}=out")
    name = "perfgate.json" if flag == "json" else "perfgate.md"
    assert msg == (f"ERROR: perfgate: --perfgate-{flag} {sandbox.path}/out is a folder, not a "
                   f"file: give a file path, e.g. {sandbox.path}/out/{name}")


@pytest.mark.parametrize("flag", ["json", "markdown"])
def test_report_path_under_a_file(sandbox: pytest.Pytester, flag: str) -> None:
    (sandbox.path / "f").write_text("")
    msg = usage_error(sandbox, f"--perfgate-{flag}=f/sub/r.out")
    assert msg == (f"ERROR: perfgate: --perfgate-{flag} {sandbox.path}/f/sub/r.out: "
                   f"{sandbox.path}/f is a file, not a folder: give a path in a folder")


def test_json_and_markdown_on_one_file(sandbox: pytest.Pytester) -> None:
    msg = usage_error(sandbox, "--perfgate-json=r.json", "--perfgate-markdown=r.json")
    assert msg == (f"ERROR: perfgate: --perfgate-json {sandbox.path}/r.json and "
                   f"--perfgate-markdown {sandbox.path}/r.json name the same file: the "
                   "markdown summary would be written into the JSON report; give them "
                   "different paths")


def test_report_folders_given_by_the_user_are_created(sandbox: pytest.Pytester) -> None:
    res = sandbox.runpytest_subprocess("--perfgate", "--perfgate-window-time=0.01",
                                       "--perfgate-windows=2", "--perfgate-json=new/dir/r.json",
                                       "--perfgate-markdown=new/md/s.md", timeout=120)
    res.assert_outcomes(passed=1)
    assert json.loads((sandbox.path / "new/dir/r.json").read_text())["perfgate_report"] == 1
    assert (sandbox.path / "new/md/s.md").read_text().startswith("### perfgate")
    res.stdout.fnmatch_lines(["wrote the JSON report to */new/dir/r.json",
                              "wrote the markdown summary to */new/md/s.md"])


def test_bad_markers_are_one_usage_error_at_collection(sandbox: pytest.Pytester) -> None:
    sandbox.makepyfile(test_marks="""
        import pytest
        @pytest.mark.perfgate(threshold="10")
        def test_a(perfgate):
            raise AssertionError("never runs")
        @pytest.mark.perfgate(treshold=0.1)
        def test_b():
            pass
        @pytest.mark.perfgate(0.1)
        def test_c():
            pass
        @pytest.mark.perfgate(threshold=[0.1])
        def test_d():
            pass
        @pytest.mark.perfgate(threshold=0.1)
        def test_ok():
            pass
    """)
    for args in ((), ("--perfgate",)):  # a bad marker is a bug in smoke mode too
        res = sandbox.runpytest_subprocess("test_marks.py", *args, timeout=120)
        assert res.ret == pytest.ExitCode.USAGE_ERROR
        res.stderr.fnmatch_lines([
            "ERROR: perfgate: bad marker(s):",
            "  @pytest.mark.perfgate(threshold='10') on test_marks.py::test_a: '10' is out of "
            "range: use a fraction between 0 and 1 (exclusive), e.g. 0.05 or 5%",
            "  @pytest.mark.perfgate(treshold=0.1) on test_marks.py::test_b: unknown "
            "argument(s) treshold; it takes threshold, counts, memory_threshold, unit, e.g. "
            "@pytest.mark.perfgate(threshold=0.1)",
            "  @pytest.mark.perfgate(0.1) on test_marks.py::test_c: takes keyword arguments "
            "only, e.g. @pytest.mark.perfgate(threshold=0.1)",
            "  @pytest.mark.perfgate(threshold=[0.1]) on test_marks.py::test_d: [0.1] is not a "
            "fraction: use e.g. 0.05 or \"5%\""])
        assert "INTERNALERROR" not in res.stdout.str() + res.stderr.str()
        assert "test_ok" not in res.stderr.str()


def test_machine_from_a_bad_hostname(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("socket.gethostname", lambda: "my host")
    o = Options(enabled=True, results_dir=str(tmp_path))
    with pytest.raises(OptionError) as e:
        preflight.check(o, tmp_path, tmp_path, {})
    assert str(e.value).startswith("the hostname 'my host' is not a usable machine name: use")
    assert str(e.value).endswith(": set --perfgate-machine (or PERFGATE_MACHINE)")
    assert preflight.check(Options(enabled=True, results_dir=str(tmp_path), machine="box"),
                           tmp_path, tmp_path, {}) == []


def test_smoke_mode_checks_nothing_on_disk(tmp_path: Path) -> None:
    (tmp_path / "asv.conf.json").write_text("{")
    assert preflight.check(Options(enabled=False, json=str(tmp_path)), tmp_path, tmp_path,
                           {"json": "ini option perfgate_json"}) == []


def test_flags_without_perfgate_are_named_as_ignored(sandbox: pytest.Pytester) -> None:
    res = sandbox.runpytest_subprocess("--perfgate-json=r.json", "--perfgate-windows=3", "-rw",
                                       timeout=120)
    res.assert_outcomes(passed=1, warnings=1)
    res.stdout.fnmatch_lines(["*PytestConfigWarning: perfgate: --perfgate-windows, "
                              "--perfgate-json ignored: without --perfgate perf tests run in "
                              "smoke mode (nothing measured, recorded or written); add "
                              "--perfgate"])
    # located where the user set it, not in the plugin's code
    res.stdout.fnmatch_lines(["  the command line:0: PytestConfigWarning: perfgate: *"])
    assert "pytest_perfgate" not in res.stdout.str().split("warnings summary")[1]
    assert not (sandbox.path / "r.json").exists()


def test_ab_setup_without_ab_is_a_warning(tmp_path: Path) -> None:
    o = Options(enabled=True, results_dir=str(tmp_path), machine="box", ab_setup="make")
    assert preflight.check(o, tmp_path, tmp_path, {}) == [
        "--perfgate-ab-setup 'make' is ignored without --perfgate-ab"]


@pytest.mark.parametrize(("where", "says"), [
    ("file", "--perfgate-profile-dir {tmp}/file is a file, not a folder: give a folder"),
    ("file/sub", "--perfgate-profile-dir {tmp}/file/sub: {tmp}/file is a file, not a folder"),
])
def test_a_profile_dir_that_cannot_be_a_folder(tmp_path: Path, where: str, says: str) -> None:
    (tmp_path / "file").write_text("")
    o = Options(enabled=True, machine="m", profile_dir=str(tmp_path / where))
    with pytest.raises(OptionError) as e:
        preflight.check(o, tmp_path, tmp_path, {})
    assert says.format(tmp=tmp_path) in str(e.value)
    o = Options(enabled=True, machine="m", profile_dir=str(tmp_path / "new" / "dir"))
    assert preflight.check(o, tmp_path, tmp_path, {}) == []
