"""Reviewing cassettes with git, in a real repository in tmp_path: `sakura-http diff REV --
PATH`, `diff --git REV PATH`, and `sakura-http git-setup` making `git diff` and `git log -p`
readable through `show --textconv`."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from sakura_http._format import Exchange
from tests.cli_support import JSON, assert_one_line_error, items, message, run, write_cassette

pytestmark = pytest.mark.skipif(
    subprocess.run(["git", "--version"], capture_output=True, check=False).returncode != 0,
    reason="git is not installed",
)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "repo"
    (root / "tests" / "fixtures").mkdir(parents=True)
    home = tmp_path / "home"
    home.mkdir()
    for key in [k for k in os.environ if k.startswith("GIT_")]:
        monkeypatch.delenv(key)
    # The venv's bin first, so git finds `sakura-http` as it does on a user's machine.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    for key, value in {
        "HOME": str(home),  # no user-wide git configuration
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Test",
        "GIT_AUTHOR_EMAIL": "test@example.test",
        "GIT_COMMITTER_NAME": "Test",
        "GIT_COMMITTER_EMAIL": "test@example.test",
        "GIT_PAGER": "cat",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(root)
    git(root, "init", "-q", "-b", "main")
    return root


def git(root: Path, *argv: str) -> str:
    done = subprocess.run(
        ["git", *argv], cwd=root, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _ask(prompt: str, answer: str) -> Exchange:
    return message(
        body=f'{{"messages":[{{"content":"{prompt}","role":"user"}}],"model":"m"}}'.encode(),
        response_headers=(*JSON, ("date", "Mon, 30 Nov 2026 12:00:00 GMT")),
        response_body=f'{{"content":[{{"text":"{answer}"}}]}}'.encode(),
        chunks=None,
    )


def _commit_then_change(root: Path) -> Path:
    cassette = write_cassette(root / "tests" / "fixtures" / "chat.jsonl", [_ask("red", "Apple")])
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "record")
    changed = replace(
        _ask("yellow", "Banana"),
        response_headers=(*JSON, ("date", "Tue, 01 Dec 2026 09:00:00 GMT")),
    )
    return write_cassette(cassette, [changed])


def test_diff_against_a_git_revision_needs_no_temporary_file(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _commit_then_change(repo)
    path = "tests/fixtures/chat.jsonl"
    result = run(capsys, "diff", "HEAD", "--", path)
    assert (result.code, result.err) == (1, "")
    lines = result.out.splitlines()
    assert lines[0] == "changed #1 POST https://api.example.test/v1/messages -> 200 " + (
        "(the request changed)"
    )
    assert '        -      "content": "red",' in lines
    assert '        +      "content": "yellow",' in lines
    assert any(line.startswith("    response header date:") for line in lines)
    quiet = run(capsys, "diff", "--ignore-header", "date", "--git", "HEAD", path)
    assert quiet.code == 1
    assert "date" not in quiet.out
    assert quiet.out.splitlines()[0] == lines[0]
    # From a sub-folder too: the path is relative to where the command runs.
    os.chdir(repo / "tests")
    assert run(capsys, "diff", "HEAD", "--", "fixtures/chat.jsonl").out == result.out


def test_diff_between_two_revisions_and_of_a_new_file(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette = _commit_then_change(repo)
    git(repo, "commit", "-q", "-am", "re-record")
    assert run(capsys, "diff", "HEAD~1", "HEAD", "--", cassette).code == 1
    assert run(capsys, "diff", "HEAD", "HEAD", "--", cassette).code == 0
    fresh = write_cassette(repo / "tests" / "fixtures" / "new.jsonl", [items()])
    result = run(capsys, "diff", "HEAD", "--", fresh)
    assert result.code == 1
    assert result.out.splitlines()[0] == (
        "added   #1 id=list-items GET https://api.example.test/v1/items -> 200"
    )


def test_git_revision_errors_are_one_line(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cassette = _commit_then_change(repo)
    for argv in (
        ["diff", "no-such-rev", "--", str(cassette)],
        ["diff", "no-such-rev", "--", "tests"],
        ["diff", "HEAD", "--", "tests/nowhere.jsonl"],
        ["diff", "HEAD", "--"],
        ["diff", str(cassette)],
    ):
        result = run(capsys, *argv)
        assert result.code == 2, argv
        assert len(result.err.splitlines()) == 1, result.err
        assert "Traceback" not in result.err
    forgot = run(capsys, "diff", "HEAD", cassette)
    assert forgot.code == 2
    assert f"run `sakura-http diff HEAD -- {cassette}`" in forgot.err


# What git-setup configures: the interpreter that ran it, so no PATH is needed.
TEXTCONV = f"{shlex.quote(sys.executable)} -m sakura_http show --textconv"
VENV_BIN = str(Path(sys.executable).parent)


def without_the_venv(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shell where neither `sakura-http` nor a Python with sakura_http is on PATH."""
    kept = [p for p in os.environ["PATH"].split(os.pathsep) if p and p != VENV_BIN]
    monkeypatch.setenv("PATH", os.pathsep.join(kept))
    assert shutil.which("sakura-http") is None


