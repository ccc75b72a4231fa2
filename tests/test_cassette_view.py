"""What a test can read of its cassette: `RecordingTransport.exchanges`, `play_count` and
`unplayed()`, and the ``sakura_cassette`` fixture (the vcrpy ``cassette`` object's uses)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from sakura_http import CassetteMiss, RecordingTransport
from tests.drive import Driver
from tests.test_plugin import HEADER as HEADER_LINE
from tests.test_plugin import INI
from tests.test_transport import URL, Script, ex, write_cassette

FIRST = ex("GET", f"{URL}/1", status=200, response_body=b"one")
SECOND = ex("POST", URL, body=b'{"q": "tea"}', status=201, response_body=b"two")
THIRD = ex("GET", f"{URL}/3", status=404, response_body=b"")


def test_exchanges_are_the_cassettes_in_file_order(drive: Driver, tmp_path: Path) -> None:
    path = write_cassette(tmp_path / "c.jsonl", FIRST, SECOND, THIRD)
    transport = drive.transport(path)
    assert transport.exchanges == [FIRST, SECOND, THIRD]
    assert (transport.play_count, transport.unplayed()) == (0, [FIRST, SECOND, THIRD])
    drive.send(transport, "POST", URL, content=b'{"q": "tea"}')
    drive.send(transport, "GET", f"{URL}/1")
    assert transport.play_count == 2
    assert transport.unplayed() == [THIRD]
    assert transport.exchanges == [FIRST, SECOND, THIRD]  # the file's order, not the play order
    assert transport.exchanges[1].body == b'{"q": "tea"}'  # what a test asserts on
    transport.exchanges.clear()  # a copy: the cassette is not changed through it
    assert len(transport.exchanges) == 3
    drive.close(transport)


def test_a_repeat_counts_as_a_replay_and_a_recording_does_not(
    drive: Driver, tmp_path: Path
) -> None:
    path = write_cassette(tmp_path / "c.jsonl", FIRST)
    transport = drive.transport(path)
    for _ in range(3):  # allow_repeats: the last exchange answers again
        assert drive.send(transport, "GET", f"{URL}/1").content == b"one"
    assert transport.play_count == 3
    recorder = drive.transport(
        path, mode="new_episodes", outer=Script(drive, (200, {"text": "new"})).outer
    )
    drive.send(recorder, "GET", f"{URL}/new")
    assert (recorder.play_count, len(recorder.exchanges)) == (3, 2)
    assert recorder.exchanges[1].response_body == b"new"
    drive.close(recorder)
    drive.close(transport)


def test_every_transport_of_a_cassette_sees_the_same_session(drive: Driver, tmp_path: Path) -> None:
    # Code that builds a new client (and transport) per call: the view is the cassette's.
    path = write_cassette(tmp_path / "c.jsonl", FIRST, THIRD)
    one, other = drive.transport(path), drive.transport(path)
    drive.send(one, "GET", f"{URL}/1")
    drive.send(other, "GET", f"{URL}/3")
    assert one.play_count == other.play_count == 2
    assert one.unplayed() == other.unplayed() == []
    drive.close(one)
    drive.close(other)


def test_a_miss_is_not_a_play_and_a_new_session_starts_at_zero(tmp_path: Path) -> None:
    path = write_cassette(tmp_path / "c.jsonl", FIRST)
    with RecordingTransport(path) as transport:
        with pytest.raises(CassetteMiss):
            transport.handle_request(httpx.Request("GET", f"{URL}/2"))
        assert transport.play_count == 0
    with RecordingTransport(path) as again:
        assert (again.play_count, again.unplayed()) == (0, [FIRST])


def test_a_rerecording_shows_what_it_recorded_so_far(drive: Driver, tmp_path: Path) -> None:
    path = write_cassette(tmp_path / "c.jsonl", FIRST, SECOND)
    transport = drive.transport(path, mode="all", outer=Script(drive, (200, {"text": "x"})).outer)
    assert transport.exchanges == []
    drive.send(transport, "GET", f"{URL}/1")
    assert [e.response_body for e in transport.exchanges] == [b"x"]
    assert transport.play_count == 0
    drive.close(transport)


# --- the sakura_cassette fixture -------------------------------------------------------------

CASSETTE = (
    '{"method":"GET","url":"http://api.example.invalid/ping","headers":[["accept","*/*"]],'
    '"body":"","status":200,"response_headers":[],"response_body":"pong"}\n'
    '{"method":"POST","url":"http://api.example.invalid/ask","headers":[["accept","*/*"],'
    '["content-length","13"],["content-type","application/json"]],"body":"{\\"q\\":\\"tea\\"}",'
    '"status":200,"response_headers":[],"response_body":"green"}\n'
)

TESTS = """
import httpx
import pytest


