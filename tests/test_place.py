"""Place: a pytest run's working directory, rootdir and ini file carried into another
revision's worktree at the same path relative to the repository (no processes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_perfgate.modes.place import Place, PlaceError
from pytest_perfgate.session.naming import find_ini, project_root


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    top = tmp_path / "repo"
    (top / ".git").mkdir(parents=True)
    (top / "perf").mkdir()
    (top / "perf" / "test_s.py").write_text("def test_s(): pass\n")
    (top / "pytest.ini").write_text("[pytest]\n")
    return top


def test_a_run_in_a_subfolder_stands_in_the_same_subfolder_of_the_worktree(
        repo: Path, tmp_path: Path) -> None:
    tree = tmp_path / "wt"
    place = Place.of(repo, repo / "perf", repo, repo / "pytest.ini")
    assert place.at(place.cwd, tree) == tree / "perf"
    assert place.at(place.cwd, None) == repo / "perf"
    assert place.test_arg("perf/test_s.py::test_s[a/b::c]", tree) == "test_s.py::test_s[a/b::c]"
    (tree / "perf").mkdir(parents=True)
    (tree / "pytest.ini").write_text("[pytest]\n")
    assert place.args(tree) == ("-c", str(tree / "pytest.ini"), "--rootdir", str(tree))
    assert place.args(None) == ("-c", str(repo / "pytest.ini"), "--rootdir", str(repo))


def test_relative_and_variable_paths_are_taken_from_where_pytest_started(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERFGATE_TEST_TOP", str(repo))
    place = Place.of(repo, repo / "perf", Path("$PERFGATE_TEST_TOP"), Path("../pytest.ini"),
                     explicit_ini=True, confcutdir=Path(".."), options=("-p", "no:x"))
    assert place.rootdir == repo and place.inifile == repo / "pytest.ini"
    tree = tmp_path / "wt"
    (tree).mkdir()
    (tree / "pytest.ini").write_text("")
    assert place.args(tree) == ("-c", str(tree / "pytest.ini"), "--rootdir", str(tree),
                                f"--confcutdir={tree}", "-p", "no:x")


def test_paths_outside_the_repository_are_the_same_for_both(repo: Path, tmp_path: Path
                                                            ) -> None:
    place = Place.of(repo, repo, repo, Path(os.devnull), explicit_ini=True)
    tree = tmp_path / "wt"
    place.prepare(tree)  # /dev/null is outside: nothing to look for
    assert place.args(tree)[:2] == ("-c", os.devnull)
    assert place.map_args(["/etc/x.py", "-k", "walk", f"--rootdir={repo}/perf",
                           f"{repo}/perf/test_s.py::test_s", "perf/test_s.py"], tree) == [
        "/etc/x.py", "-k", "walk", f"--rootdir={tree}/perf", f"{tree}/perf/test_s.py::test_s",
        "perf/test_s.py"]
    entries = os.pathsep.join([f"{repo}/src", "/opt/lib", ""])
    assert place.pythonpath(entries, tree) == os.pathsep.join([f"{tree}/src", "/opt/lib", ""])


def test_prepare_makes_a_folder_new_in_the_head_and_refuses_a_missing_explicit_ini(
        repo: Path, tmp_path: Path) -> None:
    tree = tmp_path / "wt"
    (repo / "new" / "deep").mkdir(parents=True)
    Place.of(repo, repo / "new" / "deep", repo / "new").prepare(tree)
    assert (tree / "new" / "deep").is_dir()
    explicit = Place.of(repo, repo, repo, repo / "perf" / "local.ini", explicit_ini=True)
    with pytest.raises(PlaceError) as e:
        explicit.prepare(tree)
    assert str(e.value) == (
        f"the configuration file given with -c, {repo}/perf/local.ini, is not in the other "
        f"revision (looked for {tree}/perf/local.ini): commit it there, or give a file "
        "outside the repository")
    # A discovered ini file the other revision lacks is left to that revision's search.
    found = Place.of(repo, repo, repo, repo / "perf" / "local.ini")
    found.prepare(tree)
    assert found.args(tree) == ("--rootdir", str(tree))


def test_missing_names_the_file_and_where_it_was_looked_for(repo: Path, tmp_path: Path
                                                           ) -> None:
    tree = tmp_path / "wt"
    (tree / "perf").mkdir(parents=True)
    place = Place.of(repo, repo / "perf", repo)
    assert place.missing("perf/test_s.py::test_s", tree) == (
        f"its file perf/test_s.py is not in that revision (looked for {tree}/perf/test_s.py)")
    (tree / "perf" / "test_s.py").write_text("")
    assert place.missing("perf/test_s.py::test_s", tree) is None
    # what the collecting run said of the test wins over its node id (which need not name
    # its file: a file outside the rootdir has ids such as "::test_s")
    where = (str(repo / "perf" / "test_s.py"), "::test_s")
    assert place.missing("::test_s", tree, where) is None
    assert place.test_arg("::test_s", tree, where) == "test_s.py::test_s"
    assert place.test_arg("::test_s", None, ("test_s.py", "::test_s")) == "test_s.py::test_s"


def test_the_command_line_finds_the_history_where_pytest_keeps_it(repo: Path) -> None:
    # ini file at the top: from any folder below it, the top
    assert project_root(repo / "perf") == (repo, {})
    (repo / "pytest.ini").write_text("[pytest]\nperfgate_results_dir = hist\n")
    assert project_root(repo / "perf") == (repo, {"perfgate_results_dir": "hist"})
    # no ini file: the checkout's top, as the plugin's stable root
    (repo / "pytest.ini").unlink()
    assert project_root(repo / "perf") == (repo, {})
    # an ini file in the subfolder: that folder
    (repo / "perf" / "tox.ini").write_text("[pytest]\nperfgate_machine = m\n")
    assert project_root(repo / "perf") == (repo / "perf", {"perfgate_machine": "m"})
    # -c and --rootdir as pytest was given them
    (repo / "cfg").mkdir()
    (repo / "cfg" / "my.cfg").write_text("[pytest]\nperfgate_results_dir = r\n")
    assert project_root(repo, Path("cfg/my.cfg")) == (repo / "cfg", {"perfgate_results_dir": "r"})
    assert project_root(repo / "perf", None, Path("..")) == (repo, {"perfgate_machine": "m"})


@pytest.mark.parametrize(("name", "text", "settings"), [
    ("pyproject.toml", "[tool.pytest.ini_options]\nperfgate_machine = 'a'\n",
     {"perfgate_machine": "a"}),
    ("pyproject.toml", "[tool.pytest]\nperfgate_machine = 'b'\n", {"perfgate_machine": "b"}),
    ("setup.cfg", "[tool:pytest]\nperfgate_machine = c\n", {"perfgate_machine": "c"}),
    ("pytest.toml", "[pytest]\nperfgate_machine = 'd'\n", {"perfgate_machine": "d"}),
    (".pytest.ini", "", {}),
])
def test_find_ini_reads_each_kind_of_configuration_file(tmp_path: Path, name: str, text: str,
                                                        settings: dict[str, str]) -> None:
    (tmp_path / name).write_text(text)
    (tmp_path / "sub").mkdir()
    assert find_ini(tmp_path / "sub") == (tmp_path / name, settings)


def test_find_ini_passes_by_files_without_pytest_settings_and_garbage(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "tox.ini").write_text("[tox]\n")
    (sub / "setup.cfg").write_text("\x00garbage[[")
    (sub / "pyproject.toml").write_bytes(b"\xff\xfe not toml")
    # nothing with pytest settings: the first pyproject.toml pytest can read names the rootdir
    assert find_ini(sub) == (tmp_path / "pyproject.toml", {})
