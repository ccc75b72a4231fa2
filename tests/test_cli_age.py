"""Cassette age on the command line: `lint --max-age`, the day in `show`, `recorded_at` carried
over by `convert`, and left out of what `diff` compares."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from sakura_http._cassette import load_cassette
from sakura_http._format import encode_exchange
from sakura_http.cli._convert import convert_file
from sakura_http.cli._foreign import VcrImportError
from sakura_http.cli._lint import lint_bytes
from tests.cli_support import (
    assert_one_line_error,
    cassette_bytes,
    items,
    message,
    outage,
    run,
    write_cassette,
)

NOW = datetime.datetime(2026, 12, 1, 16, 25, tzinfo=datetime.timezone.utc)
TODAY = NOW.date()
OLD = datetime.date(2026, 3, 1)
FRESH = datetime.date(2026, 11, 20)


def _days_ago(days: int) -> datetime.date:
    """A day relative to the real today, for what runs the command with the real clock."""
    return datetime.datetime.now(datetime.timezone.utc).date() - datetime.timedelta(days=days)


# --- lint --max-age --------------------------------------------------------------------------


def test_lint_max_age_warns_once_per_file_naming_the_oldest_day_and_the_lines() -> None:
    data = cassette_bytes(
        [items(recorded_at=OLD), message(recorded_at=FRESH), items(id="b", recorded_at=OLD)]
    )
    (finding,) = lint_bytes(data, "c.jsonl", max_age=datetime.timedelta(days=90), now=NOW)
    assert (finding.severity, finding.check, finding.field) == ("warning", "age", "recorded_at")
    assert (finding.line, finding.count, finding.lines) == (2, 2, (2, 4))
    assert str(finding).startswith(
        "c.jsonl:2: warning: 2 exchanges were recorded more than 90d ago (before 2026-09-02), "
        "the oldest on 2026-03-01, on lines 2, 4: "
    )
    assert "sakura-http verify c.jsonl" in finding.message
    assert "pytest --record-all" in finding.message


def test_lint_reports_age_only_when_asked() -> None:
    data = cassette_bytes([items(recorded_at=OLD), outage()])
    assert lint_bytes(data, "c.jsonl", now=NOW) == []


def test_an_exchange_of_the_limit_s_own_day_is_not_yet_too_old() -> None:
    data = cassette_bytes([items(recorded_at=datetime.date(2026, 9, 2))])
    assert lint_bytes(data, "c.jsonl", max_age=datetime.timedelta(days=90), now=NOW) == []
    data = cassette_bytes([items(recorded_at=datetime.date(2026, 9, 1))])
    assert lint_bytes(data, "c.jsonl", max_age=datetime.timedelta(days=90), now=NOW)


def test_exchanges_without_a_day_are_one_age_unknown_warning() -> None:
    data = cassette_bytes([items(recorded_at=FRESH), outage(), message()])
    (finding,) = lint_bytes(data, "c.jsonl", max_age=datetime.timedelta(weeks=4), now=NOW)
    assert (finding.check, finding.line, finding.lines) == ("age-unknown", 3, (3, 4))
    assert "2 exchanges have no recorded_at" in finding.message
    assert "re-record the cassette (`pytest --record-all`) to date them" in finding.message


def test_the_lint_command_reads_max_age_and_fails_on_it_only_with_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_cassette(
        tmp_path / "c.jsonl", [items(recorded_at=_days_ago(100)), message(recorded_at=TODAY)]
    )
    result = run(capsys, "lint", "--max-age", "90d", path)
    assert result.code == 0
    assert "warning: 1 exchange was recorded more than 90d ago" in result.out
    assert result.out.endswith("1 file checked: 0 errors, 1 warning\n")
    assert run(capsys, "lint", "--max-age", "90d", "--strict", path).code == 1
    assert run(capsys, "lint", "--max-age", "15w", path).code == 0  # 105 days
    assert "[age]" not in run(capsys, "lint", "--max-age", "15w", path).out

    report = json.loads(run(capsys, "lint", "--max-age", "2304h", "--json", path).out)
    (found,) = report["findings"]
    assert (found["check"], found["line"], found["lines"]) == ("age", 2, [2])
    assert "more than 96d ago" in found["message"]  # 2304h, said in whole days


@pytest.mark.parametrize("age", ["90", "1y", "3 months", "0d", "-1d"])
def test_a_max_age_without_a_known_unit_is_a_one_line_usage_error(
    age: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_cassette(tmp_path / "c.jsonl", [items()])
    result = run(capsys, "lint", f"--max-age={age}", path)
    assert_one_line_error(result)
    assert "h (hours), d (days) or w (weeks)" in result.err


def test_lint_help_says_which_units_max_age_reads(capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, "lint", "--help")
    assert result.code == 0
    text = " ".join(result.out.split())
    assert "--max-age AGE" in text
    assert "h (hours), d (days) or w (weeks), such as 90d" in text


# --- show ------------------------------------------------------------------------------------


def test_show_lists_the_day_of_each_exchange_and_the_span_in_the_totals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_cassette(
        tmp_path / "c.jsonl", [items(recorded_at=OLD), message(recorded_at=FRESH), outage()]
    )
    lines = run(capsys, "show", path).out.splitlines()
    assert "  200  2026-03-01   0 B -> 27 B  https://api.example.test/v1/items" in lines[0]
    assert "  200  2026-11-20  37 B -> 18 B  " in lines[1]
    assert "  ERR  -            0 B -> 0 B   " in lines[2]
    assert "; recorded 2026-03-01 to 2026-11-20 (1 undated); " in lines[3]


def test_show_of_an_undated_cassette_has_no_day_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_cassette(tmp_path / "c.jsonl", [items()])
    out = run(capsys, "show", path).out
    assert "GET  200  0 B -> 27 B  https://api.example.test/v1/items" in out
    assert "recorded" not in out


def test_show_textconv_json_and_html_give_the_day(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_cassette(tmp_path / "c.jsonl", [items(recorded_at=OLD)])
    assert "recorded_at: 2026-03-01" in run(capsys, "show", "--textconv", path).out.splitlines()
    (shown,) = json.loads(run(capsys, "show", "--json", path).out)
    assert shown["recorded_at"] == "2026-03-01"
    page = tmp_path / "c.html"
    assert run(capsys, "show", "--html", page, path).code == 0
    assert "recorded 2026-03-01" in page.read_text()


# --- diff ------------------------------------------------------------------------------------


def test_diff_does_not_count_the_day_as_a_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = write_cassette(tmp_path / "old.jsonl", [items(recorded_at=OLD), message()])
    new = write_cassette(
        tmp_path / "new.jsonl", [items(recorded_at=FRESH), message(recorded_at=FRESH)]
    )
    result = run(capsys, "diff", old, new)
    assert result.code == 0, result.out


# --- repair ----------------------------------------------------------------------------------


def test_repair_keeps_the_days_of_the_lines_it_keeps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_cassette(tmp_path / "c.jsonl", [items(recorded_at=OLD)])
    whole = path.read_bytes()
    path.write_bytes(whole + encode_exchange(message(recorded_at=FRESH))[:-12])  # torn
    assert run(capsys, "repair", path).code == 0
    assert path.read_bytes() == whole
    assert [e.recorded_at for e in load_cassette(path).exchanges] == [OLD]


# --- convert ---------------------------------------------------------------------------------

CASSETTER = """\
version: 1
interactions:
- request:
    method: GET
    uri: https://api.example.test/v1/a
    headers: {}
    body:
      type: none
  response:
    status: 200
    headers: {}
    body:
      type: text
      content: a
  recorded_at: RECORDED