@pytest.mark.cassette("api.jsonl")
def test_reads_what_it_replayed(sakura_transport, sakura_cassette):
    assert [e.method for e in sakura_cassette.exchanges] == ["GET", "POST"]
    with httpx.Client(transport=sakura_transport) as client:
        client.post("http://api.example.invalid/ask", json={"q": "tea"})
    assert sakura_cassette.play_count == 1
    assert [e.url for e in sakura_cassette.unplayed()] == ["http://api.example.invalid/ping"]
    assert sakura_cassette.exchanges[1].body == b'{"q":"tea"}'


@pytest.mark.cassette("api.jsonl")
def test_any_client_of_the_cassette_counts(sakura_recording, sakura_cassette):
    # A client the code under test builds on the same cassette (an SDK fixture, patch_clients).
    with httpx.Client(transport=sakura_recording("api.jsonl")) as client:
        client.get("http://api.example.invalid/ping")
        client.post("http://api.example.invalid/ask", json={"q": "tea"})
    assert sakura_cassette.play_count == 2
    assert not sakura_cassette.unplayed()  # vcrpy's cassette.all_played


def test_without_a_marker_it_is_the_default_cassette(sakura_cassette):
    default = "test_view/test_without_a_marker_it_is_the_default_cassette.jsonl"
    assert sakura_cassette.path.endswith(default)
    assert (sakura_cassette.exchanges, sakura_cassette.play_count) == ([], 0)
"""


def test_the_sakura_cassette_fixture_is_the_tests_cassette(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    fixtures = pytester.path / "tests" / "fixtures"
    fixtures.mkdir(parents=True)
    (fixtures / "api.jsonl").write_text(HEADER_LINE + CASSETTE)
    (pytester.path / "tests" / "test_view.py").write_text(TESTS)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=3)
    assert sorted(p.name for p in fixtures.iterdir()) == ["api.jsonl"]  # nothing written


# --- the "coming from vcrpy" table -----------------------------------------------------------


def test_the_vcrpy_table_names_every_vcrpy_and_pytest_recording_feature() -> None:
    import inspect
    import re

    vcr = pytest.importorskip("vcr")
    doc = (Path(__file__).resolve().parent.parent / "docs" / "pytest.md").read_text()
    section = doc.split("### Coming from vcrpy", 1)[1]
    rows = section.split("\n\n")[2].splitlines()[2:]
    left = " ".join(row.split(" | ")[0] for row in rows)
    named = set(re.findall(r"[A-Za-z_][\w-]*", left))
    options = set(inspect.signature(vcr.VCR).parameters)
    cassette = {"play_count", "all_played", "requests", "responses"}
    # pytest-recording: its options, markers and fixtures.
    plugin = {"record-mode", "block-network", "allowed-hosts", "disable-recording"}
    plugin |= {"vcr", "default_cassette", "block_network", "allowed_hosts", "vcr_config"}
    plugin |= {"vcr_cassette_dir", "default_cassette_name", "pytest_recording_configure"}
    assert options | cassette | plugin <= named, sorted((options | cassette | plugin) - named)
    for row in rows:  # two cells, the second one saying what to use
        assert row.startswith("| ") and row.count(" | ") == 1 and row.endswith(" |"), row