def test_git_setup_makes_git_diff_and_log_readable(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run(capsys, "git-setup")
    assert result.code == 0, result
    attributes = repo / ".gitattributes"
    assert result.out.splitlines() == [
        f"added to {attributes}: *.jsonl diff=sakura-http",
        f'set git config diff.sakura-http.textconv "{TEXTCONV}" (this repository only)',
        "`git diff` and `git log -p` now show cassettes one field per line",
    ]
    assert attributes.read_text() == "*.jsonl diff=sakura-http\n"
    assert git(repo, "config", "--local", "diff.sakura-http.textconv").strip() == TEXTCONV
    # git diff runs the driver from any shell: the virtual environment is not on PATH.
    without_the_venv(monkeypatch)
    again = run(capsys, "git-setup")  # idempotent
    assert again.out.splitlines()[0] == f"already in {attributes}: *.jsonl diff=sakura-http"
    assert attributes.read_text() == "*.jsonl diff=sakura-http\n"

    _commit_then_change(repo)
    diff = git(repo, "diff")
    assert '-          "content": "red",' in diff.splitlines()
    assert '+          "content": "yellow",' in diff.splitlines()
    assert "-response header date: Mon, 30 Nov 2026 12:00:00 GMT" in diff
    assert '{"method"' not in diff  # no raw JSON line anywhere
    git(repo, "commit", "-q", "-am", "re-record")
    log = git(repo, "log", "-p", "-1")
    assert '+          "text": "Banana"' in log


def test_git_setup_outside_a_repository_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "plain"
    outside.mkdir()
    monkeypatch.chdir(outside)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    for argv in (["git-setup"], ["git-setup", "--command", "my-textconv --flag"]):
        result = run(capsys, *argv)
        assert result.code == 2
        # --command used to overwrite the command's name: "sakura-http my-textconv --flag:"
        assert result.err.startswith("sakura-http git-setup: error: git rev-parse failed")
        assert len(result.err.splitlines()) == 1


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        ("a.jsonl\n*.py diff=other", "control character"),
        ("a.jsonl\r", "control character"),
        ("tests/\tx.jsonl", "control character"),
        ("!*.jsonl", "starts with '!'"),
        ("#*.jsonl", "starts with '#'"),
    ],
)
def test_git_setup_refuses_a_pattern_that_is_no_gitattributes_pattern(
    repo: Path, capsys: pytest.CaptureFixture[str], pattern: str, why: str
) -> None:
    result = run(capsys, "git-setup", "--pattern", "*.jsonl", "--pattern", pattern)
    assert_one_line_error(result)
    assert result.err.startswith(f"sakura-http git-setup: error: the pattern {pattern!r} ")
    assert why in result.err
    assert not (repo / ".gitattributes").exists()  # nothing written, not even the good one
    done = subprocess.run(["git", "config", "diff.sakura-http.textconv"], cwd=repo, check=False)
    assert done.returncode == 1  # not set either