"""

VCRPY = """\
version: 1
interactions:
- request:
    method: GET
    uri: https://api.example.test/v1/a
    body: null
    headers: {}
  response:
    status: {code: 200, message: OK}
    headers: {}
    body: {string: a}
"""


@pytest.mark.parametrize(
    ("recorded", "day"),
    [
        ("2026-01-01T00:00:00Z", datetime.date(2026, 1, 1)),
        ("'2026-01-01T23:30:00-02:00'", datetime.date(2026, 1, 2)),  # UTC: the next day
        ("2026-01-01T10:00:00.123456789Z", datetime.date(2026, 1, 1)),
        ("'2026-01-01'", datetime.date(2026, 1, 1)),
    ],
)
def test_convert_carries_cassetter_s_recorded_at_over_as_its_utc_day(
    recorded: str, day: datetime.date, tmp_path: Path
) -> None:
    source, target = tmp_path / "c.yaml", tmp_path / "out.jsonl"
    source.write_text(CASSETTER.replace("RECORDED", recorded))
    convert_file(source, target)
    assert [e.recorded_at for e in load_cassette(target).exchanges] == [day]


def test_convert_leaves_an_exchange_without_a_source_day_undated(tmp_path: Path) -> None:
    # Converting is not recording: dating it today would hide how old it is.
    source, target = tmp_path / "vcr.yaml", tmp_path / "out.jsonl"
    source.write_text(VCRPY)
    convert_file(source, target)
    assert [e.recorded_at for e in load_cassette(target).exchanges] == [None]
    assert b"recorded_at" not in target.read_bytes()


def test_convert_refuses_a_recorded_at_it_cannot_read(tmp_path: Path) -> None:
    source, target = tmp_path / "c.yaml", tmp_path / "out.jsonl"
    source.write_text(CASSETTER.replace("RECORDED", "last tuesday"))
    with pytest.raises(VcrImportError, match="interaction 1: 'recorded_at' must be a date"):
        convert_file(source, target)
    assert not target.exists()
