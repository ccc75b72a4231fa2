"""Cassette age in pytest: ``sakura_max_age`` lists in the summary the cassettes the run used
that hold exchanges older than that, and ``SAKURA_HTTP_STRICT=1`` makes them fail the run
(sakura_http/pytest_plugin/_summary.py), through real pytest runs."""

from __future__ import annotations

import datetime
import json

import pytest

from tests.test_plugin import HEADER, INI, write_test


def _days_ago(days: int) -> str:
    # The plugin reads the real clock at the end of the run: the days are relative to it, far
    # from the limits, so a run that crosses midnight still sees the same ages.
    day = datetime.datetime.now(datetime.timezone.utc).date() - datetime.timedelta(days=days)
    return day.isoformat()


def _line(query: str, recorded_days_ago: int | None) -> str:
    obj: dict[str, object] = {
        "method": "GET",
        "url": f"http://api.example.invalid/q?v={query}",
        "headers": [["accept", "*/*"]],
        "body": "",
        "status": 200,
        "response_headers": [["content-type", "text/plain"]],
        "response_body": query,
    }
    if recorded_days_ago is not None:
        obj["recorded_at"] = _days_ago(recorded_days_ago)
    return json.dumps(obj, separators=(",", ":")) + "\n"


TESTS = """
import httpx
import pytest

@pytest.mark.parametrize("name", ["old", "fresh", "undated"])
def test_plays(sakura_recording, name):
    transport = sakura_recording(f"{name}.jsonl")
    with httpx.Client(transport=transport) as client:
        assert client.get(f"http://api.example.invalid/q?v={name}").text == name
        if name == "old":  # its second exchange, recorded later
            assert client.get("http://api.example.invalid/q?v=x").text == "x"
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """Three cassettes: one with an exchange recorded 200 days ago, one recorded 10 days ago,
    one from before exchanges were dated."""
    fixtures = pytester.path / "tests" / "fixtures"
    fixtures.mkdir(parents=True)
    (fixtures / "old.jsonl").write_text(HEADER + _line("old", 200) + _line("x", 10))
    (fixtures / "fresh.jsonl").write_text(HEADER + _line("fresh", 10))
    (fixtures / "undated.jsonl").write_text(HEADER + _line("undated", None))
    write_test(pytester, TESTS)
    return pytester


def _ini(pytester: pytest.Pytester, max_age: str | None) -> None:
    pytester.makeini(INI + (f"sakura_max_age = {max_age}\n" if max_age is not None else ""))


def test_the_summary_lists_the_cassettes_older_than_sakura_max_age(
    project: pytest.Pytester,
) -> None:
    _ini(project, "90d")
    result = project.runpytest()
    result.assert_outcomes(passed=3)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*= sakura-http: cassettes older than sakura_max_age (90d) =*",
            f"tests/fixtures/old.jsonl: 1 of 2 exchanges recorded more than 90d ago (the oldest "
            f"on {_days_ago(200)})",
            "The APIs may have changed since: check them with `pytest --verify`*",
            "Age unknown (*): tests/fixtures/undated.jsonl; re-record them with "
            "`pytest --record-all` to date them",
        ]
    )
    result.stdout.no_fnmatch_line("*fresh.jsonl*")


def test_strict_turns_the_list_into_a_failure_that_says_what_to_do(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ini(project, "12w")
    monkeypatch.setenv("SAKURA_HTTP_STRICT", "1")
    result = project.runpytest()
    result.assert_outcomes(passed=3)  # every test passed; the run fails
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "tests/fixtures/old.jsonl: 1 of 2 exchanges recorded more than 12w ago*",
            "SAKURA_HTTP_STRICT=1: the run fails because of them. Re-record them in a run "
            "without SAKURA_HTTP_STRICT (which forbids recording), or raise sakura_max_age",
        ]
    )


def test_strict_does_not_fail_on_cassettes_of_unknown_age_or_young_enough(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ini(project, "300d")
    monkeypatch.setenv("SAKURA_HTTP_STRICT", "1")
    result = project.runpytest()
    result.assert_outcomes(passed=3)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["*= sakura-http: cassettes of unknown age =*", "Age unknown (*undated.jsonl*"]
    )
    result.stdout.no_fnmatch_line("*old.jsonl*")


def test_without_sakura_max_age_nothing_is_said_even_when_strict(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ini(project, None)
    monkeypatch.setenv("SAKURA_HTTP_STRICT", "1")
    result = project.runpytest()
    assert result.ret == 0
    result.stdout.no_fnmatch_line("*than sakura_max_age*")
    result.stdout.no_fnmatch_line("*unknown age*")


def test_only_the_cassettes_the_run_used_are_listed(project: pytest.Pytester) -> None:
    _ini(project, "90d")
    result = project.runpytest("-k", "fresh")
    result.assert_outcomes(passed=1, deselected=2)
    result.stdout.no_fnmatch_line("*old.jsonl*")
    result.stdout.no_fnmatch_line("*than sakura_max_age*")


def test_a_bad_sakura_max_age_is_a_usage_error_naming_the_units(
    project: pytest.Pytester,
) -> None:
    _ini(project, "3 months")
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*sakura-http: the ini option sakura_max_age: '3 months' is not an age*h (hours), "
         "d (days) or w (weeks)*"]
    )  # fmt: skip


def test_workers_cassettes_are_checked_by_the_controller(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ini(project, "90d")
    monkeypatch.setenv("SAKURA_HTTP_STRICT", "1")
    result = project.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["tests/fixtures/old.jsonl: 1 of 2 exchanges recorded*"])