def test_git_setup_quotes_a_pattern_with_spaces(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pattern = 'my "cassettes"/*.jsonl'
    assert run(capsys, "git-setup", "--pattern", pattern).code == 0
    line = '"my \\"cassettes\\"/*.jsonl" diff=sakura-http'
    assert (repo / ".gitattributes").read_text() == line + "\n"
    checked = git(repo, "check-attr", "diff", "--", 'my "cassettes"/a.jsonl', "other/a.jsonl")
    assert checked.splitlines()[0].endswith('cassettes\\"/a.jsonl": diff: sakura-http')
    assert checked.splitlines()[1].endswith("diff: unspecified")
    again = run(capsys, "git-setup", "--pattern", pattern)
    assert again.out.splitlines()[0].startswith("already in")


def test_git_setup_quotes_an_interpreter_path_with_spaces(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Python at a path a shell would split (and with a quote in it): git runs the textconv
    # through the shell, so the path must come back whole.
    folder = tmp_path / "my 'python' env"
    folder.mkdir()
    python = folder / "python3"
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(python))
    assert run(capsys, "git-setup").code == 0
    configured = git(repo, "config", "diff.sakura-http.textconv").strip()
    assert shlex.split(configured) == [str(python), "-m", "sakura_http", "show", "--textconv"]
    without_the_venv(monkeypatch)
    _commit_then_change(repo)
    diff = git(repo, "diff").splitlines()
    assert '-          "content": "red",' in diff
    assert '+          "content": "yellow",' in diff


def test_the_documented_two_line_recipe_works(repo: Path) -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    (recipe,) = [
        block
        for block in re.findall(r"^```sh\n(.*?)^```$", doc, flags=re.M | re.S)
        if ".gitattributes" in block
    ]
    assert len(recipe.splitlines()) == 2
    for line in recipe.splitlines():
        done = subprocess.run(line, shell=True, cwd=repo, capture_output=True, timeout=120)
        assert done.returncode == 0, (line, done.stderr)
    _commit_then_change(repo)
    diff = git(repo, "diff").splitlines()
    assert '-          "content": "red",' in diff
    assert '+          "content": "yellow",' in diff


# --- several cassettes: a re-recording reviewed as a whole ------------------------------------


def _rerecord(root: Path) -> Path:
    """Commit three cassettes in tests/fixtures (one in a sub-folder) and a note, then
    re-record: one changed, one deleted, one added, one untouched."""
    fixtures = root / "tests" / "fixtures"
    (fixtures / "sub").mkdir()
    write_cassette(fixtures / "chat.jsonl", [_ask("red", "Apple")])
    write_cassette(fixtures / "gone.jsonl", [items()])
    write_cassette(fixtures / "sub" / "same.jsonl", [items(), message()])
    (fixtures / "notes.txt").write_text("not a cassette\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "record")
    write_cassette(fixtures / "chat.jsonl", [_ask("yellow", "Banana")])
    (fixtures / "gone.jsonl").unlink()
    write_cassette(fixtures / "sub" / "new.jsonl", [items(id="fresh")])
    (fixtures / "notes.txt").write_text("changed, still not a cassette\n")
    return fixtures


def test_diff_of_a_folder_against_a_revision_diffs_every_changed_cassette(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _rerecord(repo)
    result = run(capsys, "diff", "HEAD", "--", "tests/fixtures")
    assert (result.code, result.err) == (1, "")
    lines = result.out.splitlines()
    headings = [line for line in lines if line.startswith("=== ")]
    assert headings == [
        "=== tests/fixtures/chat.jsonl",
        "=== tests/fixtures/gone.jsonl (removed)",
        "=== tests/fixtures/sub/new.jsonl (added)",
    ]
    at = lines.index("=== tests/fixtures/chat.jsonl")
    assert lines[at + 1] == (
        "changed #1 POST https://api.example.test/v1/messages -> 200 (the request changed)"
    )
    assert '        +      "content": "yellow",' in lines
    at = lines.index("=== tests/fixtures/gone.jsonl (removed)")
    assert lines[at + 1 : at + 3] == [
        "removed #1 id=list-items GET https://api.example.test/v1/items -> 200",
        "0 added, 1 removed, 0 changed, 0 unchanged",
    ]
    at = lines.index("=== tests/fixtures/sub/new.jsonl (added)")
    assert lines[at + 1] == "added   #1 id=fresh GET https://api.example.test/v1/items -> 200"
    assert lines[-1] == "cassettes: 1 added, 1 removed, 1 changed, 1 unchanged"
    assert "record-all" not in result.out + result.err

    # From inside the folder, and with the folder given as "."; the same cassettes.
    os.chdir(repo / "tests" / "fixtures")
    here = run(capsys, "diff", "HEAD", "--", ".")
    assert [line for line in here.out.splitlines() if line.startswith("=== ")] == [
        "=== chat.jsonl",
        "=== gone.jsonl (removed)",
        "=== sub/new.jsonl (added)",
    ]
    assert here.out.splitlines()[-1] == lines[-1]


def test_diff_of_a_folder_json_and_verbose(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _rerecord(repo)
    result = run(capsys, "diff", "--json", "HEAD", "--", "tests/fixtures")
    assert result.code == 1
    data = json.loads(result.out)
    assert data["summary"] == {"added": 1, "removed": 1, "changed": 1, "unchanged": 1}
    assert data["unreadable"] == []
    assert [(c["path"], c["status"]) for c in data["cassettes"]] == [
        ("tests/fixtures/chat.jsonl", "changed"),
        ("tests/fixtures/gone.jsonl", "removed"),
        ("tests/fixtures/sub/new.jsonl", "added"),
    ]
    chat = data["cassettes"][0]
    assert chat["changed"][0]["pairing"] == "method and url"
    assert [ref["id"] for ref in data["cassettes"][1]["removed"]] == ["list-items"]
    verbose = run(capsys, "diff", "--verbose", "HEAD", "--", "tests/fixtures")
    assert "=== tests/fixtures/sub/same.jsonl" in verbose.out.splitlines()
    assert "same    #2 POST https://api.example.test/v1/messages -> 200" in verbose.out


def test_diff_of_several_files_and_of_two_revisions(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixtures = _rerecord(repo)
    result = run(
        capsys, "diff", "HEAD", "--", fixtures / "chat.jsonl", "tests/fixtures/sub/same.jsonl"
    )
    assert result.code == 1
    assert [line for line in result.out.splitlines() if line.startswith("===")] == [
        f"=== {fixtures / 'chat.jsonl'}"
    ]
    assert result.out.splitlines()[-1] == "cassettes: 0 added, 0 removed, 1 changed, 1 unchanged"
    # A cassette deleted since the revision is shown as removed, not refused as missing.
    gone = run(capsys, "diff", "HEAD", "--", "tests/fixtures/gone.jsonl")
    assert gone.code == 1
    assert gone.out.splitlines()[0].startswith("removed #1 id=list-items")

    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "re-record")
    (fixtures / "chat.jsonl").write_text("edited on disk, not committed\n")
    between = run(capsys, "diff", "HEAD~1", "HEAD", "--", "tests")
    assert between.code == 1
    assert between.out.splitlines()[-1] == "cassettes: 1 added, 1 removed, 1 changed, 1 unchanged"
    assert "yellow" in between.out  # the committed re-recording, not the file on disk
    assert run(capsys, "diff", "HEAD", "HEAD", "--", "tests").out == (
        "no differences (cassettes: 0 added, 0 removed, 0 changed, 3 unchanged)\n"
    )


def test_a_cassette_in_the_folder_that_cannot_be_read_is_named_and_the_rest_are_diffed(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixtures = _rerecord(repo)
    (fixtures / "data.jsonl").write_text('{"not": "a cassette"}\n')
    result = run(capsys, "diff", "HEAD", "--", "tests/fixtures")
    assert result.code == 2
    assert result.err == (
        "sakura-http diff: error: tests/fixtures/data.jsonl: this is not a sakura-http "
        "cassette: its first line is not a cassette header (a JSON object with a "
        "schema_version)\n"
    )
    assert result.out.splitlines()[-1] == "cassettes: 1 added, 1 removed, 1 changed, 1 unchanged"


def test_a_folder_is_never_read_as_a_cassette(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It was: "HEAD:tests/fixtures:1: the header line is not valid JSON ...; re-record it with
    # `pytest --record-all`", git's listing of the folder read as a cassette.
    fixtures = _rerecord(repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "re-record")
    moved = repo / "tests" / "moved"
    fixtures.rename(moved)  # the folder is gone from disk: git's tree is still a folder
    result = run(capsys, "diff", "HEAD", "--", "tests/fixtures")
    assert (result.code, result.err) == (1, "")
    assert result.out.splitlines()[-1] == "cassettes: 0 added, 3 removed, 0 changed, 0 unchanged"
    file_and_folder = run(capsys, "diff", "--git", "HEAD", "tests/moved/chat.jsonl", "tests/moved")
    assert file_and_folder.code == 1
    shown = run(capsys, "show", "tests/moved")
    assert shown.code == 2
    assert shown.err == (
        "sakura-http show: error: tests/moved is a directory, not a cassette: name a cassette "
        "file in it\n"
    )


def test_a_directory_outside_a_repository_is_one_line_error(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = repo.parent / "elsewhere"
    (elsewhere / "fixtures").mkdir(parents=True)
    write_cassette(elsewhere / "fixtures" / "a.jsonl", [items()])
    os.chdir(elsewhere)
    result = run(capsys, "diff", "HEAD", "--", "fixtures")
    assert result.code == 2
    assert len(result.err.splitlines()) == 1, result.err
    assert result.err.startswith("sakura-http diff: error: cannot read HEAD:fixtures from git: ")
